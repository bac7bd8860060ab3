"""`InMemoryMemoryStore`: the reference backend, with every optional verb and an IDF scorer.

It keeps each entry as the bytes :func:`~loom_memory.entry.encode_entries` produced and decodes
on read, exactly like the durable backends, so a caller mutating a dict after ``append`` cannot
change what was remembered and the reference cannot pass a clause a real backend would fail
for want of serialisation. Its contents die with the process: it is for tests and for the
rebuilt-from-the-log projection, never the only copy of anything.

Ranking is a plain TF-IDF sum: for each query term present in an entry, its count in the entry
times ``log(1 + (n - df + 0.5) / (df + 0.5))`` over the key's ``n`` entries. Ties keep append
order. Ranking is the backend's choice; this one is simple enough to reason about in a test.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loom_memory.entry import MemoryEntry, decode_entry, encode_entries
from loom_memory.store import DEFAULT_SEARCH_LIMIT, check_ids, check_key, check_search
from loom_memory.text import entry_terms


@dataclass(frozen=True, slots=True)
class _Row:
    data: bytes
    entry_id: str | None
    terms: Counter[str]

    @classmethod
    def of(cls, entry: MemoryEntry, data: bytes) -> _Row:
        entry_id = entry.id if isinstance(entry.id, str) else None
        return cls(data, entry_id, Counter(entry_terms(entry)))


class InMemoryMemoryStore:
    """A process-local store implementing every verb of the seam."""

    def __init__(self) -> None:
        self._rows: dict[str, list[_Row]] = {}

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Add ``entries`` to the end of the list at ``key``, all or none."""
        check_key(key)
        rows = _rows_for(entries)
        if rows:
            self._rows.setdefault(key, []).extend(rows)

    def read(self, key: str) -> list[MemoryEntry]:
        """Return the list at ``key`` in append order."""
        return [decode_entry(row.data) for row in self._rows.get(check_key(key), [])]

    def clear(self, key: str) -> None:
        """Remove every entry at ``key``."""
        self._rows.pop(check_key(key), None)

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Make ``entries`` the list at ``key``; the new list is built before the old one goes."""
        check_key(key)
        rows = _rows_for(entries)
        if rows:
            self._rows[key] = rows
        else:
            self._rows.pop(key, None)

    def remove(self, key: str, ids: Iterable[str]) -> None:
        """Delete every entry at ``key`` whose id is in ``ids``."""
        check_key(key)
        wanted = check_ids(ids)
        rows = self._rows.get(key)
        if rows is not None:
            self._rows[key] = [row for row in rows if row.entry_id not in wanted]

    def search(
        self, key: str, query: str, *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> list[MemoryEntry]:
        """Return the best ``limit`` entries at ``key`` containing any term of ``query``."""
        terms, limit = check_search(key, query, limit)
        rows = self._rows.get(key, [])
        if not terms or not rows:
            return []
        idf = {term: _idf(len(rows), sum(term in row.terms for row in rows)) for term in terms}
        scored = [
            (score, position)
            for position, row in enumerate(rows)
            if (score := sum(row.terms[term] * weight for term, weight in idf.items())) > 0
        ]
        scored.sort(key=lambda hit: (-hit[0], hit[1]))
        return [decode_entry(rows[position].data) for _, position in scored[:limit]]


def _rows_for(entries: Sequence[MemoryEntry]) -> list[_Row]:
    encoded = encode_entries(entries)
    return [_Row.of(entry, data) for entry, data in zip(entries, encoded, strict=True)]


def _idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))
