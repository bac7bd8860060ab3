"""The `MemoryStore` seam: three required verbs, five optional ones, and the rules they share.

A key (a ``str``) names an ORDERED LIST of entries, read back in APPEND order: not timestamp
order (one turn's entries share a timestamp) and not a set (appending an entry twice keeps two).

The optional verbs are separate small protocols because PRESENCE IS THE FEATURE FLAG: a caller
tests ``isinstance(store, SupportsRemove)`` and takes a correct fallback when it is false. A
method that exists only to raise "not supported" would advertise a capability the store lacks
and turn that fallback into a failure, so a backend without a capability omits the method.

* :class:`SupportsReplace` - atomic rewrite of a key. Not an optimisation: eviction rewrites a
  whole list, and clear-then-append loses the key if the process dies in between.
* :class:`SupportsRemove` - delete the entries whose id is in ``ids`` (every one of them: ids
  are handles, not a uniqueness constraint). Entries without an id never match.
* :class:`SupportsSearch` - the entries of one key matching any term of ``query``, best first
  by the backend's own ranking, at most ``limit`` (clamped to :data:`MAX_SEARCH_LIMIT`).
* :class:`SupportsValidity` - entries valid between two log positions: ``append_at`` a
  position, ``end_validity`` at a later one, and ``read_as_of``/``search_as_of`` a position.
  On such a store ``read`` and ``search`` see the CURRENT entries (those not ended), and every
  search ranks with the statistics of exactly the entries it admits: the current ones, or
  those valid at the position. A key's history never changes how its present (or any past
  state) ranks; the conformance kit pins that.
* :class:`SupportsClose` - release connections.

The argument checks at the bottom are shared by every backend so that they refuse alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from loom_memory.entry import MemoryEntry, too_long
from loom_memory.errors import InvalidArgumentError, InvalidKeyError, InvalidLimitError
from loom_memory.text import PLAIN, Tokenizer
from loom_runtime import text_problem

DEFAULT_SEARCH_LIMIT = 10
"""How many hits :meth:`SupportsSearch.search` returns when the caller does not say."""

MAX_SEARCH_LIMIT = 100
"""Larger limits are clamped to this: a prompt cannot use more hits, and a huge limit is a bug."""


@runtime_checkable
class MemoryStore(Protocol):
    """The required verbs: every store appends, reads and clears a key's ordered list."""

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Add ``entries`` to the end of the list at ``key``, all or none."""
        ...

    def read(self, key: str) -> list[MemoryEntry]:
        """Return the list at ``key`` in append order (``[]`` for a key never written)."""
        ...

    def clear(self, key: str) -> None:
        """Remove every entry at ``key``; other keys are untouched."""
        ...


@runtime_checkable
class SupportsReplace(Protocol):
    """Optional: replace a key's whole list atomically (the old list survives a failure)."""

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Make ``entries`` the list at ``key`` in one atomic step."""
        ...


@runtime_checkable
class SupportsRemove(Protocol):
    """Optional: delete entries by id without rewriting the key."""

    def remove(self, key: str, ids: Iterable[str]) -> None:
        """Delete every entry at ``key`` whose id is in ``ids``; keep the rest in order."""
        ...


@runtime_checkable
class SupportsSearch(Protocol):
    """Optional: relevance search within one key (terms OR-ed, ranking the backend's)."""

    def search(
        self, key: str, query: str, *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> list[MemoryEntry]:
        """Return at most ``limit`` entries at ``key`` matching any term of ``query``."""
        ...


@runtime_checkable
class SupportsValidity(Protocol):
    """Optional: entries valid from one log position until another, read and searched as of
    a position. ``read``/``search`` of such a store see only the current (unended) entries;
    ``append`` without a position makes entries valid from position 0."""

    def append_at(self, key: str, entries: Sequence[MemoryEntry], position: int) -> None:
        """Add ``entries`` to the end of ``key``, valid from log ``position`` until ended."""
        ...

    def end_validity(self, key: str, ids: Iterable[str], position: int) -> None:
        """End, at ``position``, the current entries at ``key`` whose id is in ``ids``: they
        leave ``read``/``search`` and stay visible as of any earlier position. Entries ended
        already keep the position they ended at."""
        ...

    def read_as_of(self, key: str, position: int) -> list[MemoryEntry]:
        """The entries at ``key`` valid at ``position`` (``from <= position < to``), in
        append order."""
        ...

    def search_as_of(
        self, key: str, query: str, position: int, *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> list[MemoryEntry]:
        """As ``search``, among (and ranked by the statistics of) the entries valid at
        ``position``."""
        ...


@runtime_checkable
class SupportsClose(Protocol):
    """Optional: release what the store holds (connections, files); safe to call twice."""

    def close(self) -> None:
        """Release the store's resources."""
        ...


def remove_entries(store: MemoryStore, key: str, ids: Iterable[str]) -> None:
    """Remove entries by id from any store: natively if it can, else by read-filter-rewrite.

    The fallback is correct, merely O(size of the key), and it is correct only because ids
    round-trip through every backend (the conformance kit checks that on stores without
    ``remove`` too). It prefers ``replace`` (atomic); a store with neither is rewritten by clear
    and append, which a crash between the two would lose, so give a durable store ``replace``.
    """
    check_key(key)
    wanted = check_ids(ids)
    if isinstance(store, SupportsRemove):
        store.remove(key, wanted)
        return
    current = store.read(key)
    kept = [entry for entry in current if entry.id not in wanted]
    if len(kept) == len(current):
        return
    if isinstance(store, SupportsReplace):
        store.replace(key, kept)
    else:
        store.clear(key)
        store.append(key, kept)


def check_key(key: object) -> str:
    """Return ``key`` if it is a ``str`` of storable text, else raise :class:`InvalidKeyError`."""
    if not isinstance(key, str):
        raise InvalidKeyError(key)
    problem = text_problem(key)
    if problem is not None:
        raise InvalidKeyError(key, problem=problem)
    return key


def check_ids(ids: Iterable[str], *, bounded: bool = False) -> frozenset[str]:
    """Return ``ids`` as a set of ``str``; a bare string is refused (it would mean its letters)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidArgumentError(
            f"ids must be an iterable of str such as a list, got {ids!r}", parameter="ids"
        )
    given = tuple(ids)
    for entry_id in given:
        if not isinstance(entry_id, str):
            raise InvalidArgumentError(
                f"ids must all be str, got {type(entry_id).__name__} {entry_id!r}",
                parameter="ids",
            )
        problem = text_problem(entry_id) or (too_long(entry_id) if bounded else None)
        if problem is not None:
            shown = entry_id if len(entry_id) <= 60 else f"{entry_id[:60]}..."
            raise InvalidArgumentError(f"id {shown!r} {problem}", parameter="ids")
    return frozenset(given)


MAX_POSITION = 2**63 - 1
"""The largest log position: positions are stored as 64-bit integers (SQL ``BIGINT``)."""


def check_position(position: object) -> int:
    """Return ``position`` if it is a log position (an int from 0 to :data:`MAX_POSITION`),
    else raise: past it, SQLite overflowed and PostgreSQL refused, each its own way."""
    if (
        isinstance(position, bool)
        or not isinstance(position, int)
        or not 0 <= position <= MAX_POSITION
    ):
        raise InvalidArgumentError(
            f"position must be a log position (an int from 0 to 2**63 - 1), got {position!r}",
            parameter="position",
        )
    return position


def check_search(
    key: object, query: object, limit: object, tokenizer: Tokenizer = PLAIN
) -> tuple[list[str], int]:
    """Check a search call; return its distinct terms (``tokenizer``'s) and the limit clamped
    to the maximum."""
    check_key(key)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidLimitError(limit)
    if not isinstance(query, str):
        raise InvalidArgumentError(
            f"query must be a str, got {type(query).__name__}", parameter="query"
        )
    return tokenizer.query_terms(query), min(limit, MAX_SEARCH_LIMIT)
