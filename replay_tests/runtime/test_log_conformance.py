"""The event-log conformance kit against every implementation loom ships.

eventsourcing's built-in persistence on SQLite and on PostgreSQL (``db_url``: the PostgreSQL
half skips without ``LOOM_TEST_PG_URL``), and eventsourcing-sqlalchemy on SQLite, which keeps
no hash chain and reads no precondition in its append (those clauses skip, naming the
capability). The built-in log gives the kit a ``tamper`` fixture: an UPDATE of the events
table, bypassing the log, which its verify must report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from loom_runtime.log import EventLog, LogSettings, open_log
from loom_runtime.log_conformance import EventLogContract


class TestBuiltinLog(EventLogContract):
    @pytest.fixture
    def log(self, db_url: str) -> Iterator[EventLog]:
        log = open_log(LogSettings(db_url))
        yield log
        log.close()

    @pytest.fixture
    def tamper(self, log: EventLog) -> Callable[[int], None]:
        return tamper_with(log)


def tamper_with(log: EventLog) -> Callable[[int], None]:
    """An edit of the built-in log's events table, bypassing the log: a space appended to the
    state stored at a position (still valid JSON, other bytes), which verify must report."""
    sqlite = log.engine.dialect.name == "sqlite"
    table = log.application.recorder.events_table_name  # type: ignore[attr-defined]
    position_column = "rowid" if sqlite else "notification_id"
    update = text(f"UPDATE {table} SET state = :state WHERE {position_column} = :position")
    select = text(f"SELECT state FROM {table} WHERE {position_column} = :position")

    def edit(position: int) -> None:
        with log.engine.begin() as conn:
            state = bytes(conn.execute(select, {"position": position}).scalar_one())
            conn.execute(update, {"state": state + b" ", "position": position})

    return edit


class TestSQLAlchemyLog(EventLogContract):
    @pytest.fixture
    def log(self, sqlite_url: str) -> Iterator[EventLog]:
        log = open_log(LogSettings(sqlite_url, persistence="sqlalchemy"))
        yield log
        log.close()
