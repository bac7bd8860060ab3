"""A PostgreSQL store ranked from its postings keeps no GIN index on its search vector.

Such a store never runs ``@@`` (its searches read the postings side table), so a GIN index on
``search_vector`` would only cost every insert (ADR 0044). A store without postings still has
it: its ``where=`` searches match through it. A database written before the index was left
out loses it when the store is next opened, and searches answer the same.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from loom_memory import MemoryEntry, PostgresMemoryStore, PostgresTemporalStore

pytestmark = pytest.mark.postgres

_ENTRIES = [
    MemoryEntry(id="a", content={"text": "vacuum the table, then vacuum the index"}),
    MemoryEntry(id="b", content={"text": "a long running transaction bloats the table"}),
]


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only: SQLite has no GIN index")
    engine = create_engine(db_url)
    yield engine
    engine.dispose()


def _gin_indexes(engine: Engine, table: str) -> list[str]:
    """The GIN indexes on ``table`` (read from the catalog, by access method)."""
    query = text(
        "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_class t ON t.oid = x.indrelid JOIN pg_am a ON a.oid = i.relam "
        "WHERE t.relname = :table AND a.amname = 'gin' ORDER BY i.relname"
    )
    with engine.connect() as conn:
        return list(conn.scalars(query, {"table": table}))


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_postings_store_has_no_gin_index(engine: Engine) -> None:
    """A store built with postings creates no GIN index on its search vector."""
    store = PostgresTemporalStore(engine, table_prefix="kb_")
    store.append("k", _ENTRIES)
    assert _gin_indexes(engine, store.entries.name) == []
    assert [e.id for e in store.search("k", "vacuum table")] == ["a", "b"]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_store_without_postings_keeps_its_gin_index(engine: Engine) -> None:
    """Negative control: the catalog probe sees the GIN index a plain store searches with."""
    store = PostgresMemoryStore(engine, table_prefix="plain_")
    assert _gin_indexes(engine, store.entries.name) == ["plain_entries_search"]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_existing_gin_index_is_dropped_on_open_and_searches_answer_the_same(
    engine: Engine,
) -> None:
    """A postings store written with the index (older code) loses it when next opened."""
    store = PostgresTemporalStore(engine, table_prefix="kb_")
    store.append("k", _ENTRIES)
    before = [e.id for e in store.search("k", "vacuum transaction")]
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE INDEX kb_entries_search ON kb_entries USING gin (search_vector)"
        )
    assert _gin_indexes(engine, "kb_entries") == ["kb_entries_search"]
    reopened = PostgresTemporalStore(engine, table_prefix="kb_")
    assert _gin_indexes(engine, "kb_entries") == []
    assert [e.id for e in reopened.search("k", "vacuum transaction")] == before
