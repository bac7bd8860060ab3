"""ADR 0048 (amended): SQLite appends are written through one connection the recorder holds.

Not a pool checkout per append: the checkout, its locks and eventsourcing's statement cache of
one were a visible share of a recorded decision's CPU. What must hold with one connection
kept for the log's life: no append takes a connection from the pool, a commit that failed
leaves nothing open for the next append, a forked process does not write through its parent's
connection, and closing the log closes it.
"""

from __future__ import annotations

import gc
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from loom_runtime.errors import StreamConflictError
from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage import sqlite as storage_sqlite
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder


def _recorder(log: EventsourcingLog) -> ChainedSQLiteRecorder:
    recorder = log.application.recorder
    assert isinstance(recorder, ChainedSQLiteRecorder)
    return recorder


def _row(stream: uuid.UUID, version: int) -> Row:
    return Row(stream=stream, version=version, topic="test.Noted", state=b'{"n":1}')


def test_appends_take_no_connection_from_the_pool(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five appends check nothing out of eventsourcing's pool (each took its writer before)."""
    pool = _recorder(sqlite_log).datastore.pool
    taken: list[Any] = []
    original = pool.get_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        taken.append(kwargs.get("is_writer"))
        return original(*args, **kwargs)

    monkeypatch.setattr(pool, "get_connection", counted)
    stream = uuid.uuid4()
    for version in range(1, 6):
        sqlite_log.insert_rows([_row(stream, version)])
    assert True not in taken
    assert len(sqlite_log.rows(stream)) == 5


def test_a_failed_commit_leaves_nothing_open_for_the_next_append(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COMMIT that fails keeps its transaction open in SQLite; the recorder rolls it back, so
    the failed append is not stored and the next one commits and chains."""
    recorder = _recorder(sqlite_log)
    stream = uuid.uuid4()
    sqlite_log.insert_rows([_row(stream, 1)])
    writer = recorder._writer
    assert writer is not None

    def failing_commit() -> None:
        raise sqlite3.OperationalError("disk I/O error (injected at COMMIT)")

    monkeypatch.setattr(writer, "commit", failing_commit)
    with pytest.raises(Exception, match="injected at COMMIT"):
        sqlite_log.insert_rows([_row(stream, 2)])
    monkeypatch.undo()
    sqlite_log.insert_rows([_row(stream, 2)])
    assert [row.version for row in sqlite_log.rows(stream)] == [1, 2]
    assert sqlite_log.verify().ok


def test_a_forked_process_opens_its_own_writer(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process id (a fork) writes through a new connection and leaves the parent's
    open: a SQLite connection must not be used, or closed, across a fork."""
    recorder = _recorder(sqlite_log)
    stream = uuid.uuid4()
    sqlite_log.insert_rows([_row(stream, 1)])
    parent = recorder._writer
    assert parent is not None
    monkeypatch.setattr(storage_sqlite.os, "getpid", lambda: -1)
    sqlite_log.insert_rows([_row(stream, 2)])
    assert recorder._writer is not parent
    monkeypatch.undo()
    parent.cursor().execute("SELECT 1")  # still open
    parent.close()
    assert sqlite_log.verify().ok


def test_closing_the_log_closes_the_writer(tmp_path: Path) -> None:
    """The held connection is closed with the log, not left to the garbage collector."""
    opened = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
    assert isinstance(opened, EventsourcingLog)
    recorder = _recorder(opened)
    opened.insert_rows([_row(uuid.uuid4(), 1)])
    writer = recorder._writer
    assert writer is not None
    opened.close()
    assert recorder._writer is None
    with pytest.raises(sqlite3.ProgrammingError):
        writer.cursor().execute("SELECT 1")


def test_a_cursor_freed_by_another_threads_collection_does_not_stall_the_writer(
    tmp_path: Path,
) -> None:
    """A refused append leaves its cursor in a reference cycle (its error's traceback holds the
    frame that holds the cursor), so the garbage collector frees it, in whichever thread runs.

    Here that thread holds the write lock (as a worker's heartbeat does between its statements)
    while this one's next append waits in ``sqlite3_step`` for that lock, on the same held
    connection. Freeing a cursor that still has a statement resets it, which takes the
    connection's mutex, held by the waiting step: neither thread moves until the lock timeout,
    and the append fails with "database is locked". The held connection's cursors are closed
    when each transaction ends, so nothing is left for a collection to reset.
    """
    path = tmp_path / "loom.db"
    # A timeout far above the lock's hold (0.3 s plus one collection, even on a loaded machine):
    # the old code waits it out in full and fails; the new one waits only for the holder.
    log = open_log(LogSettings(f"sqlite:///{path}", lock_timeout=10.0))
    assert isinstance(log, EventsourcingLog)
    stream = uuid.uuid4()
    log.insert_rows([_row(stream, 1)])
    other = sqlite3.connect(path, isolation_level=None, timeout=10.0, check_same_thread=False)
    locked = threading.Event()

    def hold_the_lock_and_collect() -> None:
        other.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(0.3)  # by now the append below waits for this lock
        gc.collect()
        other.execute("COMMIT")

    gc.disable()
    try:
        with pytest.raises(StreamConflictError):
            log.insert_rows([_row(stream, 1)])  # version 1 again: refused, garbage left behind
        holder = threading.Thread(target=hold_the_lock_and_collect)
        holder.start()
        locked.wait()
        log.insert_rows([_row(stream, 2)])
        holder.join()
        assert [row.version for row in log.rows(stream)] == [1, 2]
    finally:
        gc.enable()
        other.close()
        log.close()
