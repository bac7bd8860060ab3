"""`InMemoryMemoryStore`: the reference backend, with every optional verb and an IDF scorer.

It keeps each entry as the bytes :func:`~loom_memory.entry.encode_entries` produced and decodes
on read, exactly like the durable backends, so a caller mutating a dict after ``append`` cannot
change what was remembered and the reference cannot pass a clause a real backend would fail
for want of serialisation. Its contents die with the process: it is for tests and for the
rebuilt-from-the-log projection, never the only copy of anything.

Ranking is a plain TF-IDF sum: for each query term present in an entry, its count in the entry
times ``log(1 + (n - df + 0.5) / (df + 0.5))`` over the ``n`` entries the search admits (the
key's current entries, or those valid at the position searched). Ties keep append order.
Ranking is the backend's choice; this one is simple enough to reason about in a test.

Validity is two fields of a row: the position it is valid from (0 unless appended with
``append_at``) and the one it was ended at (None while current).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from loom_memory.entry import MemoryEntry, decode_entry, encode_entries
from loom_memory.store import (
    DEFAULT_SEARCH_LIMIT,
    check_ids,
    check_key,
    check_position,
    check_search,
)
from loom_memory.text import PLAIN, Tokenizer


@dataclass(frozen=True, slots=True)
class _Row:
    data: bytes
    entry_id: str | None
    terms: Counter[str]
    valid_from: int = 0
    valid_to: int | None = None

    @classmethod
    def of(cls, entry: MemoryEntry, data: bytes, valid_from: int, tokenizer: Tokenizer) -> _Row:
        entry_id = entry.id if isinstance(entry.id, str) else None
        return cls(data, entry_id, Counter(tokenizer.entry_terms(entry)), valid_from)

    def valid_at(self, position: int | None) -> bool:
        """Current (``position`` None), or valid at ``position``."""
        if position is None:
            return self.valid_to is None
        return self.valid_from <= position and (self.valid_to is None or position < self.valid_to)


class InMemoryMemoryStore:
    """A process-local store implementing every verb of the seam."""

    def __init__(self, *, tokenizer: Tokenizer = PLAIN) -> None:
        self.tokenizer = tokenizer
        """The terms this store indexes and searches (:class:`~loom_memory.Tokenizer`)."""
        self._rows: dict[str, list[_Row]] = {}

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Add ``entries`` to the end of the list at ``key``, all or none."""
        self.append_at(key, entries, 0)

    def append_at(self, key: str, entries: Sequence[MemoryEntry], position: int) -> None:
        """Add ``entries`` to the end of ``key``, valid from ``position`` until ended."""
        check_key(key)
        rows = _rows_for(entries, check_position(position), self.tokenizer)
        if rows:
            self._rows.setdefault(key, []).extend(rows)

    def read(self, key: str) -> list[MemoryEntry]:
        """Return the current list at ``key`` in append order."""
        return self._read(key, None)

    def read_as_of(self, key: str, position: int) -> list[MemoryEntry]:
        """Return the entries at ``key`` valid at ``position``, in append order."""
        return self._read(key, check_position(position))

    def end_validity(self, key: str, ids: Iterable[str], position: int) -> None:
        """End the current entries at ``key`` whose id is in ``ids`` at ``position``."""
        check_key(key)
        wanted = check_ids(ids)
        check_position(position)
        rows = self._rows.get(key)
        if rows is not None:
            self._rows[key] = [
                replace(row, valid_to=position)
                if row.valid_to is None and row.entry_id in wanted
                else row
                for row in rows
            ]

    def clear(self, key: str) -> None:
        """Remove every entry at ``key``."""
        self._rows.pop(check_key(key), None)

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Make ``entries`` the list at ``key``; the new list is built before the old one goes."""
        check_key(key)
        rows = _rows_for(entries, 0, self.tokenizer)
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
        """Return the best ``limit`` current entries at ``key`` containing any term of ``query``."""
        return self._search(key, query, limit, None)

    def search_as_of(
        self, key: str, query: str, position: int, *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> list[MemoryEntry]:
        """As :meth:`search`, among the entries valid at ``position``."""
        return self._search(key, query, limit, check_position(position))

    def _read(self, key: str, position: int | None) -> list[MemoryEntry]:
        rows = self._rows.get(check_key(key), [])
        return [decode_entry(row.data) for row in rows if row.valid_at(position)]

    def _search(self, key: str, query: str, limit: int, position: int | None) -> list[MemoryEntry]:
        """Rank the rows ``position`` admits with their own statistics (see the module doc)."""
        terms, limit = check_search(key, query, limit, self.tokenizer)
        rows = [row for row in self._rows.get(key, []) if row.valid_at(position)]
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


def _rows_for(entries: Sequence[MemoryEntry], valid_from: int, tokenizer: Tokenizer) -> list[_Row]:
    encoded = encode_entries(entries)
    return [
        _Row.of(entry, data, valid_from, tokenizer)
        for entry, data in zip(entries, encoded, strict=True)
    ]


def _idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))
