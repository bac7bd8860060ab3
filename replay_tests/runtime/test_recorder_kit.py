"""eventsourcing's own recorder test kit against loom's chained recorders.

The recorders of :mod:`loom_runtime.storage` subclass eventsourcing's and add a hash-chain row
per event in the same transaction (ADR 0011). This runs the cases eventsourcing ships for an
application recorder (``eventsourcing.tests.persistence``: ``ApplicationRecorderTestCase`` and
the non-interleaving ids case) against them, so an upgrade of eventsourcing that breaks what
loom overrides fails here first; after each case the chain must vouch for every row it left.
Its ``AggregateRecorderTestCase`` is for recorders without notification ids, and its tracking
and process cases are for recorders loom does not use. The kit is ``unittest``-based: each
class provides ``create_recorder`` on a fresh database. The PostgreSQL classes need
``LOOM_TEST_PG_URL`` (``scripts/with-postgres``) and skip without it.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests.persistence import (
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
)
from sqlalchemy import create_engine

from loom_runtime.integrity import verify_rows
from loom_runtime.log import LogSettings
from loom_runtime.storage.chain import ChainedRecorder
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")


class _Chained:
    """What every kit class adds: after each test, the chain vouches for every stored event."""

    recorders: list[ChainedRecorder]

    def setUp(self) -> None:
        self.recorders = []

    def chained(self, recorder: Any) -> Any:
        self.recorders.append(recorder)
        return recorder

    def tearDown(self) -> None:
        for recorder in self.recorders:
            with recorder.reading() as cursor:
                lowest, upto = recorder.chain.bounds(cursor)
                report = verify_rows(
                    recorder.chain.events(cursor, upto),
                    recorder.chain.links(cursor, upto),
                    None,
                    lowest=lowest,
                )
            assert report.ok, report


class _SQLite(_Chained):
    def setUp(self) -> None:
        super().setUp()
        self.directory = tempfile.TemporaryDirectory()
        self.path = Path(self.directory.name) / "kit.db"

    def tearDown(self) -> None:
        try:
            super().tearDown()
        finally:
            self.directory.cleanup()

    def create_recorder(self) -> ChainedSQLiteRecorder:
        recorder = ChainedSQLiteRecorder(SQLiteDatastore(db_name=str(self.path), lock_timeout=5))
        recorder.create_table()
        return self.chained(recorder)


class TestChainedSQLiteApplicationRecorder(_SQLite, ApplicationRecorderTestCase[Any]):
    pass


class TestChainedSQLiteNonInterleaving(_SQLite, NonInterleavingNotificationIDsBaseCase):
    pass


class _Postgres(_Chained):
    def setUp(self) -> None:
        super().setUp()
        self.database = f"loom_kit_{uuid.uuid4().hex[:12]}"
        self.admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{self.database}"')
        self.datastores: list[Any] = []

    def tearDown(self) -> None:
        try:
            super().tearDown()
        finally:
            for datastore in self.datastores:
                datastore.close()
            with self.admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            self.admin.dispose()

    def create_recorder(self) -> Any:
        from eventsourcing.postgres import PostgresDatastore

        from loom_runtime.storage.postgres import ChainedPostgresRecorder

        connect = LogSettings(PG_URL).postgres_connect_args()  # the URL's host may be a socket
        datastore = PostgresDatastore(
            dbname=self.database,
            host=connect.get("host", ""),
            port=connect.get("port", ""),
            user=connect.get("user", ""),
            password=connect.get("password", ""),
            pool_size=10,
            max_overflow=10,
            lock_timeout=5,
        )
        self.datastores.append(datastore)
        recorder = ChainedPostgresRecorder(datastore)
        recorder.create_table()
        return self.chained(recorder)


_needs_pg = [
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="LOOM_TEST_PG_URL is not set (run under scripts/test)"),
]


@_needs_pg[0]
@_needs_pg[1]
class TestChainedPostgresApplicationRecorder(_Postgres, ApplicationRecorderTestCase[Any]):
    pass


@_needs_pg[0]
@_needs_pg[1]
class TestChainedPostgresNonInterleaving(_Postgres, NonInterleavingNotificationIDsBaseCase):
    pass
