"""The event-log conformance kit against every implementation loom ships.

eventsourcing's built-in persistence on SQLite and on PostgreSQL (``db_url``: the PostgreSQL
half skips without ``LOOM_TEST_PG_URL``), and eventsourcing-sqlalchemy on SQLite, which keeps
no hash chain (its ``verify`` clause skips, naming the capability).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loom_runtime.log import EventLog, LogSettings, open_log
from loom_runtime.log_conformance import EventLogContract


class TestBuiltinLog(EventLogContract):
    @pytest.fixture
    def log(self, db_url: str) -> Iterator[EventLog]:
        log = open_log(LogSettings(db_url))
        yield log
        log.close()


class TestSQLAlchemyLog(EventLogContract):
    @pytest.fixture
    def log(self, sqlite_url: str) -> Iterator[EventLog]:
        log = open_log(LogSettings(sqlite_url, persistence="sqlalchemy"))
        yield log
        log.close()
