"""The built-in PostgreSQL persistence: eventsourcing's, with every event hash-chained.

Imported only when a log is opened on a PostgreSQL URL (eventsourcing resolves the factory
by its topic), so a SQLite-only install never needs psycopg: the ``postgres`` extra.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore, PostgresFactory
from eventsourcing.utils import retry
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL

from loom_runtime.schema import DDL_LOCK_KEY
from loom_runtime.storage.chain import ChainedRecorder, ChainTable


class ChainedPostgresRecorder(PostgresApplicationRecorder, ChainedRecorder):
    """``eventsourcing.postgres``'s application recorder, plus the chain row per event.

    The chain rows are written after the insert returned its notification ids, still inside
    the transaction that holds ``LOCK TABLE ... IN EXCLUSIVE MODE``.
    """

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        self.chain = ChainTable.for_postgres(
            schema=datastore.schema, events_table=events_table_name
        )
        self.sql_create_statements.extend(SQL(statement).format() for statement in self.chain.ddl)

    def create_table(self) -> None:
        """Create (if missing) under a session advisory lock: processes opening one log at once
        would otherwise race on eventsourcing's ``CREATE TYPE``/``CREATE OR REPLACE FUNCTION``
        ("tuple concurrently updated")."""
        with self.datastore.get_connection() as conn:
            conn.execute(SQL("SELECT pg_advisory_lock({key})").format(key=DDL_LOCK_KEY))
            try:
                super().create_table()
            finally:
                conn.execute(SQL("SELECT pg_advisory_unlock({key})").format(key=DDL_LOCK_KEY))

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """eventsourcing's insert, in one plain transaction instead of psycopg's pipeline mode.

        In pipeline mode a large batch (a sync of a big corpus, a multi-megabyte document)
        could deadlock in ``Pipeline.sync``: the client blocked writing while the server blocked
        sending results (seen in the fuzz suite and the corpus benchmark). The statements are
        the same; only the round trips are not overlapped, which a one-writer-at-a-time append
        behind a table lock does not miss.
        """
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._insert_events(curs, stored_events, **kwargs)
            if not stored_events:
                return None
            self._insert_stored_events(curs, stored_events, **kwargs)
            return self._fetch_ids_after_insert_events(curs, stored_events, **kwargs)

    def _fetch_ids_after_insert_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
        self.chain.append(curs, stored_events, ids or ())
        return ids

    @contextmanager
    def reading(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=False) as curs:
            yield curs


class LoomPostgresFactory(PostgresFactory):
    """The built-in PostgreSQL persistence, with every event hash-chained as it is inserted."""

    application_recorder_class = ChainedPostgresRecorder
