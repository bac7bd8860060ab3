"""The built-in PostgreSQL persistence: eventsourcing's, with every event hash-chained.

Imported only when a log is opened on a PostgreSQL URL (eventsourcing resolves the factory
by its topic), so a SQLite-only install never needs psycopg: the ``postgres`` extra.

An append is one statement, one round trip (ADR 0035): a PL/pgSQL function, created with the
schema, takes eventsourcing's ``LOCK TABLE ... IN EXCLUSIVE MODE``, inserts the events, reads
the chain heads, computes the links and inserts the chain rows, all server-side in the
statement's own transaction. Before it, the same work took eight client round trips, six of
them while every other writer waited for the lock. An append given a
:class:`~loom_runtime.log.Precondition` calls a second function that appends the same way and
then reads the precondition in that transaction, still one statement (ADR 0049,
"Writes"). The links are the ones
:mod:`loom_runtime.integrity` defines, computed with PostgreSQL's ``sha256``; they must equal
:func:`~loom_runtime.integrity.stream_link` and :func:`~loom_runtime.integrity.global_link`
byte for byte (``replay_tests/runtime/test_postgres_append.py`` writes one log through both
and verifies it as one chain).
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypedDict, cast
from uuid import UUID

import msgspec
import psycopg
from eventsourcing import persistence
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StoredEvent,
    Subscription,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore, PostgresFactory
from eventsourcing.utils import retry
from psycopg import pq
from psycopg.errors import error_from_result
from psycopg.sql import SQL, Composed, Identifier, Literal

from loom_runtime.errors import ConfigurationError
from loom_runtime.integrity import GENESIS
from loom_runtime.log import Precondition, Row
from loom_runtime.schema import DDL_LOCK_KEY
from loom_runtime.storage.application import search_path_schemas
from loom_runtime.storage.chain import CHAIN_TABLE, ChainedRecorder, ChainTable
from loom_runtime.storage.forks import renewed_in_child, reset_in_child, set_aside
from loom_runtime.storage.sqlite import PreconditionFailed

_FIELD_FUNCTION = "loom_chain_field"
"""``integrity._field`` for the types a stored row holds: a tag, an 8-byte length, the bytes."""

_FIELD_DDL = """
CREATE OR REPLACE FUNCTION {schema}.{field}(tag text, data bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE AS $field$
BEGIN
    IF data IS NULL THEN
        RETURN convert_to('n', 'UTF8') || int8send(0);
    END IF;
    RETURN convert_to(tag, 'UTF8') || int8send(octet_length(data)::bigint) || data;
END
$field$
"""
"""PL/pgSQL, not SQL: the planner would not inline a SQL function called with these arguments,
and a SQL function it does not inline is planned again in every transaction (measured: a
third of an append's server time)."""

_APPEND_DDL = """
CREATE OR REPLACE FUNCTION {schema}.{append}(
    originator_ids uuid[], versions bigint[], topics text[], states bytea[], lock_wait text
) RETURNS bigint[] LANGUAGE plpgsql AS $append$
DECLARE
    _id bigint;
    _ids bigint[] := '{{}}';
    _head bytea;
    _link bytea;
BEGIN
    PERFORM set_config('lock_timeout', lock_wait, true);
    LOCK TABLE {schema}.{events} IN EXCLUSIVE MODE;
    SELECT global_hash INTO _head FROM {schema}.{chain} ORDER BY notification_id DESC LIMIT 1;
    _head := coalesce(_head, {genesis});
    FOR i IN 1 .. coalesce(array_length(originator_ids, 1), 0) LOOP
        INSERT INTO {schema}.{events} (originator_id, originator_version, topic, state)
        VALUES (originator_ids[i], versions[i], topics[i], states[i])
        RETURNING notification_id INTO _id;
        SELECT stream_hash INTO _link FROM {schema}.{chain}
        WHERE originator_id = originator_ids[i] ORDER BY notification_id DESC LIMIT 1;
        _link := sha256(
            coalesce(_link, {genesis})
            || {schema}.{field}('s', convert_to(topics[i], 'UTF8'))
            || {schema}.{field}('s', convert_to(originator_ids[i]::text, 'UTF8'))
            || {schema}.{field}('i', convert_to(versions[i]::text, 'UTF8'))
            || {schema}.{field}('b', states[i])
        );
        _head := sha256(_head || int8send(_id) || _link);
        INSERT INTO {schema}.{chain} VALUES (_id, originator_ids[i], versions[i], _link, _head);
        _ids := _ids || _id;
    END LOOP;
    RETURN _ids;
END
$append$
"""
"""The append: lock, insert, chain, in the order the old client-side path took them.

No ``NOTIFY``: nothing in loom listens, and a notification queued per insert serialises every
commit on PostgreSQL's notify queue lock. ``lock_timeout`` is a parameter, set for the
statement's transaction only, so logs opened with different timeouts share one function.
"""


_PRECONDITION_FAILED = "LM001"
"""The SQLSTATE the checked append raises when its precondition does not hold (a class no
PostgreSQL error uses, so nothing else is taken for it)."""

_CHECKED_DDL = """
CREATE OR REPLACE FUNCTION {schema}.{checked}(
    originator_ids uuid[], versions bigint[], topics text[], states bytea[], lock_wait text,
    precondition text, parameter text
) RETURNS bigint[] LANGUAGE plpgsql AS $checked$
DECLARE
    _ids bigint[];
    _holds boolean;
BEGIN
    _ids := {schema}.{append}(originator_ids, versions, topics, states, lock_wait);
    EXECUTE precondition INTO _holds USING parameter;
    IF _holds IS NOT TRUE THEN
        RAISE EXCEPTION 'the append''s precondition does not hold: %', precondition
            USING ERRCODE = '{failed}';
    END IF;
    RETURN _ids;
END
$checked$
"""
"""The append, then its precondition read after the inserts, holding the table lock, in the
statement's own transaction: a false (or missing) answer raises, which rolls the whole
statement back. A function of its own rather than two more parameters of the append's: the
append's signature, and the statement prepared on it, stay as older processes and the bare
floor of the benchmark call them, and an append without a precondition (every decision) runs
exactly as before. ``EXECUTE`` plans the precondition on each call; it is one short read."""


class ChainedPostgresRecorder(PostgresApplicationRecorder, ChainedRecorder):
    """``eventsourcing.postgres``'s application recorder, appending in one round trip.

    eventsourcing's semantics are kept: the same table lock (commit order equals id order), the
    same primary key on ``(originator_id, originator_version)``, so a version conflict is the
    same unique violation, raised as eventsourcing's ``IntegrityError``; only where the work
    runs changed.
    """

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        self.chain = ChainTable.for_postgres(
            schema=datastore.schema, events_table=events_table_name
        )
        self.sql_create_statements.extend(SQL(statement).format() for statement in self.chain.ddl)
        names = {
            "schema": Identifier(datastore.schema),
            "events": Identifier(events_table_name),
            "chain": Identifier(CHAIN_TABLE),
            "field": Identifier(_FIELD_FUNCTION),
            "append": Identifier(f"{events_table_name}_append"),
            "checked": Identifier(f"{events_table_name}_append_checked"),
            "genesis": Literal(GENESIS),
        }
        self.sql_create_statements += [
            SQL(_FIELD_DDL).format(**names),
            SQL(_APPEND_DDL).format(**names),
            SQL(_CHECKED_DDL.replace("{failed}", _PRECONDITION_FAILED)).format(**names),
        ]
        self.statements: dict[tuple[bool, bool], Composed] = {
            (one, checked): SQL(
                "SELECT {schema}.{function}("
                + (_ONE if one else _MANY)
                + (", %s, %s" if checked else "")
                + ") AS ids"
            ).format(function=names["checked" if checked else "append"], **names)
            for one in (False, True)
            for checked in (False, True)
        }
        """The call by (one event, with a precondition). One event's arrays are built by the
        server: psycopg picks an array's dumper by inspecting the list on every call, which
        was a third of the client's time per call; four scalars skip it."""
        self._renderings: dict[int, bytes] = {}
        self.lock_wait = f"{datastore.lock_timeout}s"
        self.prepared_append = SQL(
            "PREPARE {name}(uuid, bigint, text, bytea, text) AS SELECT {schema}.{append}("
            "ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY[$4], $5)"
        ).format(name=Identifier(_PREPARED_APPEND), **names)
        """The one-event append as a named prepared statement, prepared once on the writer's
        connection (:class:`_Writer`): the server parses and plans it once, not per append."""
        self.prepared_checked = SQL(
            "PREPARE {name}(uuid, bigint, text, bytea, text, text, text) AS SELECT "
            "{schema}.{checked}(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY[$4], $5, $6, $7)"
        ).format(name=Identifier(_PREPARED_CHECKED), **names)
        """The same with a precondition (a keyless Loom's new execution, a sealed decision),
        prepared on the writer's connection by its first such append."""
        self.prepared_position = SQL("PREPARE {name} AS {statement}").format(
            name=Identifier(_PREPARED_POSITION), statement=self.max_notification_id_statement
        )
        """eventsourcing's own ``MAX(notification_id)`` statement, prepared on the writer's
        connection by its first read of the position (:meth:`max_notification_id`)."""
        self._writer: _Writer | None = None
        self._writer_lock = threading.Lock()
        renewed_in_child(self, "_writer_lock")
        self.select_stream_rows: Composed = SQL(
            "SELECT originator_version, topic, state FROM {schema}.{events} "
            "WHERE originator_id = %s ORDER BY originator_version"
        ).format(**names)
        self.select_stored_at: Composed = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{events} WHERE (originator_id, originator_version) IN "
            "(SELECT * FROM unnest(%s::uuid[], %s::bigint[]))"
        ).format(**names)
        """The rows at given (stream, version) pairs: what a lost append may have stored."""

    def create_table(self) -> None:
        """Create (if missing) under a session advisory lock: processes opening one log at once
        would otherwise race on ``CREATE TYPE``/``CREATE OR REPLACE FUNCTION`` ("tuple
        concurrently updated")."""
        try:
            with self.datastore.get_connection() as conn:
                conn.execute(SQL("SELECT pg_advisory_lock({key})").format(key=DDL_LOCK_KEY))
                try:
                    super().create_table()
                finally:
                    conn.execute(SQL("SELECT pg_advisory_unlock({key})").format(key=DDL_LOCK_KEY))
        except persistence.PersistenceError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.ReadOnlySqlTransaction):
                raise
            self._read_only_log()

    def _read_only_log(self) -> None:
        """A read-only database (a hot standby, ``default_transaction_read_only``) refuses the
        schema's DDL: a log that is there is read as it is (what only reads works, a write is
        refused by the server); one that is not is :class:`ConfigurationError`, not a trace."""
        schema = self.datastore.schema
        names = [f"{schema}.{self.events_table_name}", f"{schema}.{CHAIN_TABLE}"]
        with self.datastore.get_connection() as conn:
            found = conn.execute("SELECT to_regclass(%s), to_regclass(%s)", names).fetchone()
        if found is None or None in found.values():
            raise ConfigurationError(
                f"the database is read-only and holds no loom log ({' and '.join(names)} are "
                "missing): open a log written on its primary, or the primary's URL to make one"
            )

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        precondition: Precondition | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        """Append ``stored_events`` in one statement (:meth:`_insert`); retried when the
        connection was lost, as eventsourcing's recorder retries.

        A connection can be lost after the server committed the statement and before its
        reply arrived. The retry then meets the rows that attempt stored and fails on the
        version, which said "conflict, nothing was written" for an append that was written
        (a flow failed with :class:`~loom_runtime.errors.ExecutionConflictError` on its own
        decision). So a conflict after a lost attempt reads what is stored at the append's
        versions: the very events sent (same topic and state bytes) are this append, done,
        and their ids are returned; anything else is the conflict it always was.
        """
        try:
            return self._insert(stored_events, precondition)
        except (InterfaceError, OperationalError):
            pass  # lost: maybe before the commit, maybe after it
        try:
            return self._insert_again(stored_events, precondition)
        except IntegrityError:
            ids = self._stored_as_sent(stored_events)
            if ids is None:
                raise
            return ids

    @retry((InterfaceError, OperationalError), max_attempts=9, wait=0.2, stall=0.2)
    def _insert_again(
        self, stored_events: Sequence[StoredEvent], precondition: Precondition | None
    ) -> Sequence[int] | None:
        """:meth:`_insert` after a lost attempt: nine more, 0.2 s apart (eventsourcing's
        retry, as the recorder's own: ten attempts in all)."""
        return self._insert(stored_events, precondition)

    def _stored_as_sent(self, stored_events: Sequence[StoredEvent]) -> list[int] | None:
        """The ids of ``stored_events`` if each is stored at its stream and version exactly as
        sent (topic and state), in their order; None if any is not (another writer's)."""
        streams = [event.originator_id for event in stored_events]
        versions = [event.originator_version for event in stored_events]
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_stored_at, (streams, versions), prepare=False)
            stored = {
                (row["originator_id"], row["originator_version"]): row for row in curs.fetchall()
            }
        ids = []
        for event in stored_events:
            stream = event.originator_id
            row = stored.get(
                (stream if isinstance(stream, UUID) else UUID(stream), event.originator_version)
            )
            if row is None or row["topic"] != event.topic or bytes(row["state"]) != event.state:
                return None
            ids.append(row["notification_id"])
        return ids

    def _insert(
        self, stored_events: Sequence[StoredEvent], precondition: Precondition | None
    ) -> Sequence[int] | None:
        """One autocommit statement: its implicit transaction is the append's transaction.

        With a ``precondition``, the statement calls the checked function, which reads it
        after the inserts in that transaction; when it does not hold, nothing is stored and
        :class:`~loom_runtime.storage.sqlite.PreconditionFailed` is raised, as on SQLite.

        One array per column however many events (one event: four scalars the server puts in
        arrays), sent binary (no text escaping of the states on either side), so a large
        batch (a sync of a big corpus) is one message each way, with none of pipeline mode's
        risk of both ends blocking on a full socket buffer.

        An append of one event (every decision) goes through the recorder's writer
        connection (:class:`_Writer`) when no other thread of the process holds it; a batch,
        or a thread that finds the writer busy, checks a connection out of the pool and sends
        the statement through a cursor, unprepared: preparing costs a round trip of its own on
        each pooled connection, and PL/pgSQL caches the plans of the function's statements
        per session.
        """
        if not stored_events:
            return None
        one = len(stored_events) == 1
        if one and self._writer_lock.acquire(blocking=False):
            try:
                written = self._append_one(stored_events[0], precondition)
            finally:
                self._writer_lock.release()
            if written is not None:
                return written
        statement = self.statements[one, precondition is not None]
        parameters = (
            _one(stored_events[0], self.lock_wait)
            if one
            else _columns(stored_events, self.lock_wait)
        )
        if precondition is not None:
            parameters += (_server_sql(precondition), precondition.parameter)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            try:
                curs.execute(self._rendered(statement, conn), parameters, prepare=False)
            except psycopg.Error as exc:
                _raise_failed(exc, precondition)
                raise
            row = curs.fetchone()
        assert row is not None  # a SELECT of one function call returns one row
        ids: list[int] = row["ids"]
        return ids

    def _append_one(
        self, event: StoredEvent, precondition: Precondition | None
    ) -> list[int] | None:
        """One event through the writer's connection, or None if this recorder has none.

        Called holding ``_writer_lock``; a thread that finds it held (another thread of the
        process is appending) takes the pool's path instead, so appends from several threads
        still run side by side up to the table lock, as before. A writer whose connection
        failed is given back to the pool (which discards a broken connection) and the error
        raised, for ``insert_events``'s retry to take a new one.
        """
        writer = self._held_writer()
        if writer is None:
            return None
        try:
            return writer.append(event, precondition)
        except psycopg.Error as exc:
            raise self._writer_failed(writer, exc) from exc

    def _held_writer(self) -> _Writer | None:
        """This process's writer, taken from the pool if it has none; None for a pool of one.
        Called holding ``_writer_lock``."""
        writer = self._writer
        if writer is None or writer.pid != os.getpid():
            writer = self._writer = _Writer.take(self)
        return writer

    def _writer_failed(self, writer: _Writer, exc: psycopg.Error) -> persistence.PersistenceError:
        """eventsourcing's error for the writer's ``exc``; a writer whose connection failed is
        given back to the pool first (which discards a broken connection)."""
        if not writer.usable():
            self._writer = None
            writer.give_back()
        return _persistence_error(exc)

    def max_notification_id(self) -> int | None:
        """The log's position, read through the writer's connection when no other thread of
        the process holds it; else as eventsourcing reads it, through the pool.

        Every execution's start reads it (the position its ``Created`` event records), so it
        was a pool checkout and a psycopg cursor per execution: about 0.1 ms of client CPU,
        against about 0.01 ms for the same statement prepared on the held connection. The
        same statement, in its own autocommit transaction, one round trip. If the writer
        fails, the read (which changes nothing) is made again through the pool, whose retry
        is eventsourcing's.
        """
        if self._writer_lock.acquire(blocking=False):
            try:
                writer = self._held_writer()
                if writer is not None:
                    try:
                        return writer.position()
                    except psycopg.Error as exc:
                        self._writer_failed(writer, exc)
            except persistence.PersistenceError:
                pass  # no writer could be taken: the pool's path below says why, or reads
            finally:
                self._writer_lock.release()
        return super().max_notification_id()

    def release_writer(self) -> None:
        """Give the writer's connection back to the pool, before the pool is closed."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
            if writer is not None and writer.pid == os.getpid():
                writer.give_back()

    def _rendered(self, statement: Composed, conn: Any) -> bytes:
        """``statement`` as the bytes psycopg sends, rendered once: a ``Composed`` is joined
        and its identifiers quoted again on every execute, a visible share of the client's
        time per append. The bytes depend only on the names and the client encoding, which
        is the same on every connection of the pool."""
        rendered = self._renderings.get(id(statement))
        if rendered is None:
            rendered = self._renderings[id(statement)] = statement.as_bytes(conn)
        return rendered

    def stream_rows(self, stream: UUID) -> list[Row]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.select_stream_rows, (stream,), prepare=True)
            return [  # row by row, not fetchall: as the SQLite recorder's, for the collector
                Row(
                    stream=stream,
                    version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs
            ]

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """Refused: eventsourcing's subscription waits for the ``NOTIFY`` the append no longer
        sends, so it would never wake. Tail the log by polling ``notifications(after=...)``."""
        raise NotImplementedError(
            "loom's PostgreSQL log sends no NOTIFY, so an eventsourcing subscription would wait "
            "forever; tail it by polling EventLog.notifications(after=last position seen)"
        )

    @contextmanager
    def reading(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=False) as curs:
            yield curs


_URL_PARTS = frozenset({"dbname", "host", "port", "user", "password"})
"""The pool's connection arguments eventsourcing makes of its ``POSTGRES_*`` settings."""


class _Placement(TypedDict):
    """What ``LoomPostgresFactory._place_the_log`` reads from the server, in one query."""

    current: str | None
    """``current_schema()``: where PostgreSQL creates this connection's tables."""
    path: list[str]
    """The schemas of the effective search path that exist and this role may use."""
    logs: list[str]
    """The schemas among them (and where earlier versions put the log) holding a loom log."""
    role: str
    """``current_user``, quoted as SQL needs it."""
    creatable: bool | None
    """Whether this role may create tables in ``current`` (None without one)."""
    keyword: bool | None
    """Whether ``current`` is one of PostgreSQL's reserved words (None without one)."""
    unusable: list[str]
    """Schemas of the search path that exist but this role may not use (no ``USAGE``)."""


def _placement_problem(named: list[str], found: _Placement, earlier: str) -> str | None:
    """Why the log cannot be placed in ``found["current"]`` (see
    ``LoomPostgresFactory._place_the_log``): ``named``, the URL's search path; ``earlier``,
    where earlier versions put the log."""
    current, path, logs, role = found["current"], found["path"], found["logs"], found["role"]
    shown = ", ".join(path) or "none"
    own_schema = (
        f"CREATE SCHEMA {role} AUTHORIZATION {role} (the default search path puts a schema "
        "of the role's name first)"
    )
    if named and named[0] not in path:
        return (
            f"schema {named[0]!r}, the first the URL's search_path names, does not exist (or "
            f"this role may not use it): create it, or name one that exists (existing: {shown})"
        )
    if current is None and found["unusable"]:
        unusable = found["unusable"][0]
        return (
            f"schema {unusable!r} of this connection's search path exists, but role {role} "
            "may not use it (no USAGE privilege), so PostgreSQL has nowhere to create loom's "
            f"tables: as a superuser, run {own_schema}, or GRANT USAGE, CREATE ON SCHEMA "
            f"{unusable} TO {role}"
        )
    if current is None:
        return (
            "no schema of this connection's search path exists, so PostgreSQL has nowhere to "
            "create loom's tables: create one, or name one with search_path in the URL"
        )
    if current is not None and (found["keyword"] or not _UNQUOTED_NAME.fullmatch(current)):
        return (
            f"schema {current!r}, where PostgreSQL creates this connection's tables, needs "
            "quoting in SQL (spaces, punctuation or a reserved word), and eventsourcing "
            "writes the log's schema into its statements unquoted: keep the log in a schema "
            "named with lower-case letters, digits and underscores"
        )
    if not found["creatable"] and current not in logs:
        return (
            f"role {role} may not create tables in schema {current!r}, where PostgreSQL "
            "creates this connection's tables (since PostgreSQL 15 only the owner of public "
            f"may, by default): as a superuser, run {own_schema}, or GRANT CREATE ON SCHEMA "
            f"{current} TO {role}"
        )
    if earlier != current and earlier in logs and current not in logs:
        return (
            f"schema {earlier!r} holds the loom log earlier versions made for this URL, but "
            f"PostgreSQL creates this connection's tables in {current!r} (search path: "
            f"{shown}), where loom now keeps its log beside its other tables: name "
            f"search_path={earlier} in the URL to keep using that log, or move its tables "
            f'into {current!r} (ADR 0015, amended "current schema")'
        )
    others = [schema for schema in logs if schema != current and schema in path]
    if others:
        return (
            f"the search path ({shown}) reaches schema {others[0]!r}, which holds another "
            "loom log: loom's tables other than the log's are found on the search path, so "
            "this log would share that one's (its key table among them). Name only "
            f"{current!r} in search_path"
        )
    return None


_UNQUOTED_NAME: Final = re.compile(r"[^\W\d][\w$]*")
"""A schema name eventsourcing's statements can hold unquoted: a letter (of any script or
case) or underscore, then letters, digits, underscores and dollars, and no reserved word.
Spaces, quotes, dots and commas broke them (a syntax error, a "cross-database reference")."""


_PLACEMENT = (
    "SELECT current_schema() AS current, current_schemas(false)::text[] AS path, "
    "ARRAY(SELECT n.nspname::text FROM pg_class AS c JOIN pg_namespace AS n "
    "ON n.oid = c.relnamespace WHERE c.relname = %s AND (n.nspname = "
    "ANY(current_schemas(false)) OR n.nspname = %s) ORDER BY 1) AS logs, "
    "quote_ident(current_user) AS role, "
    "has_schema_privilege(current_schema(), 'CREATE') AS creatable, "
    "lower(current_schema()) IN (SELECT word FROM pg_get_keywords() WHERE catcode <> 'U') "
    "AS keyword, "
    # The search path as set ("$user" standing for the role), matched by quoted name.
    "ARRAY(SELECT n.nspname::text FROM pg_namespace AS n "
    "WHERE NOT has_schema_privilege(n.oid, 'USAGE') AND quote_ident(n.nspname) = "
    "ANY(array_replace(string_to_array(replace(current_setting('search_path'), ' ', ''), "
    "','), '\"$user\"', quote_ident(current_user))) ORDER BY 1) AS unusable"
)
"""The one catalog query placing the log (:class:`_Placement`)."""


class LoomPostgresFactory(PostgresFactory):
    """The built-in PostgreSQL persistence, with every event hash-chained as it is inserted.

    Its pool connects with the URL's own libpq parameters (``LOOM_POSTGRES_CONNECT``, made by
    :meth:`~loom_runtime.log.LogSettings.postgres_connect_args`) instead of the five settings
    eventsourcing reads: a host in the URL's query (a Unix socket), ``sslmode`` or
    ``options`` then reach the log's connections as they reach the projections' engine.
    """

    application_recorder_class = ChainedPostgresRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool = self.datastore.pool
        given = cast("dict[str, Any]", pool.kwargs)  # eventsourcing's is a dict, not a callable
        pool.kwargs = {
            **{name: value for name, value in given.items() if name not in _URL_PARTS},
            **msgspec.json.decode(self.env["LOOM_POSTGRES_CONNECT"], type=dict[str, str]),
        }
        reset_in_child(self, "_renew_pool")

    def application_recorder(self) -> ApplicationRecorder:
        """The recorder, its tables created once the pool's kept connections are open.

        Without that wait the schema lock, the log's first request, came before either kept
        connection was ready, every time, and psycopg opened a third for it: one server
        backend more per opened log (ADR 0015, amended "open"). The wait is made here once,
        not through eventsourcing's ``pool_open_timeout``: psycopg's ``wait`` waits for the
        pool to be full, so made on every checkout it would block while the writer holds a
        connection. Creating the tables needs both connections anyway (one holds the schema
        lock), so a server that can give fewer failed the open before this wait too.
        """
        pool = self.datastore.pool
        with _translated():
            pool.open(wait=True, timeout=pool.timeout)
        self._place_the_log()
        recorder = super().application_recorder()
        self._loom_recorders = [*getattr(self, "_loom_recorders", ()), recorder]
        return recorder

    def _place_the_log(self) -> None:
        """Put the log in the schema where this connection creates its tables, or refuse to
        open (:class:`ConfigurationError`, before anything is made); one catalog query.

        loom's tables other than the log's (the key table, the projections' and their
        tracking) are unqualified, so PostgreSQL puts them in its ``current_schema()``: the
        first schema of the search path that exists, ``$user`` and a path set for the role,
        the database or ``PGOPTIONS`` included. The log's tables are qualified by
        eventsourcing with one schema, which was read from the URL alone (``public`` when it
        named none): with a schema of the role's own name, the log went to ``public`` (on
        PostgreSQL 15, "permission denied for schema public"; where allowed, every role's log
        was one table) and the other tables to the role's. The server's answer is the log's
        schema now (ADR 0015, amended "current schema"). Refused: a schema the URL names first
        that does not exist; a path with no schema that does; a log left where earlier
        versions put it (the URL's first schema, else ``public``) while the new place holds
        none, so that it is not taken for an empty one; a path reaching another schema that
        holds a log, whose tables would be shared (ADR 0015, amended "shared path"); a role
        that may not use the path's schemas, or create its tables in the current one, told
        the statement that fixes it rather than the server's "permission denied" from inside
        eventsourcing."""
        options = msgspec.json.decode(self.env["LOOM_POSTGRES_CONNECT"], type=dict[str, str])
        named = search_path_schemas(options.get("options", ""))
        earlier = named[0] if named else "public"  # where earlier versions put the log
        with self.datastore.get_connection() as conn:
            found = conn.execute(_PLACEMENT, [CHAIN_TABLE, earlier]).fetchone()
        assert found is not None  # a SELECT without FROM returns one row
        problem = _placement_problem(named, cast("_Placement", found), earlier)
        if problem is not None:
            self.datastore.pool.close()  # the open fails: its connections go with it
            raise ConfigurationError(f"{problem}; nothing was created")
        self.datastore.schema = found["current"]

    def _renew_pool(self) -> None:
        """In a forked child: a new, unopened pool configured as the inherited one, which is
        set aside unclosed (``loom_runtime.storage.forks``). The inherited connections are
        sockets the parent is using: the child's first append went out on one and failed
        ("prepared statement already exists"), and both processes then waited on replies
        meant for the other. psycopg_pool has no reset of its own for a forked child, so the
        pool is built again from its settings; the hooks eventsourcing gave it (``configure``,
        ``check``, ``reset``) are read from the attributes psycopg_pool keeps them in."""
        inherited = self.datastore.pool
        set_aside(inherited)
        self.datastore.pool = type(inherited)(
            inherited.conninfo,
            connection_class=inherited.connection_class,
            kwargs=inherited.kwargs,
            min_size=inherited.min_size,
            max_size=inherited.max_size,
            open=False,
            configure=inherited._configure,
            check=inherited._check,
            reset=inherited._reset,
            name=inherited.name,
            timeout=inherited.timeout,
            max_waiting=inherited.max_waiting,
            max_lifetime=inherited.max_lifetime,
            max_idle=inherited.max_idle,
            reconnect_timeout=inherited.reconnect_timeout,
            reconnect_failed=inherited._reconnect_failed,
            num_workers=inherited.num_workers,
            get_password_func=inherited.get_password_func,
        )

    def close(self) -> None:
        """Give every recorder's writer connection back before the pool closes."""
        for recorder in getattr(self, "_loom_recorders", ()):
            if isinstance(recorder, ChainedPostgresRecorder):
                recorder.release_writer()
        super().close()


_PREPARED_APPEND = "loom_append_one"
_PREPARED_CHECKED = "loom_append_one_checked"
_PREPARED_POSITION = "loom_position"
_ONE = "ARRAY[%b::uuid], ARRAY[%b::bigint], ARRAY[%b::text], ARRAY[%b::bytea], %s"
_MANY = "%b, %b::bigint[], %b, %b, %s"

_BINARY = [1] * 5
_BINARY_CHECKED = [1] * 7
_INT8 = struct.Struct("!q").pack


class _Writer:
    """One connection of the pool held by a recorder for its appends of one event.

    Every decision is such an append. Through psycopg's cursor, one call spent about ten
    times the client CPU libpq itself needs (measured on the bare call: 93-123 us per call
    on a held connection, 142-179 us with the pool checkout, 13-18 us through ``pgconn``):
    the cursor's query conversion, its dumpers, its prepared-statement bookkeeping, a dict
    row. Here the five parameters are sent as the binary bytes PostgreSQL reads (a UUID's 16
    bytes, a big-endian int8, UTF-8 text, the state as is), to the statement the server
    prepared once, and the one text value returned (``{id}``) is parsed. ``exec_prepared``
    blocks in libpq with the GIL released. The statement, its function, the transaction
    (the connection autocommits: one statement, one transaction) and the round trip are the
    ones the cursor sent.

    Held only when the pool can spare it (at least two connections), so reads never wait
    for a connection the writer keeps; returned when the log closes. A process forked with a
    writer does not use its parent's (the socket is shared): ``pid`` tells.
    """

    def __init__(self, recorder: ChainedPostgresRecorder, conn: Any, encoding: str):
        self.recorder = recorder
        self.conn = conn
        self.pgconn: pq.abc.PGconn = conn.pgconn
        self.encoding = encoding
        self.lock_wait = recorder.lock_wait.encode(encoding)
        """Encoded once: the recorder's lock wait never changes, and this is every append's."""
        self.pid = os.getpid()
        self.checked_prepared = False
        self.position_prepared = False

    @classmethod
    def take(cls, recorder: ChainedPostgresRecorder) -> _Writer | None:
        datastore = recorder.datastore
        pool = datastore.pool
        if pool.max_size < 2:
            return None
        wait = datastore.pool_open_timeout is not None
        timeout = datastore.pool_open_timeout or 30.0
        with _translated():
            pool.open(wait, timeout)
            conn = pool.getconn(timeout)
        writer = cls(recorder, conn, conn.info.encoding)
        try:
            with _translated():
                writer._prepare(recorder.prepared_append)
        except BaseException:
            writer.give_back()
            raise
        return writer

    def _prepare(self, statement: Composed) -> None:
        result = self.pgconn.exec_(statement.as_bytes(self.conn))
        if result.status != pq.ExecStatus.COMMAND_OK:
            # A lost connection as every other statement's (the retry's class): a writer's
            # session ended before its first checked append failed it for good.
            error = self._error(result)
            if not isinstance(error, psycopg.errors.DuplicatePreparedStatement):
                raise error
            # Left by an earlier recorder of this process on the same pooled connection: the
            # same name always holds the same statement for the same table.

    def append(self, event: StoredEvent, precondition: Precondition | None) -> list[int]:
        """Append ``event``, raising psycopg's errors (the caller translates them)."""
        encoding = self.encoding
        stream = event.originator_id
        name = _PREPARED_APPEND
        parameters = [
            (stream if isinstance(stream, UUID) else UUID(stream)).bytes,
            _INT8(event.originator_version),
            event.topic.encode(encoding),
            event.state,
            self.lock_wait,
        ]
        if precondition is not None:
            if not self.checked_prepared:
                self._prepare(self.recorder.prepared_checked)
                self.checked_prepared = True
            name = _PREPARED_CHECKED
            parameters += [
                _server_sql(precondition).encode(encoding),
                precondition.parameter.encode(encoding),
            ]
        formats = _BINARY if precondition is None else _BINARY_CHECKED
        result = self.pgconn.exec_prepared(name.encode(), parameters, formats)
        if result.status != pq.ExecStatus.TUPLES_OK:
            error = self._error(result)
            _raise_failed(error, precondition)
            raise error
        value = result.get_value(0, 0)
        assert value is not None  # the function returns an array of the one event's id
        return [int(bytes(value)[1:-1])]

    def position(self) -> int | None:
        """``MAX(notification_id)`` of the events table (None when it is empty)."""
        if not self.position_prepared:
            self._prepare(self.recorder.prepared_position)
            self.position_prepared = True
        result = self.pgconn.exec_prepared(_PREPARED_POSITION.encode(), [], [])
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise self._error(result)
        value = result.get_value(0, 0)
        return None if value is None else int(bytes(value))

    def _error(self, result: pq.abc.PGresult) -> psycopg.Error:
        """psycopg's error for a failed ``result``: a lost connection as psycopg's cursor
        raises it (``OperationalError``, the retry's class), else the server's error."""
        if self.pgconn.status != pq.ConnStatus.OK:
            return psycopg.OperationalError(result.get_error_message(self.encoding))
        return error_from_result(result, encoding=self.encoding)

    def usable(self) -> bool:
        return (
            self.pgconn.status == pq.ConnStatus.OK
            and self.pgconn.transaction_status == pq.TransactionStatus.IDLE
        )

    def give_back(self) -> None:
        self.recorder.datastore.pool.putconn(self.conn)


@contextmanager
def _translated() -> Iterator[None]:
    """psycopg's errors as eventsourcing's, as ``PostgresDatastore.get_connection`` raises
    them: loom and the recorder's retry catch eventsourcing's classes (a version conflict is
    its ``IntegrityError``, a lock timeout or lost connection its ``OperationalError``)."""
    try:
        yield
    except psycopg.Error as exc:
        raise _persistence_error(exc) from exc


def _persistence_error(exc: psycopg.Error) -> persistence.PersistenceError:
    """eventsourcing's error for psycopg's ``exc`` (see :func:`_translated`). The writer's
    append calls this in its own ``except`` rather than entering :func:`_translated`: a
    generator-based context manager costs a few microseconds on every decision."""
    for source, target in _ERRORS:
        if isinstance(exc, source):
            return target(str(exc))
    return persistence.PersistenceError(str(exc))


_ERRORS: tuple[tuple[type[psycopg.Error], type[persistence.PersistenceError]], ...] = (
    (psycopg.InterfaceError, persistence.InterfaceError),
    (psycopg.OperationalError, persistence.OperationalError),
    (psycopg.DataError, persistence.DataError),
    (psycopg.IntegrityError, persistence.IntegrityError),
    (psycopg.InternalError, persistence.InternalError),
    (psycopg.ProgrammingError, persistence.ProgrammingError),
    (psycopg.NotSupportedError, persistence.NotSupportedError),
    (psycopg.DatabaseError, persistence.DatabaseError),
)
"""In ``get_connection``'s order: the first class an error is an instance of decides."""


def _server_sql(precondition: Precondition) -> str:
    """The precondition's ``SELECT`` as ``EXECUTE`` takes it: its one ``?`` as ``$1``."""
    return precondition.sql.replace("?", "$1")


def _raise_failed(error: psycopg.Error, precondition: Precondition | None) -> None:
    """:class:`PreconditionFailed` in place of the checked function's refusal, from None (the
    server's message is the log's business, the refusal the caller's); else nothing."""
    if precondition is not None and error.sqlstate == _PRECONDITION_FAILED:
        raise PreconditionFailed(precondition) from None


def _one(event: StoredEvent, lock_wait: str) -> tuple[Any, ...]:
    """The parameters of a one-event call (``statements[True, ...]``): its fields, the lock wait."""
    return (event.originator_id, event.originator_version, event.topic, event.state, lock_wait)


def _columns(events: Sequence[StoredEvent], lock_wait: str) -> tuple[Any, ...]:
    """The parameters of a many-event call (``statements[False, ...]``): a list per column, then
    the lock wait."""
    return (
        [event.originator_id for event in events],
        [event.originator_version for event in events],
        [event.topic for event in events],
        [event.state for event in events],
        lock_wait,
    )
