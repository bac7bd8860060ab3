"""Who and what an execution ran for: its ``tenant``, ``user``, ``session`` and ``tags``.

Given once, when the execution starts (``loom.run(name, labels=Labels(...), **arguments)``),
stored on its ``Created`` event, kept by resume and fork, and used to select executions
(``loom.executions(tenant=...)``, ``loom executions list --tenant ...``). ADR 0034 says why
they are opaque strings: they are stored in clear, never redacted, so erasure can later name a
subject (a tenant, a user) by them; an email address or a name does not belong here, an
account id does.

One rule checks every label, here, before anything is written: a string, not empty, at most
:data:`MAX_LABEL_LENGTH` characters, no surrounding spaces, and no control, format (bidi,
zero-width) or surrogate character, so a label printed by ``executions list`` or matched by a
filter is what it looks like.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Final

import msgspec

from loom_runtime.errors import LabelError

MAX_LABEL_LENGTH: Final = 200
"""Characters in one label: room for a UUID, a URN or a path-like tenant id."""
MAX_TAGS: Final = 32
"""Tags on one execution: enough to select by, few enough to read in a listing."""
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
"""Controls, format characters (bidi overrides, zero-width), lone surrogates."""


class Labels(msgspec.Struct, frozen=True, kw_only=True):
    """An execution's labels, checked; each is optional, ``tags`` is a set kept sorted.

    ``tags`` is a set of plain strings, not a mapping: a filter asks "has every one of these
    tags", and ``key=value`` in a tag string gives a mapping's reading when one is wanted.
    """

    tenant: str | None = None
    user: str | None = None
    session: str | None = None
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("tenant", "user", "session"):
            value = getattr(self, name)
            if value is not None:
                check_label(value, label=name)
        msgspec.structs.force_setattr(self, "tags", checked_tags(self.tags))

    def matches(self, wanted: Labels) -> bool:
        """Whether these labels have every label ``wanted`` sets (and every one of its tags)."""
        return (
            (wanted.tenant is None or wanted.tenant == self.tenant)
            and (wanted.user is None or wanted.user == self.user)
            and (wanted.session is None or wanted.session == self.session)
            and set(wanted.tags).issubset(self.tags)
        )


def check_label(value: object, *, label: str) -> str:
    """``value`` if it can be a label, else :class:`LabelError` saying what to change."""
    if not isinstance(value, str):
        raise LabelError(
            f"{label} must be a string (an opaque id such as an account id), not "
            f"{type(value).__name__}",
            label=label,
        )
    if not value or value != value.strip():
        raise LabelError(
            f"{label} {value!r} is empty or has surrounding spaces; give the id itself "
            "(leave the label out when there is none)",
            label=label,
        )
    if len(value) > MAX_LABEL_LENGTH:
        raise LabelError(
            f"{label} is {len(value)} characters long; a label holds at most "
            f"{MAX_LABEL_LENGTH} (use an id, not a description)",
            label=label,
        )
    refused = next((c for c in value if unicodedata.category(c) in _REFUSED_CATEGORIES), None)
    if refused is not None:
        raise LabelError(
            f"{label} {value!r} contains U+{ord(refused):04X}, a control or invisible "
            "character that would make two different labels look alike; remove it",
            label=label,
        )
    return value


def checked_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """``tags`` checked, without duplicates, sorted: a set, stored the same whatever order it
    was given in. A single string is refused (it would be taken as its characters)."""
    if isinstance(tags, str | bytes) or not isinstance(tags, Iterable):
        raise LabelError(
            f"tags must be a collection of strings (a tuple, list or set), not {tags!r}: "
            "write tags=('a-tag',) for one",
            label="tags",
        )
    unique = sorted({check_label(tag, label="tags") for tag in tags})
    if len(unique) > MAX_TAGS:
        raise LabelError(
            f"{len(unique)} tags given; an execution holds at most {MAX_TAGS}",
            label="tags",
        )
    return tuple(unique)


NO_LABELS: Final = Labels()
"""An execution given no labels."""
