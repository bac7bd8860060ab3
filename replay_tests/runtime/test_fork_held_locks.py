"""A process forked while another thread holds a recorder's lock can still use and close its log.

``os.fork`` copies a held ``threading.Lock`` held: the thread that would release it does not
exist in the child. The SQLite recorder's position-reader lock and the PostgreSQL recorder's
writer lock are taken by ``log.close()``, so such a child hung for ever closing its log. Each
lock is now made afresh in the child (``loom_runtime.storage.forks``); the child never uses
its parent's connection either way (each records the pid that opened it).

The held lock stands for another thread inside a position read or an append at the moment of
the fork. The child has a few seconds (``signal.alarm``) to close (and, on SQLite, whose
connections are opened per process, to read the position and append first).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from pathlib import Path

import pytest

from loom_runtime.log import EventLog, LogSettings, Row, open_log
from loom_runtime.storage.postgres import ChainedPostgresRecorder
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _append(log: EventLog) -> None:
    log.insert_rows([Row(stream=uuid.uuid4(), version=1, topic="test.Noted", state=b"{}")])


def _fork_with_held(log: EventLog, lock: threading.Lock, *, use: bool) -> int:
    """Fork while another thread holds ``lock``; the child (if ``use``) reads the position and
    appends, then closes the log and exits 0, or is killed by its alarm. Returns the child's
    exit code."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    pid = os.fork()
    if pid == 0:  # the child: nothing here may raise past os._exit
        code = 1
        try:
            signal.alarm(10)
            if use:
                assert log.position == 1
                _append(log)
            log.close()
            code = 0
        finally:
            os._exit(code)
    release.set()
    holder.join()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_sqlite_log_forked_during_a_position_read_closes_in_the_child(tmp_path: Path) -> None:
    log = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
    try:
        _append(log)
        assert log.position == 1  # the reader is open in the parent
        recorder = log.application.recorder  # type: ignore[attr-defined]
        assert isinstance(recorder, ChainedSQLiteRecorder)
        assert _fork_with_held(log, recorder._reader_lock, use=True) == 0
        assert log.position == 2  # the parent's reader still works, and sees the child's
    finally:
        log.close()


@pytest.mark.postgres
def test_a_postgres_log_forked_during_an_append_closes_in_the_child(pg_url: str) -> None:
    log = open_log(LogSettings(pg_url))
    try:
        _append(log)  # the writer is held in the parent
        recorder = log.application.recorder  # type: ignore[attr-defined]
        assert isinstance(recorder, ChainedPostgresRecorder)
        # The child only closes: a PostgreSQL connection pool is not shared across a fork.
        assert _fork_with_held(log, recorder._writer_lock, use=False) == 0
    finally:
        log.close()
