"""ADR 0048 (amended "pgappend"): the log's position is read through the held writer.

Every execution's start reads the position its ``Created`` event records. The PostgreSQL
recorder reads it on its writer connection (the same ``MAX(notification_id)`` statement,
prepared there once) instead of checking a connection out of the pool each time. Checked
here: the pool is not touched while the writer is free, the value is eventsourcing's own
(empty log included), and a busy or terminated writer leaves the read to the pool.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from eventsourcing.postgres import PostgresApplicationRecorder
from sqlalchemy.engine import make_url

from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.postgres import ChainedPostgresRecorder
from replay_tests.runtime.test_postgres_append import _pool_checkouts, _recorder

pytestmark = pytest.mark.postgres


@pytest.fixture
def log(pg_url: str) -> Iterator[EventsourcingLog]:
    opened = open_log(LogSettings(pg_url))
    assert isinstance(opened, EventsourcingLog)
    yield opened
    opened.close()


def _append(log: EventsourcingLog, stream: uuid.UUID, version: int) -> None:
    log.insert_rows([Row(stream=stream, version=version, topic="test.Noted", state=b"{}")])


def _eventsourcings(recorder: ChainedPostgresRecorder) -> int | None:
    """The position as eventsourcing's own recorder reads it (through the pool)."""
    return PostgresApplicationRecorder.max_notification_id(recorder)


def test_the_position_is_read_on_the_writer_without_the_pool(log: EventsourcingLog) -> None:
    recorder = _recorder(log)
    stream = uuid.uuid4()
    with _pool_checkouts(recorder) as used:
        assert log.position == 0
        for version in range(1, 4):
            _append(log, stream, version)
            assert log.position == version
    assert used == []
    assert log.position == _eventsourcings(recorder) == 3


def test_an_empty_log_reads_as_eventsourcings_none(log: EventsourcingLog) -> None:
    recorder = _recorder(log)
    assert recorder.max_notification_id() is None
    assert _eventsourcings(recorder) is None


def test_a_busy_writer_leaves_the_read_to_the_pool(log: EventsourcingLog) -> None:
    """A thread finding the writer held by another thread's append reads through the pool,
    and sees the same position."""
    recorder = _recorder(log)
    _append(log, uuid.uuid4(), 1)
    read: list[int] = []
    with _pool_checkouts(recorder) as used, recorder._writer_lock:
        reader = threading.Thread(target=lambda: read.append(log.position))
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive()
    assert read == [1]
    assert used


def test_a_terminated_writer_is_given_back_and_the_pool_reads(
    log: EventsourcingLog, pg_url: str
) -> None:
    """The server ends the writer's session: the read fails on it, the connection goes back
    to the pool to be discarded, the pool answers the read, and the next append takes a new
    writer."""
    recorder = _recorder(log)
    stream = uuid.uuid4()
    _append(log, stream, 1)
    writer = recorder._writer
    assert writer is not None
    killed = writer.pgconn.backend_pid
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
    assert log.position == 1
    assert recorder._writer is None
    _append(log, stream, 2)
    assert recorder._writer is not None and recorder._writer.pgconn.backend_pid != killed
    assert log.position == 2
    assert log.verify().checked == 2
