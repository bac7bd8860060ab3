"""The postings an append writes: one row per distinct term of each entry, with its count.

Postings are inserted through the driver with a statement compiled once per store (ADR 0044),
not through SQLAlchemy's per-row parameter processing; these tests read the table itself, so
a parameter sent in the wrong column or a statement compiled for another table would show.
Each test runs on SQLite and on PostgreSQL (``postgres`` marker; skipped without a server).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Integer, create_engine, select

from loom_memory import (
    MemoryEntry,
    PostgresTemporalStore,
    SqliteTemporalStore,
    entry_terms,
)
from loom_memory.validity import TemporalSqlStore

pytestmark = pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


@pytest.fixture
def store(db_url: str) -> Iterator[TemporalSqlStore]:
    engine = create_engine(db_url)
    store_class = PostgresTemporalStore if db_url.startswith("postgresql") else SqliteTemporalStore
    yield store_class(engine, columns=[Column("revision", Integer, nullable=True)])
    engine.dispose()


_FIRST = [
    MemoryEntry(id="a", content={"text": "vacuum the table, then vacuum the index"}),
    MemoryEntry(id="b", content={"text": "a long running transaction bloats the table"}),
]
_SECOND = [MemoryEntry(id="c", content={"text": "autovacuum autovacuum thresholds"})]


def _written(store: TemporalSqlStore) -> dict[str, Counter[str]]:
    """Each entry's postings as stored: entry id -> term -> count."""
    assert store.postings is not None
    postings, entries = store.postings.c, store.entries.c
    query = select(entries.entry_id, postings.term, postings.tf).join_from(
        store.postings, store.entries, postings.seq == entries.seq
    )
    found: dict[str, Counter[str]] = {}
    with store.engine.connect() as conn:
        for entry_id, term, tf in conn.execute(query):
            found.setdefault(entry_id, Counter())[term] = tf
    return found


def test_each_entry_has_one_posting_per_distinct_term_with_its_count(
    store: TemporalSqlStore,
) -> None:
    """Two appends (the compiled statement reused) write exactly the terms' counts."""
    store.append_at("k", _FIRST, 1, values={"revision": 1})
    store.append_at("k", _SECOND, 2, values={"revision": 1})
    expected = {str(entry.id): Counter(entry_terms(entry)) for entry in _FIRST + _SECOND}
    assert _written(store) == expected
    assert expected["a"]["vacuum"] == 2  # the counts are not all 1: a swapped column shows


def test_an_append_rolled_back_with_its_caller_leaves_no_posting(
    store: TemporalSqlStore,
) -> None:
    """Postings go in the caller's transaction: rolled back with it, none is left."""
    with store.engine.connect() as conn, conn.begin() as transaction:
        store.append_at("k", _FIRST, 1, conn=conn)
        transaction.rollback()
    assert _written(store) == {}
    assert [entry.id for entry in store.search("k", "vacuum")] == []
