"""The log: one eventsourcing Application per database, one global order for every package.

Why one application: eventsourcing gives each application one notification sequence. Putting
executions, memory writes and corpus changes in the same application makes "position P" mean
one thing everywhere, which is what "the corpus as this execution saw it" relies on.

Storage is chosen by URL and a persistence setting (ADR 0001):

* ``sqlite:///path/to/loom.db`` (the default is ``./loom.db``, or ``LOOM_DB_URL``): the
  built-in ``eventsourcing.sqlite`` module, WAL mode, ``synchronous=NORMAL`` by default.
* ``postgresql+psycopg://user:pw@host:port/db``: the built-in ``eventsourcing.postgres``
  module, with a lock timeout (never "wait forever") and a pool size.
* ``persistence="sqlalchemy"``: ``eventsourcing-sqlalchemy`` for either URL, kept as a
  configuration choice; it measured several times slower on the write path.

With the built-in modules every event is hash-chained as it is inserted (ADR 0011,
:mod:`loom_runtime.integrity`); every payload is redacted before it is mapped to a row
(ADR 0012, :mod:`loom_runtime.redaction`).

Projections open their own SQLAlchemy engine on the same database (:attr:`EventLog.engine`).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any, Literal
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, Notification
from eventsourcing.postgres import PostgresFactory
from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory
from eventsourcing_sqlalchemy.factory import Factory as SQLAlchemyFactory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.exc import OperationalError as SQLAlchemyOperationalError

from loom_runtime.errors import ConfigurationError, DatabaseUnavailableError
from loom_runtime.integrity import ChainedPostgresRecorder, ChainedSQLiteRecorder
from loom_runtime.mapper import MsgspecMapper
from loom_runtime.redaction import Redactor, RedactorOption, resolve_redactor
from loom_runtime.retry import DEFAULT_RETRY, RetryPolicy

Persistence = Literal["builtin", "sqlalchemy"]
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

DEFAULT_URL = "sqlite:///loom.db"
PAGE_SIZE = 500


class LogSettings:
    """Where the log lives and how it is written, resolved once from a URL and options."""

    def __init__(
        self,
        url: str | None = None,
        *,
        persistence: Persistence = "builtin",
        sqlite_synchronous: Synchronous = "NORMAL",
        lock_timeout: float = 5.0,
        pool_size: int = 5,
        redactor: RedactorOption = "builtin",
        write_retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        """``redactor``: secrets are redacted before storage with the built-in patterns unless
        you pass your own :class:`Redactor` (extra patterns, ``mode="refuse"``) or ``None``.
        ``write_retry``: how long a corpus or memory write waits for other writers (ADR 0019)."""
        raw = url or os.environ.get("LOOM_DB_URL") or DEFAULT_URL
        try:
            self.url: URL = make_url(raw)
        except ArgumentError as exc:
            raise ConfigurationError(
                f"Cannot parse database URL {raw!r}: use sqlite:///path/to/loom.db or "
                "postgresql+psycopg://user:password@host:port/dbname"
            ) from exc
        if persistence not in ("builtin", "sqlalchemy"):
            raise ConfigurationError(
                f"persistence must be 'builtin' or 'sqlalchemy', not {persistence!r}"
            )
        if sqlite_synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(
                f"sqlite_synchronous must be OFF, NORMAL, FULL or EXTRA, not {sqlite_synchronous!r}"
            )
        if lock_timeout <= 0:
            raise ConfigurationError("lock_timeout must be > 0 seconds: loom never waits forever")
        if pool_size < 1:
            raise ConfigurationError("pool_size must be at least 1")
        if not isinstance(write_retry, RetryPolicy):
            raise ConfigurationError(
                f"write_retry must be a loom_runtime.RetryPolicy, not {type(write_retry).__name__}"
            )
        self.persistence = persistence
        self.sqlite_synchronous = sqlite_synchronous
        self.lock_timeout = lock_timeout
        self.pool_size = pool_size
        self.write_retry = write_retry
        try:
            self.redactor: Redactor | None = resolve_redactor(redactor)
        except TypeError as exc:
            raise ConfigurationError(str(exc)) from exc
        backend = self.url.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise ConfigurationError(
                f"Unsupported database {backend!r} in {self.url!r}: loom runs on SQLite or "
                "PostgreSQL"
            )
        if backend == "sqlite" and self.url.database in (None, "", ":memory:"):
            raise ConfigurationError(
                "loom needs a SQLite *file* (sqlite:///path/to/loom.db): the log and its "
                "projections open separate connections, which an in-memory database cannot share"
            )
        if backend == "postgresql" and self.url.drivername != "postgresql+psycopg":
            self.url = self.url.set(drivername="postgresql+psycopg")

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    def application_env(self) -> dict[str, str]:
        """The eventsourcing environment for these settings."""
        if self.persistence == "sqlalchemy":
            return {
                "PERSISTENCE_MODULE": f"{__name__}:LoomSQLAlchemyFactory",
                "SQLALCHEMY_URL": self.url.render_as_string(hide_password=False),
                "LOOM_SQLITE_SYNCHRONOUS": self.sqlite_synchronous,
                "LOOM_LOCK_TIMEOUT_MS": str(round(self.lock_timeout * 1000)),
            }
        if self.is_sqlite:
            return {
                "PERSISTENCE_MODULE": f"{__name__}:LoomSQLiteFactory",
                "SQLITE_DBNAME": str(self.url.database),
                "SQLITE_LOCK_TIMEOUT": str(max(1, round(self.lock_timeout))),
                "LOOM_SQLITE_SYNCHRONOUS": self.sqlite_synchronous,
            }
        return {
            "PERSISTENCE_MODULE": f"{__name__}:LoomPostgresFactory",
            "POSTGRES_DBNAME": self.url.database or "postgres",
            "POSTGRES_HOST": self.url.host or "127.0.0.1",
            "POSTGRES_PORT": str(self.url.port or 5432),
            "POSTGRES_USER": self.url.username or "postgres",
            "POSTGRES_PASSWORD": self.url.password or "",
            "POSTGRES_POOL_SIZE": str(self.pool_size),
            # eventsourcing's default is 0, i.e. wait forever for the table lock.
            "POSTGRES_LOCK_TIMEOUT": str(max(1, round(self.lock_timeout))),
            "POSTGRES_CONNECT_TIMEOUT": str(max(1, round(self.lock_timeout))),
        }

    def create_engine(self) -> Engine:
        """A SQLAlchemy engine on the same database, for projections (same durability)."""
        if not self.is_sqlite:
            return create_engine(
                self.url,
                pool_size=self.pool_size,
                pool_pre_ping=True,
                connect_args={
                    "options": f"-c lock_timeout={round(self.lock_timeout * 1000)}",
                    "connect_timeout": max(1, round(self.lock_timeout)),
                },
            )
        engine = create_engine(self.url, connect_args={"timeout": self.lock_timeout})
        synchronous = self.sqlite_synchronous

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            # pysqlite's own transaction handling defers BEGIN; take it over so that a
            # projection's read-then-write runs in one real transaction (SQLAlchemy docs,
            # "Serializable isolation / Savepoints / Transactional DDL").
            dbapi_connection.isolation_level = None
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute(f"PRAGMA synchronous={synchronous}")

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine


class _SynchronousPool(SQLiteConnectionPool):
    """eventsourcing's SQLite pool, plus the ``synchronous`` pragma loom chose (ADR 0001)."""

    def __init__(self, *, synchronous: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.synchronous = synchronous

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection.cursor().execute(f"PRAGMA synchronous={self.synchronous}")
        return connection


class LoomSQLiteFactory(SQLiteFactory):
    """The built-in SQLite persistence, with loom's durability setting applied per connection
    and every event hash-chained as it is inserted."""

    application_recorder_class = ChainedSQLiteRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool = self.datastore.pool
        self.datastore.pool = _SynchronousPool(
            synchronous=self.env.get("LOOM_SQLITE_SYNCHRONOUS", "NORMAL"),
            db_name=pool.db_name,
            lock_timeout=pool.lock_timeout,
        )


class LoomPostgresFactory(PostgresFactory):
    """The built-in PostgreSQL persistence, with every event hash-chained as it is inserted."""

    application_recorder_class = ChainedPostgresRecorder


class LoomSQLAlchemyFactory(SQLAlchemyFactory):
    """eventsourcing-sqlalchemy, with the same durability and lock-timeout settings as the
    built-in modules: it has no options for either, so they are set on each new connection."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        engine = self.datastore.engine
        if not isinstance(engine, Engine):
            return  # a caller-supplied session or connection keeps its own settings
        synchronous = self.env.get("LOOM_SQLITE_SYNCHRONOUS", "NORMAL")
        lock_timeout_ms = int(self.env.get("LOOM_LOCK_TIMEOUT_MS", "5000"))

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            if engine.dialect.name == "sqlite":
                cursor.execute(f"PRAGMA synchronous={synchronous}")
            else:
                cursor.execute(f"SET lock_timeout = {lock_timeout_ms}")
            cursor.close()


class EventLog(Application[UUID]):
    """The one application that holds every event loom writes."""

    name = "loom"

    def __init__(self, settings: LogSettings) -> None:
        self.settings = settings
        if not settings.is_sqlite:
            self._check_reachable()
        super().__init__(env=settings.application_env())

    def _check_reachable(self) -> None:
        """Connect once before eventsourcing's pool does, to name what is wrong.

        The pool retries a failed connect in the background and reports only "couldn't get
        a connection after 5.00 sec". The connection is the projections' engine's own, so a
        reachable database pays nothing: the projections reuse it.
        """
        try:
            with self.engine.connect():
                pass
        except SQLAlchemyOperationalError as exc:
            self.engine.dispose()
            url = self.settings.url
            host, port, user = url.host or "127.0.0.1", url.port or 5432, url.username or "postgres"
            raise DatabaseUnavailableError(
                database=url.database or "postgres",
                where=f"{host}:{port} as {user}",
                cause=" ".join(str(exc.orig).split()),
            ) from exc

    def construct_mapper(self) -> Mapper[UUID]:
        return MsgspecMapper(redactor=self.settings.redactor)

    @property
    def redactor(self) -> Redactor | None:
        """The redactor every value and payload passes before storage (its counts included)."""
        return self.settings.redactor

    @cached_property
    def engine(self) -> Engine:
        """SQLAlchemy engine on the log's database, shared by every projection of this log."""
        return self.settings.create_engine()

    @property
    def position(self) -> int:
        """The highest notification id in the log (0 when empty): "now" in log time."""
        return self.recorder.max_notification_id() or 0

    def notifications(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        topics: Sequence[str] = (),
        page_size: int = PAGE_SIZE,
    ) -> Iterator[Notification]:
        """Every notification with ``after < id <= upto``, in log order, paged.

        Ids may have permanent gaps (a failed PostgreSQL insert consumes a sequence value), so
        paging continues from the last id *seen*, never from ``after + page_size``.
        """
        while True:
            page = self.recorder.select_notifications(
                start=after,
                limit=page_size,
                stop=upto,
                topics=topics,
                inclusive_of_start=False,
            )
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].id

    def close(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()
        super().close()
