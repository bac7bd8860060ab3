"""A projection's reads take no write lock on SQLite: they run while a writer holds it.

The projections' engine begins every transaction ``IMMEDIATE`` (a read-then-write must not
lose its snapshot to another writer), which made each read queue for the write lock as well.
Reads go through :meth:`SQLProjection.reading`, whose transactions begin deferred: in WAL a
reader reads its snapshot beside a writer. Each test holds the write lock from a second
connection and reads; with a lock-taking read it would fail with "database is locked" once
the (short) lock timeout ran out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Connection, Integer, Table, select
from sqlalchemy.exc import OperationalError

from loom_runtime import SQLProjection
from loom_runtime.log import LogSettings


class _Counter(SQLProjection):
    def __init__(self, engine: Any) -> None:
        super().__init__(engine, name="counter")
        self.rows = Table("counter_rows", self.metadata, Column("n", Integer))
        self.create_tables()

    def handle(self, conn: Connection, position: int, event: Any) -> None:
        return None

    def clear(self, conn: Connection) -> None:
        return None


@pytest.fixture
def projection(tmp_path: Path) -> Iterator[_Counter]:
    engine = LogSettings(f"sqlite:///{tmp_path / 'loom.db'}", lock_timeout=0.2).create_engine()
    yield _Counter(engine)
    engine.dispose()


@pytest.fixture
def writer(projection: _Counter) -> Iterator[sqlite3.Connection]:
    """A second connection holding the write lock for the whole test."""
    database = projection.engine.url.database
    assert database is not None
    connection = sqlite3.connect(database, isolation_level=None, timeout=0.2)
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("INSERT INTO counter_rows (n) VALUES (1)")
    yield connection
    connection.execute("ROLLBACK")
    connection.close()


def test_position_is_read_while_a_writer_holds_the_lock(
    projection: _Counter, writer: sqlite3.Connection
) -> None:
    """The tracked position reads beside an open write transaction."""
    assert projection.position() == 0


def test_a_reading_connection_sees_the_last_commit_not_the_open_write(
    projection: _Counter, writer: sqlite3.Connection
) -> None:
    """A read on ``reading()`` sees the committed rows, not the writer's uncommitted one."""
    with projection.reading() as conn:
        assert conn.execute(select(projection.rows.c.n)).all() == []


def test_a_default_connection_still_takes_the_write_lock(
    projection: _Counter, writer: sqlite3.Connection
) -> None:
    """Negative control: a plain connection's transaction waits for the lock and gives up."""
    with pytest.raises(OperationalError, match="locked"), projection.engine.connect() as conn:
        conn.execute(select(projection.rows.c.n)).all()
