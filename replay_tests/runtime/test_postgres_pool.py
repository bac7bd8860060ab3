"""ADR 0015 (amended "pool"): a PostgreSQL log opens its connections as they are needed.

eventsourcing's pool keeps ``POSTGRES_POOL_SIZE`` connections open from the start (psycopg's
``min_size``), so every process that opened a log, a one-line CLI command included, made the
server start five backends before its first statement. loom now asks for two kept
connections (the held writer's and one for reads) and lets the pool grow on demand to the
same ceiling as before: ``pool_size`` plus eventsourcing's overflow of 10.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage.application import EventsourcingLog

pytestmark = pytest.mark.postgres


def _backends(url: str) -> int:
    """Server processes connected to ``url``'s database, other than the one asking."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _open(url: str, pool_size: int) -> EventsourcingLog:
    log = open_log(LogSettings(url, pool_size=pool_size))
    assert isinstance(log, EventsourcingLog)
    return log


def _append(log: EventsourcingLog) -> None:
    log.insert_rows([Row(stream=uuid.uuid4(), version=1, topic="test.Noted", state=b"{}")])


def test_a_log_that_appended_once_holds_the_connections_it_used(pg_url: str) -> None:
    """The log's pool keeps two connections (the writer's and one for reads) and opens
    nothing more: six before the pool was cut to two, three before opening waited for them
    (the first request found none ready yet, every time, and psycopg opened a third for it).
    The one other backend is the projections' SQLAlchemy engine's."""
    log = _open(pg_url, pool_size=5)
    try:
        _append(log)
        pool = log.application.recorder.datastore.pool
        stats = pool.get_stats()
        assert stats["pool_min"] == 2
        assert (stats["pool_size"], stats.get("requests_queued", 0)) == (2, 0)
        assert _backends(pg_url) == 3
    finally:
        log.close()


@pytest.mark.parametrize("pool_size", [1, 5])
def test_the_pool_still_grows_to_pool_size_plus_the_overflow(pg_url: str, pool_size: int) -> None:
    """The ceiling is unchanged: ``pool_size`` + 10 connections at once (the writer's one
    among them), opened on demand."""
    log = _open(pg_url, pool_size=pool_size)
    try:
        pool = log.application.recorder.datastore.pool
        _append(log)
        assert pool.max_size == pool_size + 10
        held = [pool.getconn(timeout=10) for _ in range(pool.max_size - 1)]
        try:
            assert len({id(conn) for conn in held}) == pool.max_size - 1
            assert pool.get_stats()["pool_size"] == pool.max_size
        finally:
            for conn in held:
                pool.putconn(conn)
    finally:
        log.close()


def test_concurrent_appends_from_more_threads_than_kept_connections(pg_url: str) -> None:
    """Eight threads appending at once are served by a pool that started with one."""
    log = _open(pg_url, pool_size=5)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                _append(log)
        except BaseException as exc:  # reported below, with the thread's error
            failures.append(exc)

    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert log.position == 40
    finally:
        log.close()
