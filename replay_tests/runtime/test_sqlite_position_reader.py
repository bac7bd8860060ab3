"""ADR 0048 (rec): a SQLite log's position is read on a connection its recorder holds.

Every execution's start reads the position its ``Created`` event records; a pool checkout for
it cost several times the statement. What must hold: the read takes nothing from the pool
when the reader is free, answers what the pool answers (an empty log included), leaves a busy
reader to the pool, does not use its parent's connection after a fork, and is closed with the
log.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage import sqlite as storage_sqlite
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder
from replay_tests.runtime.test_held_writer import _recorder


def _pool_position(recorder: ChainedSQLiteRecorder) -> Any:
    """The position as eventsourcing reads it, through the pool."""
    return super(ChainedSQLiteRecorder, recorder).max_notification_id()


def _rows(stream: uuid.UUID, count: int) -> list[Row]:
    return [
        Row(stream=stream, version=version, topic="test.Noted", state=b'{"n":1}')
        for version in range(1, count + 1)
    ]


def _counting_checkouts(
    recorder: ChainedSQLiteRecorder, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    pool = recorder.datastore.pool
    taken: list[Any] = []
    original = pool.get_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        taken.append(kwargs.get("is_writer"))
        return original(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    return taken


def test_the_position_takes_no_connection_from_the_pool(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the reader free, reading the position checks nothing out of the pool."""
    recorder = _recorder(sqlite_log)
    sqlite_log.insert_rows(_rows(uuid.uuid4(), 3))
    taken = _counting_checkouts(recorder, monkeypatch)

    positions = [sqlite_log.position for _ in range(5)]

    assert taken == []
    assert positions == [3] * 5


def test_the_position_is_the_pools(sqlite_log: EventsourcingLog) -> None:
    """The held reader answers what eventsourcing's read through the pool answers."""
    recorder = _recorder(sqlite_log)
    assert recorder.max_notification_id() == _pool_position(recorder)  # empty: no row yet
    sqlite_log.insert_rows(_rows(uuid.uuid4(), 2))
    sqlite_log.insert_rows(_rows(uuid.uuid4(), 4))

    assert recorder.max_notification_id() == _pool_position(recorder) == 6


def test_a_busy_reader_leaves_the_read_to_the_pool(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread inside the reader: this one reads through the pool, the same answer."""
    recorder = _recorder(sqlite_log)
    sqlite_log.insert_rows(_rows(uuid.uuid4(), 2))
    taken = _counting_checkouts(recorder, monkeypatch)

    with recorder._reader_lock:
        assert sqlite_log.position == 2

    assert len(taken) == 1


def test_a_forked_process_opens_its_own_reader(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process id (a fork) reads through a new connection and leaves the parent's
    open: a SQLite connection must not be used, or closed, across a fork."""
    recorder = _recorder(sqlite_log)
    sqlite_log.insert_rows(_rows(uuid.uuid4(), 1))
    assert sqlite_log.position == 1
    parent = recorder._reader
    assert parent is not None
    monkeypatch.setattr(storage_sqlite.os, "getpid", lambda: -1)

    assert sqlite_log.position == 1

    assert recorder._reader is not parent
    monkeypatch.undo()
    parent.execute("SELECT 1")  # still open
    parent.close()


def test_a_failed_reader_is_replaced_and_the_pool_answers(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader whose statement fails is dropped; the pool reads this time, a new one next."""
    recorder = _recorder(sqlite_log)
    sqlite_log.insert_rows(_rows(uuid.uuid4(), 2))
    assert sqlite_log.position == 2
    broken = recorder._reader
    assert broken is not None
    broken.close()

    assert sqlite_log.position == 2
    assert recorder._reader is None
    assert sqlite_log.position == 2
    assert recorder._reader is not None


def test_closing_the_log_closes_the_reader(tmp_path: Path) -> None:
    """The held reader is closed with the log, not left to the garbage collector."""
    opened = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
    assert isinstance(opened, EventsourcingLog)
    recorder = _recorder(opened)
    assert opened.position == 0
    reader = recorder._reader
    assert reader is not None
    opened.close()
    assert recorder._reader is None
    with pytest.raises(sqlite3.ProgrammingError):
        reader.execute("SELECT 1")
