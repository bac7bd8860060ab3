"""The event log port: what loom needs from a log, in loom's terms (ADR 0020).

Everything above the log (flows, replay, projections, bundles, the CLI, memory and knowledge)
uses only :class:`EventLog`. The one implementation today is eventsourcing's, in
:mod:`loom_runtime.storage`, the only package that imports eventsourcing; moving to another
eventsourcing release or another store touches that folder alone, and
:mod:`loom_runtime.log_conformance` is the contract a new implementation must pass.

Why one log per database: one notification sequence. Putting executions, memory writes and
corpus changes in the same log makes "position P" mean one thing everywhere, which is what
"the corpus as this execution saw it" relies on.

Storage is chosen by URL and a persistence setting (ADR 0001):

* ``sqlite:///path/to/loom.db`` (the default is ``./loom.db``, or ``LOOM_DB_URL``): WAL mode,
  ``synchronous=NORMAL`` by default.
* ``postgresql+psycopg://user:pw@host:port/db``: with a lock timeout (never "wait forever")
  and a pool size; needs the ``postgres`` extra.
* ``persistence="sqlalchemy"``: ``eventsourcing-sqlalchemy`` for either URL, kept as a
  configuration choice (``sqlalchemy`` extra); it keeps no hash chain.

With the built-in persistence every event is hash-chained as it is inserted (ADR 0011,
:mod:`loom_runtime.integrity`); every payload is redacted before it is mapped to a row
(ADR 0012, :mod:`loom_runtime.redaction`).
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar
from uuid import UUID

import msgspec

from loom_runtime.errors import ConfigurationError, LoomClosedError
from loom_runtime.redaction import Redactor, RedactorOption, resolve_redactor
from loom_runtime.retry import DEFAULT_RETRY, RetryPolicy
from loom_runtime.timestamps import UtcTimestamp

if TYPE_CHECKING:
    # SQLAlchemy is imported where a URL is parsed or an engine made, not when the package
    # is: a process that only replays bundles never needs it (ADR 0022).
    from sqlalchemy import Engine
    from sqlalchemy.engine import URL

    from loom_runtime.integrity import Anchor, VerifyReport
    from loom_runtime.stream import Change

Persistence = Literal["builtin", "sqlalchemy"]
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

DEFAULT_URL = "sqlite:///loom.db"
PAGE_SIZE = 500

_Id_co = TypeVar("_Id_co", covariant=True)
Outcome = TypeVar("Outcome")


class DomainEventProtocol(Protocol[_Id_co]):
    """What every event read from the log carries, whatever its class.

    Structural on purpose: loom's event classes satisfy it without naming it, and so does any
    event eventsourcing builds (it checks the same three attributes).
    """

    @property
    def originator_id(self) -> _Id_co:
        """The stream the event belongs to."""
        ...

    @property
    def originator_version(self) -> int:
        """Its place in that stream: 1, 2, 3... without gaps."""
        ...

    @property
    def timestamp(self) -> datetime:
        """When the writer created it (tz-aware UTC); grows with positions, to microseconds."""
        ...


Event = DomainEventProtocol[UUID]
"""An event of the log: every stream id is a UUID."""


class Row(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One stored event exactly as the log holds it: which stream, which version, the stored
    topic and the stored JSON state bytes (what a bundle carries, what the chain hashes).

    Untracked by the garbage collector (``gc=False``): its fields are a UUID and scalars, so
    it can be in no reference cycle, and a replay holds one per event of the execution; as
    tracked objects they made the collector run (and walk the process's whole heap) every
    few hundred rows."""

    stream: UUID
    version: int
    topic: str
    state: bytes


class Record(Row, frozen=True, kw_only=True):
    """A stored row and its position in the log (the log's clock: one global order)."""

    position: int


class Stamped(msgspec.Struct, frozen=True, kw_only=True):
    """The event at a position, decoded, and when it was recorded."""

    position: int
    event: Any
    timestamp: UtcTimestamp


class Saves(Protocol):
    """An aggregate the log can save: it hands over the events it has triggered since."""

    def collect_events(self) -> Sequence[Any]:
        """Its pending events, in order, each carrying its stream and version; forgets them."""
        ...


class Precondition(msgspec.Struct, frozen=True):
    """A row an append needs, read inside the append's own transaction, by its own statements
    (SQLite: its last insert; PostgreSQL: after its inserts, in the append's one statement).

    Why: a check read in a transaction of its own leaves a window in which another process
    can change the row between the check and the append's commit. Read by the append's own
    statements while it holds the database's write lock, the row is the one the commit
    sees: what changed it either committed first (and the append is refused) or waits for
    this commit. Where the write lock does not cover the row (PostgreSQL's is a lock on the
    events table), ``sql`` locks the row itself (``FOR SHARE``). The users today are sealed
    appends, which need their subject's data key to be live (ADR 0049), and a keyless Loom's
    first append; nothing here is about keys.

    ``sql`` is a ``SELECT`` with one ``?`` parameter, ``parameter``; the append proceeds when
    its first row's first column is true, and otherwise is rolled back whole and
    ``refusal()`` is raised in the appender's thread.
    """

    sql: str
    parameter: str
    refusal: Callable[[], BaseException]


PlannedPrecondition = Callable[[Sequence["Change"]], Precondition | None]
"""The :class:`Precondition` an attempt of :meth:`EventLog.append_replanned` must be given,
from the events that attempt planned (None: none)."""


class EventLog(Protocol):
    """The one log of a database: append to streams, read them back, follow the log in order.

    Appends are optimistic: a writer states the version it decided on and the append is
    refused whole (:class:`~loom_runtime.errors.StreamConflictError`) if the stream moved,
    which is loom's whole concurrency story (no locks held while a flow or a plan runs).
    Positions are the log's own clock: they only grow, and may skip (a failed PostgreSQL insert
    consumes a sequence value), so readers continue from the last position *seen*.
    """

    settings: LogSettings
    """Where the log lives and how it is written."""

    @property
    def redactor(self) -> Redactor | None:
        """The redactor every value and payload passes before storage (its counts included)."""
        ...

    @property
    def engine(self) -> Engine:
        """SQLAlchemy engine on the log's database, shared by every projection of this log."""
        ...

    @property
    def position(self) -> int:
        """The head: the highest position in the log (0 when empty), "now" in log time."""
        ...

    def append(
        self,
        stream: UUID,
        *,
        expected_version: int,
        events: Sequence[Change],
        precondition: Precondition | None = None,
    ) -> list[int]:
        """Append ``events`` atomically after ``expected_version``; returns their positions.

        All or nothing: if another writer appended after ``expected_version`` first,
        :class:`~loom_runtime.errors.StreamConflictError` is raised and nothing is written.
        ``precondition`` as for :meth:`save`.
        """
        ...

    def append_replanned(
        self,
        stream: UUID,
        plan: Callable[[int], tuple[Sequence[Change], Outcome]],
        *,
        what: str,
        precondition: Precondition | PlannedPrecondition | None = None,
    ) -> tuple[list[int], Outcome]:
        """Plan ``stream``'s next events against its current version and append them,
        re-planning from a fresh read whenever another writer got there first or the database
        was busy (ADR 0019).

        ``plan(version)`` is called once per attempt, after the version is read, and returns
        the events to append after it (none: nothing is appended) and what the caller wants
        back from that decision (what was written, a plan's report). It must decide only from
        what it reads during that call, so that a retry decides on the new state; it may raise
        to refuse, which ends the write. Waits follow ``settings.write_retry``; when its budget
        is spent :class:`~loom_runtime.errors.WriteContentionError` names ``what``. Returns
        the appended events' positions and the outcome of the attempt that was appended.
        Every attempt's append is given ``precondition`` (as for :meth:`save`); its refusal
        ends the write. A :data:`PlannedPrecondition` is asked for the attempt's precondition
        with the events that attempt planned, for a check that depends on what is written (a
        sync's documents).
        """
        ...

    @property
    def checks_preconditions(self) -> bool:
        """Whether :meth:`save` reads a :class:`Precondition` inside the append's own
        transaction. A log that cannot leaves the check to its caller, before the append."""
        ...

    def save(self, aggregate: Saves, *, precondition: Precondition | None = None) -> list[int]:
        """Append the events ``aggregate`` triggered since it was loaded or last saved.

        The events carry their own versions, so this is the same optimistic append as
        :meth:`append`: a lost race is a ``StreamConflictError`` and nothing is written.
        ``precondition`` (only where :attr:`checks_preconditions`) is read in the append's
        transaction; when it does not hold nothing is written and its refusal is raised.
        """
        ...

    def stream_version(self, stream: UUID) -> int:
        """The version of the stream's last event, 0 for a stream with none.

        Reads one row, so a writer's cost does not grow with the stream's length.
        """
        ...

    def events(
        self,
        stream: UUID,
        *,
        after_version: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Iterator[Any]:
        """The stream's events, decoded, by version (``desc``: newest first)."""
        ...

    def rows(self, stream: UUID) -> list[Row]:
        """The stream's rows exactly as stored, by version: what a bundle exports, and what
        an execution is loaded from for a replay (one read, no event built per row)."""
        ...

    def insert_rows(
        self, rows: Sequence[Row], *, precondition: Precondition | None = None
    ) -> list[int]:
        """Store rows exactly as given (already mapped, e.g. from a bundle); their positions.

        No redaction or mapping runs: the bytes are what another log stored, and must stay
        what its chain and its replays saw. A version already taken is a
        ``StreamConflictError`` and nothing is written. ``precondition`` as for :meth:`save`.
        """
        ...

    def notifications(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        topics: Sequence[str] = (),
        page_size: int = PAGE_SIZE,
    ) -> Iterator[Record]:
        """Every row with ``after < position <= upto`` (of ``topics``, if any), in log order.

        Read ``page_size`` rows per query, continuing from the last position seen.
        """
        ...

    def decode(self, row: Row) -> Any:
        """The event a stored row holds, or :class:`~loom_runtime.errors.LogCorruptError`.

        A row is untrusted input: decoding never imports what it names (ADR 0018).
        """
        ...

    def event_at(self, position: int) -> Stamped | None:
        """The first event at or after ``position`` and when it was recorded (None: past the
        head). Its own position is in the result: positions may skip."""
        ...

    def verify(
        self,
        *,
        anchor: Anchor | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> VerifyReport:
        """Walk the hash chain (ADR 0011); see :func:`loom_runtime.integrity.verify_log`."""
        ...

    def close(self) -> None:
        """Release the log's connections and its engine's. Closing again does nothing; any
        other use after it raises :class:`~loom_runtime.errors.LoomClosedError`."""
        ...


class Closed:
    """What a closed log (or a Loom closed before it opened one) holds instead of its
    connections: any use raises :class:`~loom_runtime.errors.LoomClosedError`.

    Put in their place by ``close``, so that a log in use pays for no "is it closed?" check
    on its hot paths, and a closed one never reaches a pool that raises a driver's error (on
    SQLite eventsourcing's ``ConnectionPoolClosedError``, with no message).
    """

    __slots__ = ("__weakref__", "_what")  # weakly keyed registries (keyrings) look it up

    def __init__(self, what: str) -> None:
        self._what = what

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe these: not a use
            raise AttributeError(name)
        raise LoomClosedError(
            f"{self._what} was closed; open a new Loom(...) to use its database again"
        )


READ_ONLY: Final = "loom_read_only"
"""Execution option of a connection that only reads (``engine.connect().execution_options(
**{READ_ONLY: True})``): on SQLite its transactions begin deferred, not ``IMMEDIATE``."""


def open_log(settings: LogSettings) -> EventLog:
    """The log these settings describe (created if missing), through eventsourcing.

    Imported here, on first use, so that importing loom costs nothing of the storage layer and
    only the backend the settings select is ever imported.
    """
    from loom_runtime.storage.application import EventsourcingLog

    return EventsourcingLog(settings)


SECURE_DELETE: Final = "PRAGMA secure_delete=ON"
"""What every SQLite connection loom opens for the log's read models and key table runs:
SQLite then overwrites with zeros what a ``DELETE`` or an ``UPDATE`` frees (ADR 0049, amended
"free pages"). The read models hold documents' and memory entries' text in clear until an
erasure purges them, and a destroyed data key is overwritten in its row: without the pragma
both stayed in the file's free space and free pages, upstream SQLite's compiled default being
OFF (Debian's build, among others, defaults it ON)."""


def decode_rows(rows: Iterable[Row]) -> list[Any]:
    """The events stored rows hold, with no log open (a bundle's); as :meth:`EventLog.decode`."""
    from loom_runtime.storage.mapper import decode_row

    return [decode_row(row) for row in rows]


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
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        if isinstance(url, str) and not url.strip():  # `--db "$UNSET"`: never the default's
            raise ConfigurationError(
                "the database URL is empty: give sqlite:///path/to/loom.db or "
                "postgresql+psycopg://user:password@host:port/dbname (or leave it out for "
                "LOOM_DB_URL, else ./loom.db)"
            )
        raw = url or os.environ.get("LOOM_DB_URL") or DEFAULT_URL
        try:
            self.url: URL = make_url(raw)
        except ArgumentError as exc:
            path = "" if "://" in raw else f" (the SQLite file {raw!r} is sqlite:///{raw})"
            raise ConfigurationError(
                f"Cannot parse database URL {raw!r}{path}: use sqlite:///path/to/loom.db or "
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
        if (
            not isinstance(lock_timeout, int | float)
            or isinstance(lock_timeout, bool)
            or not 0 < lock_timeout < math.inf  # NaN fails too
        ):
            raise ConfigurationError(
                f"lock_timeout must be a finite number of seconds > 0, not {lock_timeout!r}: "
                "loom never waits forever"
            )
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ConfigurationError(f"pool_size must be a whole number from 1, not {pool_size!r}")
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
        if backend == "postgres":  # the scheme of many a DATABASE_URL; SQLAlchemy dropped it
            backend = "postgresql"
            self.url = self.url.set(drivername="postgresql+psycopg")
        if backend not in ("sqlite", "postgresql"):
            raise ConfigurationError(
                f"Unsupported database {backend!r} in {self.url!r}: loom runs on SQLite or "
                "PostgreSQL"
            )
        if backend == "sqlite" and (self.url.host or self.url.port or self.url.username):
            # SQLAlchemy reads ``sqlite://dir/loom.db`` as host ``dir``, file ``loom.db``: its
            # engine refuses that, but the log's own connection would open ``./loom.db``.
            meant = "/".join(part for part in (self.url.host, self.url.database) if part)
            raise ConfigurationError(
                f"{self.url.render_as_string(hide_password=True)!r} has two slashes, so "
                f"SQLite would read {self.url.host!r} as a host: did you mean "
                f"'sqlite:///{meant}'? (three slashes before a relative path, four before an "
                "absolute one: sqlite:////var/lib/loom.db)"
            )
        if backend == "sqlite" and (
            self.url.query or (self.url.database or "").startswith("file:")
        ):
            # The log's own connections open the path as a URI, the SQLAlchemy engine (the
            # workers, key and read-model tables) as a file name: `file:` URLs and query
            # parameters put them in different databases, or one in memory.
            raise ConfigurationError(
                f"{self.url.render_as_string(hide_password=True)!r}: give the SQLite log as a "
                "plain file path (sqlite:///path/to/loom.db), without 'file:' or '?options': "
                "loom opens the file through two drivers, which would read them differently"
            )
        if LogSettings.holds_nul(self.url):
            # sqlite3 raised a bare ValueError ("embedded null byte"); libpq cuts the
            # connection string at it, and connected to a server the URL does not name.
            raise ConfigurationError(
                f"{self.url.render_as_string(hide_password=True)!r}: the database URL holds a "
                "NUL character (\\x00), which no path, host or parameter can"
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

    def create_engine(self) -> Engine:
        """A SQLAlchemy engine on the same database, for projections (same durability); a
        process forked from this one gets a pool of its own (``storage.forks``)."""
        from loom_runtime.storage.forks import engine_renewed_in_child

        engine = self._postgres_engine() if not self.is_sqlite else self._sqlite_engine()
        engine_renewed_in_child(engine)
        return engine

    @staticmethod
    def holds_nul(url: URL | str) -> bool:
        """Whether any part of ``url`` (user, password, host, database, a query's names and
        values, percent-encoded or not) holds a NUL character: no driver takes one (sqlite3
        raises a bare ValueError; libpq cuts the connection string there and reaches a server
        the URL does not name). Also for the stores' own URLs."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(url)
        except ArgumentError:  # not a URL at all: whoever opens it says so
            return isinstance(url, str) and "\x00" in url
        query = [
            part
            for name, value in parsed.query.items()
            for part in (name, *((value,) if isinstance(value, str) else value))
        ]
        parts = (parsed.username, parsed.password, parsed.host, parsed.database, *query)
        return any("\x00" in part for part in parts if part is not None)

    @staticmethod
    def overwrite_deleted_content(engine: Engine) -> None:
        """Have every new connection of ``engine`` run :data:`SECURE_DELETE`, if it is
        SQLite's (PostgreSQL has no such setting: see the erasure guide). For the engines loom
        opens: the log's (:meth:`create_engine`) and a memory store's opened from a URL; an
        engine a caller makes and passes in keeps its own settings, as SQLAlchemy leaves
        them."""
        if engine.dialect.name != "sqlite":
            return
        from sqlalchemy import event

        @event.listens_for(engine, "connect")
        def _secure_delete(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            dbapi_connection.execute(SECURE_DELETE)

    def postgres_connect_args(self) -> dict[str, str]:
        """libpq's connection parameters for this PostgreSQL URL, as SQLAlchemy's psycopg
        dialect reads it: the host, port, database, user and password the URL names (each
        left to libpq's defaults, ``PGHOST`` and the rest, when the URL leaves it out) and
        every parameter of its query (``?host=/run/postgresql``, ``sslmode``, ``options``).
        The log's pool connects with exactly these and the projections' engine with these
        plus its lock timeout, so both reach the same server the same way (ADR 0015, amended
        "url")."""
        _, params = self.url.get_dialect()().create_connect_args(self.url)
        return {name: str(value) for name, value in params.items()}

    def _postgres_engine(self) -> Engine:
        from sqlalchemy import create_engine

        lock_timeout = f"-c lock_timeout={round(self.lock_timeout * 1000)}"
        # libpq reads PGOPTIONS only when no ``options`` are given, as for the log's pool,
        # which gets the URL's; these carry the lock timeout, so they carry PGOPTIONS too: a
        # search path set there places loom's tables where it places the log's (ADR 0015,
        # amended "current schema").
        options = self.postgres_connect_args().get("options") or os.environ.get("PGOPTIONS")
        return create_engine(
            self.url,
            pool_size=self.pool_size,
            pool_pre_ping=True,
            connect_args={  # these replace the URL's own: its options are kept, not dropped
                "options": f"{options} {lock_timeout}" if options else lock_timeout,
                "connect_timeout": max(1, round(self.lock_timeout)),
            },
        )

    def _sqlite_engine(self) -> Engine:
        from sqlalchemy import create_engine, event

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
            # A read-only transaction (READ_ONLY set) is deferred: in WAL it reads a snapshot
            # and takes no write lock, so reads never queue behind, or hold up, a writer.
            read_only = conn.get_execution_options().get(READ_ONLY, False)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        self.overwrite_deleted_content(engine)
        return engine
