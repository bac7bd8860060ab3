"""The rules every retrieval mode shares: its arguments, its metadata filter, what is recorded.

:meth:`KnowledgeBase.retrieve <loom_knowledge.KnowledgeBase.retrieve>` and
:class:`~loom_knowledge.HybridRetriever` answer in three modes (``lexical``, ``vector``,
``hybrid``); the checks, the filter grammar and the decision's input live here once, with no
numpy, so the lexical path never imports the vector one.

The filter (``filter=``) selects passages by their document's ``meta``; its grammar is small
on purpose, so that it means the same on every store and in every mode:

* ``{"team": "sre"}``: the meta value under ``team`` equals ``"sre"``;
* ``{"team": ["sre", "dba"]}``: it equals any of them;
* several fields: every one must hold;
* a meta value that is a list (``"tags": ["linux", "dns"]``) matches when any element does;
* wanted values are ``str``, ``int``, ``float`` or ``bool``; numbers compare as numbers
  (``1 == 1.0``), a ``bool`` only equals a ``bool``; a document without the field never
  matches.

A filter restricts WHICH passages are ranked, never HOW: scores (BM25 statistics, cosines)
are those of the whole corpus. A lexical or vector answer is the unfiltered ranking with the
passages the filter refuses left out, still ``limit`` long when that many match; a hybrid one
fuses those two filtered rankings (ADR 0045).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, get_args

from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import InvalidOptionError
from loom_memory import MAX_SEARCH_LIMIT

Mode = Literal["lexical", "vector", "hybrid"]
MODES: Final = get_args(Mode)

FilterValue: TypeAlias = str | int | float | bool
MetaFilter: TypeAlias = Mapping[str, FilterValue | list[FilterValue] | tuple[FilterValue, ...]]
"""``{meta field: wanted value, or a list of values any of which will do}`` (module docstring)."""

OVERFETCH: Final = 4
"""How much deeper each filtered lexical search goes than the last, until ``limit`` passages
pass the filter or the ranking runs out."""

_MISSING: Final = object()


def check_arguments(query: object, mode: object, limit: object) -> None:
    """Refuse a query, mode or limit no mode can answer, before anything is read or recorded."""
    if not isinstance(query, str):
        raise InvalidOptionError(f"query must be a str, not {type(query).__name__}")
    if mode not in MODES:
        raise InvalidOptionError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidOptionError(f"limit must be a positive int, got {limit!r}")


def check_filter(filter: object) -> dict[str, list[FilterValue]] | None:
    """``filter`` in the one form it is recorded and matched in (lists of wanted values), or
    None for no filter; anything outside the grammar is refused with what to write instead."""
    if filter is None:
        return None
    grammar = (
        'write {"field": value} for an exact match or {"field": [value, ...]} for any of '
        "several, with str, int, float or bool values"
    )
    if not isinstance(filter, Mapping) or not filter:
        raise InvalidOptionError(
            f"filter must be a non-empty dict of meta fields, not {filter!r}: {grammar}, "
            "or pass filter=None for every passage"
        )
    checked: dict[str, list[FilterValue]] = {}
    for field, wanted in filter.items():
        if not isinstance(field, str) or not field:
            raise InvalidOptionError(f"filter field {field!r} must be a non-empty str: {grammar}")
        values = list(wanted) if isinstance(wanted, list | tuple) else [wanted]
        if not values:
            raise InvalidOptionError(
                f"filter field {field!r} lists no value, so nothing could match: {grammar}"
            )
        for value in values:
            if not _is_value(value):
                raise InvalidOptionError(
                    f"filter field {field!r} wants {value!r}, which is not a plain value "
                    f"(operators and nested fields are not supported): {grammar}"
                )
        checked[field] = values
    return checked


def matches(meta: Mapping[str, Any] | None, filter: Mapping[str, list[FilterValue]]) -> bool:
    """Whether a passage whose document has ``meta`` passes a checked ``filter``."""
    for field, wanted in filter.items():
        have = _MISSING if meta is None else meta.get(field, _MISSING)
        if have is _MISSING:
            return False
        held = have if isinstance(have, list) else [have]
        if not any(_equal(one, value) for one in held for value in wanted):
            return False
    return True


class MetaIndex:
    """Which of ``metas`` (by position) hold each value of each field a filter has asked for,
    built per field on first use: a filter over a whole corpus then costs a few lookups, not a
    :func:`matches` call per passage, with the same answer. Values are keyed as :func:`_equal`
    compares them (numbers as numbers, a bool only with a bool); only ``str``, ``int``,
    ``float`` and ``bool`` values are keyed, the only kinds a wanted value can equal."""

    def __init__(self, metas: Sequence[Mapping[str, Any] | None]) -> None:
        self._metas = metas
        self._fields: dict[str, dict[tuple[bool, FilterValue], list[int]]] = {}

    def rows(self, filter: Mapping[str, list[FilterValue]]) -> list[int]:
        """The positions of the metas that pass a checked ``filter``, ascending."""
        found: set[int] | None = None
        for field, wanted in filter.items():
            if field not in self._fields:
                self._fields[field] = self._by_value(field)
            by_value = self._fields[field]
            held = set().union(*(by_value.get(_key(value), ()) for value in wanted))
            found = held if found is None else found & held
        return sorted(found or ())

    def _by_value(self, field: str) -> dict[tuple[bool, FilterValue], list[int]]:
        by_value: dict[tuple[bool, FilterValue], list[int]] = {}
        for position, meta in enumerate(self._metas):
            have = _MISSING if meta is None else meta.get(field, _MISSING)
            for one in have if isinstance(have, list) else [have]:
                if isinstance(one, str | int | float):  # bool is an int
                    by_value.setdefault(_key(one), []).append(position)
        return by_value


def filtered(
    search: Callable[[int], list[Passage]],
    limit: int,
    filter: Mapping[str, list[FilterValue]] | None,
) -> list[Passage]:
    """The best ``limit`` passages of a ranking that pass ``filter``, at most
    :data:`~loom_memory.store.MAX_SEARCH_LIMIT` of them, filtered or not.

    ``search(n)`` is the unfiltered top ``n``, NOT capped: a store ranks deterministically
    (ties by passage id), so a deeper search extends a shallower one. It is asked deeper
    until ``limit`` passages pass or it returns fewer than asked (the ranking is exhausted):
    the filter never cuts the answer short of what matches. Only the answer is capped, as the
    store caps an unfiltered search; a capped ``search`` would return 100 where more were
    asked, which reads as exhausted, and hide every match ranked below them.
    """
    limit = min(limit, MAX_SEARCH_LIMIT)
    if filter is None:
        return search(limit)
    depth = limit * OVERFETCH
    while True:
        hits = search(depth)
        kept = [passage for passage in hits if matches(passage.meta, filter)]
        if len(kept) >= limit or len(hits) < depth:
            return kept[:limit]
        depth *= OVERFETCH


def retrieval_input(
    scope: str,
    query: str,
    limit: int,
    filter: Mapping[str, list[FilterValue]] | None,
    **vector: object,
) -> dict[str, object]:
    """The input a retrieval decision records: what a replay compares, so a changed query,
    limit, filter, mode, model or floor is a divergence.

    A lexical retrieval without a filter records exactly what it always did (scope, query,
    limit), so executions recorded before modes and filters existed replay unchanged; the
    filter appears only when given, and the vector modes add their mode, model and floor.
    """
    recorded: dict[str, object] = {"scope": scope, "query": query, "limit": limit}
    recorded.update(vector)
    if filter is not None:
        recorded["filter"] = dict(filter)
    return recorded


def _is_value(value: object) -> bool:
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    return isinstance(value, str | int)  # bool is an int


def _equal(have: object, value: FilterValue) -> bool:
    """Equality as the grammar says: numbers as numbers, a bool only with a bool."""
    return isinstance(have, bool) == isinstance(value, bool) and have == value


def _key(value: FilterValue) -> tuple[bool, FilterValue]:
    """A dict key equal for two values exactly when :func:`_equal` holds between them
    (Python hashes equal numbers alike, ``1`` and ``1.0`` included)."""
    return (isinstance(value, bool), value)
