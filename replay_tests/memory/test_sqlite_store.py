"""SQLite backend: the kit, plus what the kit cannot see - the FTS5 index itself.

The kit's search clauses join the index back to the rows, and that join hides a stale index
(a term whose row is gone joins to nothing). So these tests read the index WITHOUT the join,
through an ``fts5vocab`` table and FTS5's own integrity check, and prove with a negative
control that the probe fails when the delete trigger is missing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import SQLAlchemyError

from loom_memory import (
    BackendError,
    InMemoryMemoryStore,
    MemoryEntry,
    SqliteMemoryStore,
    SqliteTemporalStore,
    StoreConfigurationError,
)
from loom_memory.conformance import MemoryStoreContract
from replay_tests.conftest import SqliteCopy


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    yield engine
    engine.dispose()


def _kit_schema(url: str) -> None:
    """The kit's tables, made once per worker; each kit test opens a copy (ADR 0054)."""
    engine = create_engine(url)
    SqliteMemoryStore(engine, table_prefix="kit_").close()
    engine.dispose()


def _temporal_kit_schema(url: str) -> None:
    """:func:`_kit_schema` for the temporal store."""
    engine = create_engine(url)
    SqliteTemporalStore(engine, table_prefix="kit_").close()
    engine.dispose()


class TestSqliteMemoryStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, sqlite_copy: SqliteCopy) -> Iterator[SqliteMemoryStore]:
        engine = create_engine(sqlite_copy(_kit_schema, "memory.db"))
        store = SqliteMemoryStore(engine, table_prefix="kit_")
        yield store
        store.close()
        engine.dispose()


class TestSqliteTemporalStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, sqlite_copy: SqliteCopy) -> Iterator[SqliteTemporalStore]:
        engine = create_engine(sqlite_copy(_temporal_kit_schema, "memory.db"))
        store = SqliteTemporalStore(engine, table_prefix="kit_")
        yield store
        store.close()
        engine.dispose()


@pytest.fixture
def store(engine: Engine) -> SqliteMemoryStore:
    return SqliteMemoryStore(engine)


def _entries(*words: str) -> list[MemoryEntry]:
    return [MemoryEntry(content=f"{word} shared", id=word) for word in words]


def indexed_rowids(store: SqliteMemoryStore) -> set[int]:
    """Rowids the FTS index holds terms for, read from the index alone (no content join)."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab_{store.fts_table} "
            f"USING fts5vocab(main, '{store.fts_table}', 'instance')"
        )
        rows = conn.exec_driver_sql(f"SELECT DISTINCT doc FROM temp.vocab_{store.fts_table}")
        return {row[0] for row in rows}


def row_seqs(store: SqliteMemoryStore) -> set[int]:
    with store.engine.connect() as conn:
        return set(conn.scalars(text(f"SELECT seq FROM {store.entries.name}")))


def raw_match_count(store: SqliteMemoryStore, term: str) -> int:
    """Index hits for ``term`` selecting only the rowid, which FTS5 answers from the index."""
    with store.engine.connect() as conn:
        statement = text(
            f"SELECT count(rowid) FROM {store.fts_table} WHERE {store.fts_table} MATCH :t"
        )
        return conn.scalar(statement, {"t": f'"{term}"'}) or 0


def test_remove_leaves_no_stale_index_rows(store: SqliteMemoryStore) -> None:
    """After remove, the index holds exactly the remaining rows and not the removed terms."""
    store.append("k", _entries("alpha", "beta", "gamma"))
    store.remove("k", ["beta"])
    assert indexed_rowids(store) == row_seqs(store)
    assert (raw_match_count(store, "beta"), raw_match_count(store, "shared")) == (0, 2)


def test_replace_leaves_no_stale_index_rows(store: SqliteMemoryStore) -> None:
    """After replace, the index holds exactly the new rows."""
    store.append("k", _entries("alpha", "beta"))
    store.replace("k", _entries("delta"))
    assert indexed_rowids(store) == row_seqs(store)
    assert (raw_match_count(store, "alpha"), raw_match_count(store, "delta")) == (0, 1)


def test_clear_leaves_an_empty_index(store: SqliteMemoryStore) -> None:
    """After clear of the only key, the index holds no rows at all."""
    store.append("k", _entries("alpha", "beta"))
    store.clear("k")
    assert (indexed_rowids(store), raw_match_count(store, "shared")) == (set(), 0)


def test_index_passes_fts5_integrity_check(store: SqliteMemoryStore) -> None:
    """FTS5's integrity-check agrees the index matches the rows after every kind of write."""
    store.append("k", _entries("alpha", "beta", "gamma"))
    store.append("other", _entries("alpha"))
    store.remove("k", ["alpha"])
    store.replace("other", _entries("omega"))
    store.clear("k")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO {store.fts_table}({store.fts_table}, rank) VALUES ('integrity-check', 1)"
        )
    assert indexed_rowids(store) == row_seqs(store) != set()


def test_probe_detects_a_stale_index(store: SqliteMemoryStore) -> None:
    """Negative control: without the delete trigger the index goes stale, search hides it,
    and the index probe above catches it."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TRIGGER {store.entries.name}_fts_delete")
    store.append("k", _entries("alpha", "beta"))
    store.remove("k", ["beta"])
    assert [e.id for e in store.search("k", "beta alpha")] == ["alpha"]  # the join hides it
    assert indexed_rowids(store) != row_seqs(store)
    assert raw_match_count(store, "beta") == 1


def test_remove_is_one_statement_on_the_id_index(store: SqliteMemoryStore) -> None:
    """remove runs one DELETE, and EXPLAIN QUERY PLAN shows it searching the (key, id) index."""
    store.append("k", _entries(*(f"w{n}" for n in range(50))))
    executed: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        executed.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        store.remove("k", ["w3", "w7"])
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    [(statement, parameters)] = executed
    with store.engine.connect() as conn:
        plan = [
            row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
        ]
    assert statement.lstrip().upper().startswith("DELETE")
    assert plan == [
        f"SEARCH {store.entries.name} USING INDEX {store.entries.name}_key_entry_id "
        "(key=? AND entry_id=?)"
    ]


def test_failed_replace_keeps_the_old_list_and_index(store: SqliteMemoryStore) -> None:
    """A replace that fails in the database after its DELETE rolls back to the old list."""
    store.append("k", _entries("old1", "old2"))
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TRIGGER boom BEFORE INSERT ON {store.entries.name} "
            "WHEN new.search_text LIKE '%boom%' BEGIN SELECT RAISE(ABORT, 'boom'); END"
        )
    with pytest.raises(BackendError) as raised:
        store.replace("k", _entries("fine", "boom"))
    assert isinstance(raised.value.__cause__, SQLAlchemyError)
    assert [e.id for e in store.read("k")] == ["old1", "old2"]
    assert indexed_rowids(store) == row_seqs(store)


def test_writes_join_a_callers_transaction(store: SqliteMemoryStore) -> None:
    """With conn=, writes commit or roll back with the caller's transaction."""
    with store.engine.connect() as conn:
        with conn.begin() as transaction:
            store.append("k", _entries("rolled"), conn=conn)
            assert [e.id for e in store.read("k", conn=conn)] == ["rolled"]
            transaction.rollback()
        with conn.begin():
            store.append("k", _entries("kept"), conn=conn)
            store.replace("other", _entries("also"), conn=conn)
    assert ([e.id for e in store.read("k")], [e.id for e in store.read("other")]) == (
        ["kept"],
        ["also"],
    )
    assert indexed_rowids(store) == row_seqs(store)


def test_store_rows_and_a_callers_row_commit_together(store: SqliteMemoryStore) -> None:
    """A caller's own table write and the store's write share one transaction."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE tracking (position INTEGER)")

    def apply(conn: Connection, *, fail: bool) -> None:
        store.append("k", _entries(f"at{fail}"), conn=conn)
        conn.exec_driver_sql("INSERT INTO tracking VALUES (1)")
        if fail:
            raise RuntimeError("crash after both writes, before commit")

    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        apply(conn, fail=True)
    with store.engine.connect() as conn:
        tracked = conn.exec_driver_sql("SELECT count(*) FROM tracking").scalar()
    assert (store.read("k"), tracked) == ([], 0)


def test_prefixes_share_one_database(engine: Engine) -> None:
    """Two stores with different prefixes on one database do not see each other."""
    first = SqliteMemoryStore(engine, table_prefix="first_")
    second = SqliteMemoryStore(engine, table_prefix="second_")
    first.append("k", _entries("mine"))
    assert (second.read("k"), second.search("k", "mine")) == ([], [])


def test_reopening_a_file_keeps_entries_and_index(tmp_path: Path) -> None:
    """A store reopened on the same file reads and searches what the first one wrote."""
    url = f"sqlite:///{tmp_path / 'reopen.db'}"
    first = SqliteMemoryStore(url)
    first.append("k", _entries("durable"))
    first.close()
    second = SqliteMemoryStore(url)
    assert [e.id for e in second.search("k", "durable")] == ["durable"]
    second.close()


@pytest.mark.parametrize("store_type", [SqliteMemoryStore, SqliteTemporalStore])
def test_first_opens_of_one_new_file_at_once_all_succeed(
    tmp_path: Path, store_type: type[SqliteMemoryStore]
) -> None:
    """Four stores opened from one new file's URL at the same instant all open, five times.

    Each owns its engine, whose driver runs DDL outside a transaction by default: the schema
    change must take SQLite's write lock first (``serialise_ddl``), or the later creators fail
    with "table ... already exists"."""
    for attempt in range(5):
        failures = _open_at_once(store_type, f"sqlite:///{tmp_path / f'race{attempt}.db'}")
        assert failures == [], f"attempt {attempt}: {failures[0]}"


def _open_at_once(store_type: type[SqliteMemoryStore], url: str) -> list[Exception]:
    """Open four stores on ``url`` in threads released together; what the opens raised."""
    barrier = threading.Barrier(4)
    opened: list[SqliteMemoryStore] = []
    failures: list[Exception] = []

    def open_store() -> None:
        barrier.wait()
        try:
            opened.append(store_type(url))
        except Exception as exc:  # collected, so every thread is joined before failing
            failures.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in opened:
        store.close()
    return failures


def test_a_first_open_that_fails_midway_creates_nothing(tmp_path: Path) -> None:
    """A first open whose third CREATE fails leaves the file without a table of the store:
    the schema is created in one transaction, so a crash cannot leave half of it."""
    path = tmp_path / "half.db"
    creates = 0

    def fail_third_create(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal creates
        creates += statement.lstrip().startswith("CREATE")
        if creates == 3:
            raise RuntimeError("the process dies here")

    event.listen(Engine, "before_cursor_execute", fail_third_create)
    try:
        with pytest.raises(RuntimeError, match="dies here"):
            SqliteTemporalStore(f"sqlite:///{path}")
    finally:
        event.remove(Engine, "before_cursor_execute", fail_third_create)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []


@pytest.mark.parametrize("prefix", ["", "1abc_", "bad-prefix", "x; DROP TABLE y", "a" * 41])
def test_unusable_table_prefix_is_refused(engine: Engine, prefix: str) -> None:
    """A table prefix that is not a short SQL identifier raises StoreConfigurationError."""
    with pytest.raises(StoreConfigurationError):
        SqliteMemoryStore(engine, table_prefix=prefix)


def test_other_databases_are_refused() -> None:
    """A PostgreSQL URL given to the SQLite backend raises StoreConfigurationError."""
    with pytest.raises(StoreConfigurationError, match="sqlite"):
        SqliteMemoryStore("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_driver_errors_are_translated(store: SqliteMemoryStore) -> None:
    """A database failure surfaces as BackendError with the driver error as its cause."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {store.entries.name}")
    with pytest.raises(BackendError) as raised:
        store.read("k")
    assert isinstance(raised.value.__cause__, SQLAlchemyError)


# Letters Python's tokenizer keeps inside a word and SQLite's ``unicode61`` split it on (their
# Unicode categories differ between the two tables): a New Tai Lue vowel sign, a Vedic sign.
SPLIT_BY_UNICODE61 = ("q\u19b0z", "a\u1cf2b")


def test_a_word_sqlite_would_split_is_found_as_the_in_memory_store_finds_it(
    store: SqliteMemoryStore,
) -> None:
    """The index split such a word where the terms did not, so the term's count was never
    found and the entry was missed (or ranked below one matching a weaker term). The index's
    words are the terms, split on the spaces between them and nowhere else."""
    reference = InMemoryMemoryStore()
    for target in (store, reference):
        target.append(
            "k",
            [
                MemoryEntry(
                    content=f"note {SPLIT_BY_UNICODE61[0]} {SPLIT_BY_UNICODE61[1]}", id="a"
                ),
                MemoryEntry(content="other note", id="b"),
            ],
        )
    for query in (*SPLIT_BY_UNICODE61, f"{SPLIT_BY_UNICODE61[0]} note"):
        found = [e.id for e in store.search("k", query)]
        assert found == [e.id for e in reference.search("k", query)], query
        assert found[:1] == ["a"], query


def test_an_index_made_by_older_code_is_made_again_at_open(engine: Engine) -> None:
    """A store whose index was made with ``unicode61`` is indexed again when it opens, from
    its rows, and finds the word; its rows are untouched."""
    old = SqliteMemoryStore(engine)
    old.append("k", [MemoryEntry(content=f"note {SPLIT_BY_UNICODE61[0]}", id="a")])
    fts = old.fts_table
    with engine.begin() as conn:  # the index as older code made it
        conn.exec_driver_sql(f"DROP TABLE {fts}")
        conn.exec_driver_sql(
            f"CREATE VIRTUAL TABLE {fts} USING fts5(search_text, content='{old.entries.name}', "
            "content_rowid='seq', tokenize='unicode61 remove_diacritics 0')"
        )
        conn.exec_driver_sql(f"INSERT INTO {fts}({fts}) VALUES('rebuild')")
    assert old.search("k", SPLIT_BY_UNICODE61[0]) == []  # the defect, as older stores have it
    old.close()
    reopened = SqliteMemoryStore(engine)
    assert [e.id for e in reopened.search("k", SPLIT_BY_UNICODE61[0])] == ["a"]
    assert [e.id for e in reopened.read("k")] == ["a"]


def test_an_index_dropped_by_hand_is_made_again_from_the_rows(engine: Engine) -> None:
    """Its FTS5 table dropped, a store made it again empty at open: every search found
    nothing, and the first delete sent the index 'delete' commands for rows it never held,
    which corrupted it ("database disk image is malformed", also out of `loom rebuild`). An
    index made over rows that are there is filled from them, as one made by older code is."""
    first = SqliteMemoryStore(engine)
    first.append("k", [MemoryEntry(content="restart the worker", id="a")])
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {first.fts_table}")
    first.close()
    reopened = SqliteMemoryStore(engine)
    assert [e.id for e in reopened.search("k", "worker")] == ["a"]
    reopened.clear("k")  # a delete through the index's trigger
    assert reopened.search("k", "worker") == []
    with engine.connect() as conn:  # and the index is sound
        fts = reopened.fts_table
        conn.exec_driver_sql(f"INSERT INTO {fts}({fts}, rank) VALUES('integrity-check', 1)")
