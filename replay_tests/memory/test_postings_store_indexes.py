"""A PostgreSQL store ranked from its postings keeps no GIN index on its search vector, and
no foreign key from its postings to its entries.

Such a store never runs ``@@`` (its searches read the postings side table), so a GIN index on
``search_vector`` would only cost every insert (ADR 0044). A store without postings still has
it: its ``where=`` searches match through it. A database written before the index was left
out loses it when the store is next opened, and searches answer the same. Likewise the foreign
key older code declared, checked for every posting inserted: a trigger deletes a deleted
entry's postings instead, and a store with the key is moved at its next open.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError

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


def _foreign_keys(engine: Engine, table: str) -> list[str]:
    """The foreign keys of ``table`` (read from the catalog)."""
    query = text(
        "SELECT c.conname FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
        "WHERE t.relname = :table AND c.contype = 'f' ORDER BY c.conname"
    )
    with engine.connect() as conn:
        return list(conn.scalars(query, {"table": table}))


def _postings_of(engine: Engine, store: PostgresTemporalStore) -> dict[str, int]:
    """Per entry id still in the table, or ``?`` for an entry gone, its postings' count."""
    assert store.postings is not None
    with engine.connect() as conn:
        found = conn.exec_driver_sql(
            f"SELECT coalesce(e.entry_id, '?'), count(*) FROM {store.postings.name} p "
            f"LEFT JOIN {store.entries.name} e ON e.seq = p.seq GROUP BY 1 ORDER BY 1"
        )
        return dict(found.tuples().all())


def _deletes_postings_with_their_entries(engine: Engine, store: PostgresTemporalStore) -> None:
    """A ``remove`` and a caller's own ``DELETE`` each take their entries' postings along."""
    store.append("k", _ENTRIES)
    store.append("other", [MemoryEntry(id="c", content={"text": "vacuum"})])
    assert set(_postings_of(engine, store)) == {"a", "b", "c"}
    store.remove("k", ["a"])
    assert set(_postings_of(engine, store)) == {"b", "c"}
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {store.entries.name} WHERE key = 'k'")
    assert set(_postings_of(engine, store)) == {"c"}
    assert [e.id for e in store.search("other", "vacuum table")] == ["c"]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_postings_store_deletes_postings_by_trigger_not_a_foreign_key(engine: Engine) -> None:
    """No foreign key from the postings to the entries: PostgreSQL checked it for every
    posting inserted, a fifth of a corpus sync; a statement-level trigger deletes a deleted
    entry's postings instead, whoever deletes it (ADR 0044, amended "no foreign key")."""
    store = PostgresTemporalStore(engine, table_prefix="kb_")
    assert _foreign_keys(engine, "kb_postings") == []
    _deletes_postings_with_their_entries(engine, store)


def _as_older_code_wrote_it(engine: Engine) -> None:
    """Take away what only this code makes: the postings' triggers and their functions."""
    with engine.begin() as conn:
        for name in ("delete", "truncate"):
            conn.exec_driver_sql(f"DROP TRIGGER kb_entries_postings_{name} ON kb_entries")
            conn.exec_driver_sql(f"DROP FUNCTION kb_postings_on_{name}()")


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_store_with_the_older_foreign_key_gets_the_trigger_once(engine: Engine) -> None:
    """A postings store older code wrote (a cascading foreign key, no trigger) is moved at its
    next open: the key dropped, the trigger made; the open after that changes nothing."""
    PostgresTemporalStore(engine, table_prefix="kb_")
    _as_older_code_wrote_it(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "ALTER TABLE kb_postings ADD FOREIGN KEY (seq) REFERENCES kb_entries (seq) "
            "ON DELETE CASCADE"
        )
    assert _foreign_keys(engine, "kb_postings") == ["kb_postings_seq_fkey"]
    reopened = PostgresTemporalStore(engine, table_prefix="kb_")
    assert _foreign_keys(engine, "kb_postings") == []
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        PostgresTemporalStore(engine, table_prefix="kb_")
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert seen, "the probe saw no statement of the open"
    assert not [s for s in seen if s.lstrip().upper().startswith(("ALTER", "CREATE", "DROP"))]
    _deletes_postings_with_their_entries(engine, reopened)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_postings_dropped_by_hand_are_made_again_with_their_trigger(engine: Engine) -> None:
    """An older store whose postings table was dropped by hand (no trigger, no function):
    the open makes the table and the triggers, so deletes take their postings along (the
    key made them go before; a trigger made only with the entries table would not)."""
    PostgresTemporalStore(engine, table_prefix="kb_")
    _as_older_code_wrote_it(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE kb_postings")
    reopened = PostgresTemporalStore(engine, table_prefix="kb_")
    assert _foreign_keys(engine, "kb_postings") == []
    _deletes_postings_with_their_entries(engine, reopened)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_truncate_of_the_entries_is_refused(engine: Engine) -> None:
    """``TRUNCATE`` fires no delete trigger: allowed, it would leave the postings (and the
    counts) to the rows that reuse their numbers after ``RESTART IDENTITY``, found by terms
    they do not hold. It is refused, as the key refused it, and nothing changes."""
    store = PostgresTemporalStore(engine, table_prefix="kb_")
    store.append("k", _ENTRIES)
    before = _postings_of(engine, store)
    refused = pytest.raises(DBAPIError, match="TRUNCATE of kb_entries would leave its postings")
    with refused, engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE kb_entries RESTART IDENTITY")
    assert _postings_of(engine, store) == before
    assert [e.id for e in store.search("k", "vacuum table")] == ["a", "b"]
