"""A SQLite memory-store search reads one snapshot, and never takes the write lock.

A search runs several statements (the index state, the terms' document counts, the ranking,
then the rows it picked). Each test commits another connection's write between the ranking
and the read of the rows it picked, which is where a search without one snapshot would see
two states: it would rank a row and then not find it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, Row, create_engine, event

from loom_memory import MemoryEntry, SqliteMemoryStore
from loom_runtime.log import LogSettings

ENTRIES = [MemoryEntry(id=f"e{index}", content=f"alpha note {index}") for index in range(5)]


def plain_engine(path: Path) -> Engine:
    """SQLAlchemy's defaults, as a caller who passes a URL gets them."""
    return create_engine(f"sqlite:///{path}")


def log_engine(path: Path) -> Engine:
    """The engine a loom log gives its projections (event-sourced memory searches through it)."""
    return LogSettings(f"sqlite:///{path}").create_engine()


@pytest.fixture(params=[plain_engine, log_engine], ids=["plain engine", "the log's engine"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    path = tmp_path / "memory.db"
    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
    engine = request.param(path)
    yield engine
    engine.dispose()


def write_while_reading(
    monkeypatch: pytest.MonkeyPatch, store: SqliteMemoryStore, path: str
) -> list[str]:
    """Make another connection delete every row and commit right before a search reads the
    rows it ranked; return what happened to that write."""
    outcome: list[str] = []
    read_seqs = SqliteMemoryStore._read_seqs

    def racing(self: SqliteMemoryStore, conn: Connection, seqs: Sequence[int]) -> list[Row[Any]]:
        other = sqlite3.connect(path, timeout=0)
        try:
            other.execute(f"DELETE FROM {store.entries.name}")
            other.commit()
            outcome.append("committed")
        except sqlite3.OperationalError as exc:
            outcome.append(str(exc))
        finally:
            other.close()
        return read_seqs(self, conn, seqs)

    monkeypatch.setattr(SqliteMemoryStore, "_read_seqs", racing)
    return outcome


def test_a_search_answers_from_the_state_it_ranked(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteMemoryStore(engine)
    store.append("k", ENTRIES)
    before = [entry.id for entry in store.search("k", "alpha", limit=3)]
    assert len(before) == 3

    outcome = write_while_reading(monkeypatch, store, str(engine.url.database))
    during = [entry.id for entry in store.search("k", "alpha", limit=3)]

    assert outcome == ["committed"], "a search must not hold the write lock"
    assert during == before, "the rows were ranked in one state and read in another"
    assert store.search("k", "alpha") == [], "the write is visible to the next search"


def test_a_search_reuses_the_counts_it_kept(engine: Engine) -> None:
    """A search's own transaction holds no writes, so the index version stands and the second
    search at that version counts no term again (a search that took the write lock looked like
    a transaction with pending writes, and counted every time)."""
    store = SqliteMemoryStore(engine)
    store.append("k", ENTRIES)
    counted: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if store.vocabulary_table in statement:
            counted.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    store.search("k", "alpha note")
    assert len(counted) == 1, "the first search counts its terms"
    store.search("k", "alpha note")
    assert len(counted) == 1, "the second search at the same version reused the counts"
