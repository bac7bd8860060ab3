"""PostgreSQL backend: the kit against a real server, plus its index and transaction tests.

Run with a server via ``scripts/with-postgres .venv/bin/python -m pytest replay_tests/memory``;
without ``LOOM_TEST_PG_URL`` every test here skips with one reason naming the variable. Each
test gets its own table prefix and drops its tables afterwards, so a shared server stays clean;
the kit classes share a database per worker, built once and reset for each test
(``postgres_kit``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Column, Connection, Engine, Integer, create_engine, event, true
from sqlalchemy.exc import SQLAlchemyError

from loom_memory import BackendError, MemoryEntry, PostgresMemoryStore, PostgresTemporalStore
from loom_memory.conformance import MemoryStoreContract
from replay_tests.conftest import PostgresKit

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not PG_URL, reason="LOOM_TEST_PG_URL is not set (run under scripts/with-postgres)"
    ),
]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = create_engine(PG_URL)
    yield engine
    engine.dispose()


def _drop(conn: Connection, store: PostgresMemoryStore) -> None:
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {store.entries.name}")


@pytest.fixture
def store(engine: Engine) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(engine, table_prefix=f"t{uuid.uuid4().hex[:12]}_")
    yield store
    with engine.begin() as conn:
        _drop(conn, store)


def _kit_schema(url: str) -> None:
    """The kit's tables, made once per worker; each kit test finds them as just built
    (``postgres_kit``, ADR 0054)."""
    engine = create_engine(url)
    PostgresMemoryStore(engine, table_prefix="kit_").close()
    engine.dispose()


def _temporal_kit_schema(url: str) -> None:
    """:func:`_kit_schema` for the temporal store."""
    engine = create_engine(url)
    PostgresTemporalStore(engine, table_prefix="kit_").close()
    engine.dispose()


class TestPostgresMemoryStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, postgres_kit: PostgresKit) -> Iterator[PostgresMemoryStore]:
        engine = create_engine(postgres_kit(_kit_schema))
        store = PostgresMemoryStore(engine, table_prefix="kit_")
        yield store
        store.close()
        engine.dispose()


class TestPostgresTemporalStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, postgres_kit: PostgresKit) -> Iterator[PostgresTemporalStore]:
        engine = create_engine(postgres_kit(_temporal_kit_schema))
        store = PostgresTemporalStore(engine, table_prefix="kit_")
        yield store
        store.close()
        engine.dispose()


def _entries(*words: str) -> list[MemoryEntry]:
    return [MemoryEntry(content=f"{word} shared", id=word) for word in words]


def _plan(store: PostgresMemoryStore, statement: str, parameters: Any) -> str:
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"ANALYZE {store.entries.name}")
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        rows = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters)
        return "\n".join(row[0] for row in rows)


def _executed(store: PostgresMemoryStore, verb: Any) -> list[tuple[str, Any]]:
    executed: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        executed.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        verb()
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    return executed


def test_remove_is_one_statement_on_the_id_index(store: PostgresMemoryStore) -> None:
    """remove runs one DELETE, and its plan can use the (key, entry_id) index."""
    store.append("k", _entries(*(f"w{n}" for n in range(200))))
    [(statement, parameters)] = _executed(store, lambda: store.remove("k", ["w3", "w7"]))
    assert statement.lstrip().upper().startswith("DELETE")
    assert f"{store.entries.name}_key_entry_id" in _plan(store, statement, parameters)


def test_search_uses_the_gin_index(store: PostgresMemoryStore) -> None:
    """A filtered search finds a rare term in a large key through the GIN index."""
    store.append("k", _entries(*(f"w{n}" for n in range(5000))))
    [(statement, parameters)] = _executed(store, lambda: store.search("k", "w5 w9", where=true()))
    assert f"{store.entries.name}_search" in _plan(store, statement, parameters)


def _plain_ts_rank_order(store: PostgresMemoryStore, key: str, query: str) -> list[str]:
    """The ids in the order the previous ranking, ts_rank over the OR of the terms, gave."""
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT entry_id FROM {store.entries.name} "
            "WHERE key = %(key)s AND search_vector @@ %(query)s::tsquery "
            "ORDER BY ts_rank(search_vector, %(query)s::tsquery) DESC, seq",
            {"key": key, "query": " | ".join(f"'{term}'" for term in query.split())},
        )
        return [row[0] for row in rows]


def test_a_rare_term_outranks_a_repeated_common_one(store: PostgresMemoryStore) -> None:
    """One rare query term outranks four of a common one: each term is weighted by its IDF."""
    common = [MemoryEntry(content=f"python note{n}", id=f"n{n}") for n in range(20)]
    store.append("k", common)
    store.append("k", [MemoryEntry(content="python python python python", id="repeats")])
    store.append("k", [MemoryEntry(content="walrus operator", id="rare")])
    # control: plain ts_rank has no IDF, so four occurrences of "python" beat one "walrus"
    plain = _plain_ts_rank_order(store, "k", "python walrus")
    assert plain.index("repeats") < plain.index("rare")
    assert [e.id for e in store.search("k", "python walrus", limit=2)] == ["rare", "repeats"]


def test_where_restricts_the_term_statistics(engine: Engine) -> None:
    """A filtered search ranks as if the store held only the rows ``where`` admits."""
    prefix = f"w{uuid.uuid4().hex[:12]}_"
    store = PostgresMemoryStore(engine, table_prefix=prefix, columns=[Column("batch", Integer)])
    alone = PostgresMemoryStore(engine, table_prefix=f"{prefix}a_")
    try:
        # "alpha" is common in batch 1 and rare in batch 2; "beta" the other way round
        batches = {
            1: ["alpha one", "alpha two", "alpha three", "alpha alpha", "beta"],
            2: ["beta one", "beta two", "beta three", "beta beta", "alpha"],
        }
        for batch, texts in batches.items():
            entries = [MemoryEntry(content=t, id=f"{batch}:{t}") for t in texts]
            store.append("k", entries, values={"batch": batch})
        alone.append("k", [MemoryEntry(content=t, id=f"1:{t}") for t in batches[1]])
        first = store.search("k", "alpha beta", where=store.entries.c.batch == 1)
        second = store.search("k", "alpha beta", where=store.entries.c.batch == 2)
        assert (first[0].id, second[0].id) == ("1:beta", "2:alpha")
        assert [e.id for e in first] == [e.id for e in alone.search("k", "alpha beta")]
    finally:
        with engine.begin() as conn:
            _drop(conn, store)
            _drop(conn, alone)


def test_equal_scores_come_back_in_append_order(store: PostgresMemoryStore) -> None:
    """Entries that score the same are returned in append order, not in any plan's order."""
    store.append("k", _entries("m", "c", "x"))
    store.append("k", _entries("a", "q"))
    store.remove("k", ["c"])
    store.append("k", _entries("c"))
    assert [e.id for e in store.search("k", "shared")] == ["m", "x", "a", "q", "c"]


def test_stored_vector_holds_exactly_the_first_party_terms(store: PostgresMemoryStore) -> None:
    """The tsvector is built from tokenize(), not PostgreSQL's parser, so terms agree."""
    store.append("k", [MemoryEntry(content="Straße node_7 the Café", id="x")])
    with store.engine.connect() as conn:
        vector = conn.exec_driver_sql(
            f"SELECT search_vector::text FROM {store.entries.name}"
        ).scalar()
    assert vector == "'7':3 'café':4 'node':2 'strasse':1"


def test_failed_replace_keeps_the_old_list(store: PostgresMemoryStore) -> None:
    """A replace that fails in the database after its DELETE rolls back to the old list."""
    store.append("k", _entries("old1", "old2"))
    table = store.entries.name
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE FUNCTION {table}_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF strpos(new.entry, 'boom') > 0 THEN RAISE EXCEPTION 'boom'; END IF; "
            "RETURN new; END $$"
        )
        conn.exec_driver_sql(
            f"CREATE TRIGGER boom BEFORE INSERT ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {table}_boom()"
        )
    try:
        with pytest.raises(BackendError) as raised:
            store.replace("k", _entries("fine", "boom"))
        assert isinstance(raised.value.__cause__, SQLAlchemyError)
        assert [e.id for e in store.read("k")] == ["old1", "old2"]
    finally:
        with store.engine.begin() as conn:
            _drop(conn, store)
            conn.exec_driver_sql(f"DROP FUNCTION {table}_boom()")


def test_store_rows_and_a_callers_row_commit_together(store: PostgresMemoryStore) -> None:
    """With conn=, the store's rows and the caller's own row commit or roll back together."""
    tracking = f"{store.table_prefix}tracking"
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {tracking} (position integer)")
    try:
        with pytest.raises(RuntimeError), store.engine.begin() as conn:
            store.append("k", _entries("lost"), conn=conn)
            conn.exec_driver_sql(f"INSERT INTO {tracking} VALUES (1)")
            raise RuntimeError("crash after both writes, before commit")
        with store.engine.begin() as conn:
            store.replace("k", _entries("kept"), conn=conn)
            conn.exec_driver_sql(f"INSERT INTO {tracking} VALUES (2)")
        with store.engine.connect() as conn:
            positions = list(conn.exec_driver_sql(f"SELECT position FROM {tracking}").scalars())
        assert ([e.id for e in store.read("k")], positions) == (["kept"], [2])
    finally:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {tracking}")


def test_prefixes_share_one_database(engine: Engine, store: PostgresMemoryStore) -> None:
    """Two stores with different prefixes on one database do not see each other."""
    other = PostgresMemoryStore(engine, table_prefix=f"o{uuid.uuid4().hex[:12]}_")
    try:
        store.append("k", _entries("mine"))
        assert (other.read("k"), other.search("k", "mine")) == ([], [])
    finally:
        with engine.begin() as conn:
            _drop(conn, other)
