"""Arguments that must be several of one kind: checked and read once, refused typed.

Shared by grounding (passages, turns, tools) and citations (the cited ids, the passages
shown): a ``str`` iterated as characters once turned the citation ``"ab"`` into the ids ``a``
and ``b``, a never-shown document judged grounded (ADR 0018, amended "grounding inputs")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from loom_knowledge.errors import InvalidArgumentError

T = TypeVar("T")


def items_of(value: object, name: str, kind: type[T]) -> tuple[T, ...]:
    """``value`` as a tuple of ``kind``; :class:`InvalidArgumentError` naming ``name`` (and the
    position of an item of another kind) otherwise. A ``str``, ``bytes``, a mapping and a
    lone ``kind`` are refused, not iterated: a str as characters, a dict as its keys. Read
    once, so a generator is not used up by a first check."""
    if isinstance(value, (str, bytes, Mapping, kind)) or not isinstance(value, Iterable):
        hint = f": pass [{name}]" if isinstance(value, kind) and kind is not str else ""
        raise InvalidArgumentError(
            f"{name} must be a list of {kind.__name__}, not a {type(value).__name__} "
            f"{value!r:.80}{hint}"
        )
    items = tuple(value)
    for position, item in enumerate(items):
        if not isinstance(item, kind):
            raise InvalidArgumentError(
                f"{name}[{position}] must be a {kind.__name__}, not {type(item).__name__} "
                f"{item!r:.80}"
            )
    return items
