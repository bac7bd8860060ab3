"""The event log port implemented with eventsourcing: one Application per database.

:class:`EventsourcingLog` is what :func:`loom_runtime.log.open_log` returns. It *has* an
eventsourcing ``Application`` rather than being one, so the only surface above the storage is
the port: nothing outside this package reaches a recorder, a mapper or a repository.

The persistence module is chosen by topic in the application's environment, which is how
eventsourcing resolves it; the PostgreSQL and eventsourcing-sqlalchemy modules are imported
only when the settings select them, and a missing optional package is a
:class:`~loom_runtime.errors.MissingExtraError` naming the extra to install.
"""

from __future__ import annotations

import getpass
import importlib
import os
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import msgspec
from eventsourcing.application import Application
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    Mapper,
    OperationalError,
    StoredEvent,
)
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError as SQLAlchemyOperationalError

from loom_runtime.errors import (
    ConfigurationError,
    DatabaseBusyError,
    DatabaseUnavailableError,
    IntegrityUnsupportedError,
    LogCorruptError,
    LoomError,
    MissingExtraError,
    StreamConflictError,
)
from loom_runtime.integrity import verify_rows
from loom_runtime.log import (
    PAGE_SIZE,
    Closed,
    LogSettings,
    Outcome,
    PlannedPrecondition,
    Precondition,
    Record,
    Row,
    Saves,
    Stamped,
)
from loom_runtime.redaction import Redactor
from loom_runtime.retry import is_busy_message, retrying
from loom_runtime.storage.chain import ChainedRecorder
from loom_runtime.storage.mapper import MsgspecMapper, decode_event, decode_row
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder, PreconditionFailed, sqlite_error

if TYPE_CHECKING:
    from loom_runtime.integrity import Anchor, VerifyReport
    from loom_runtime.stream import Change

_SQLITE = "loom_runtime.storage.sqlite"
_POSTGRES = "loom_runtime.storage.postgres"
_SQLALCHEMY = "loom_runtime.storage.alchemy"

_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    _POSTGRES: ("postgres", ("psycopg", "psycopg_pool")),
    _SQLALCHEMY: ("sqlalchemy", ("eventsourcing_sqlalchemy",)),
}
"""Optional backend module -> (the extra that installs it, the packages that extra provides)."""


def environment(settings: LogSettings) -> dict[str, str]:
    """The eventsourcing environment for ``settings``: its persistence module and options."""
    if settings.persistence == "sqlalchemy":
        return {
            "PERSISTENCE_MODULE": f"{_SQLALCHEMY}:LoomSQLAlchemyFactory",
            "SQLALCHEMY_URL": settings.url.render_as_string(hide_password=False),
            "LOOM_SQLITE_SYNCHRONOUS": settings.sqlite_synchronous,
            "LOOM_LOCK_TIMEOUT_MS": str(round(settings.lock_timeout * 1000)),
        }
    if settings.is_sqlite:
        return {
            "PERSISTENCE_MODULE": f"{_SQLITE}:LoomSQLiteFactory",
            "SQLITE_DBNAME": str(settings.url.database),
            "SQLITE_LOCK_TIMEOUT": str(max(1, round(settings.lock_timeout))),
            "LOOM_SQLITE_SYNCHRONOUS": settings.sqlite_synchronous,
        }
    connect = settings.postgres_connect_args()
    return {
        "PERSISTENCE_MODULE": f"{_POSTGRES}:LoomPostgresFactory",
        # The pool connects with the URL's own libpq parameters, the projections' engine's
        # (LoomPostgresFactory). eventsourcing's factory still requires its five settings of
        # the same; the ones the URL leaves out are libpq's to default, as for the engine.
        "LOOM_POSTGRES_CONNECT": msgspec.json.encode(connect).decode(),
        "POSTGRES_DBNAME": connect.get("dbname", ""),
        "POSTGRES_HOST": connect.get("host", ""),
        "POSTGRES_PORT": connect.get("port", ""),
        "POSTGRES_USER": connect.get("user", ""),
        "POSTGRES_PASSWORD": connect.get("password", ""),
        # No POSTGRES_SCHEMA: the factory puts the log in the schema the server creates the
        # connection's tables in, where loom's other (unqualified) tables go (ADR 0015,
        # amended "current schema").
        # eventsourcing opens POSTGRES_POOL_SIZE connections up front (psycopg's min_size) and
        # allows POSTGRES_MAX_OVERFLOW more. Two kept (the held writer's and one for reads,
        # which opening the log uses anyway to create its tables under the schema lock), the
        # rest on demand up to the same ceiling as before: pool_size + eventsourcing's
        # overflow of 10. Five backends per opened log cost the server more than most
        # short-lived processes (a CLI command, a test) ever use (ADR 0015, amended "pool").
        "POSTGRES_POOL_SIZE": str(_KEPT),
        "POSTGRES_MAX_OVERFLOW": str(settings.pool_size - _KEPT + _OVERFLOW),
        # eventsourcing's default is 0, i.e. wait forever for the table lock.
        "POSTGRES_LOCK_TIMEOUT": str(max(1, round(settings.lock_timeout))),
        "POSTGRES_CONNECT_TIMEOUT": str(max(1, round(settings.lock_timeout))),
    }


_SEARCH_PATH = re.compile(
    r"(?:-c\s*|--)search[_-]path\s*=\s*(?P<path>(?:\\\s|[^\s])+)", re.IGNORECASE
)
"""A ``search_path`` setting among libpq's ``options``: ``-csearch_path=tenant_a,public``,
``-c search_path=...`` or ``--search_path=...`` (``--search-path``), as the server reads them."""


def search_path_schemas(options: str) -> list[str]:
    """The schemas the ``search_path`` that libpq ``options`` set names, in order (none when
    they set none), ``$user`` left out; a quoted name keeps its case, an unquoted one is
    folded to lower case, as PostgreSQL reads them. Where the log goes is the server's answer
    (``current_schema()``); this is what the URL asked for, which earlier versions took the
    first of as the log's schema (``LoomPostgresFactory._place_the_log``)."""
    found = _SEARCH_PATH.search(options)
    if found is None:
        return []
    names = []
    for quoted, plain in _PATH_ITEM.findall(found["path"].replace("\\ ", " ")):
        # Quoted, a name is as written (a doubled quote is one); else PostgreSQL folds it.
        name = quoted.replace('""', '"') if quoted else plain.strip().lower()
        if name and name != "$user":
            names.append(name)
    return names


_PATH_ITEM = re.compile(r'\s*(?:"((?:[^"]|"")*)"|([^,]*))\s*(?:,|$)')
"""One schema of a search path: a quoted name (which may hold commas and doubled quotes), or
what runs to the next comma."""


_KEPT = 2
"""Connections a PostgreSQL log's pool keeps open: the held writer's and one for reads, so a
read never waits for a new connection to be made while the writer holds the other."""
_OVERFLOW = 10
"""eventsourcing's own ``POSTGRES_MAX_OVERFLOW`` default, kept as the pool's headroom."""


def _system_user() -> str:
    """The operating-system user's name, libpq's default user (and so database) name."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid without a name, as in some containers
        return "the operating-system user"


def import_backend(env: dict[str, str]) -> None:
    """Import the persistence module ``env`` names, or say which extra provides it.

    eventsourcing would import it too, but would report a missing driver as a bare
    ``ModuleNotFoundError`` from deep inside its factory lookup.
    """
    module = env["PERSISTENCE_MODULE"].partition(":")[0]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        extra, packages = _EXTRAS.get(module, ("", ()))
        if (exc.name or "").partition(".")[0] in packages:
            raise MissingExtraError(extra=extra, missing=exc.name or "") from exc
        raise


def _unopenable(settings: LogSettings, error: sqlite3.Error) -> LoomError:
    """The loom error for a SQLite log the driver would not open, by cause: a lock held by
    another connection is not damage, nor is a path that names no file a folder could hold."""
    path = Path(settings.url.database or "").absolute()
    if isinstance(error, sqlite3.OperationalError) and is_busy_message(str(error)):
        return DatabaseBusyError(database=str(path), lock_timeout=settings.lock_timeout)
    if isinstance(error, sqlite3.OperationalError) and not path.parent.is_dir():
        return ConfigurationError(
            f"no folder {path.parent} to create the log {path.name} in: create the folder, "
            "or fix the URL (--db / LOOM_DB_URL)"
        )
    if isinstance(error, sqlite3.OperationalError) and path.is_dir():
        return ConfigurationError(f"the log's path {path} is a folder: name a file in it")
    if isinstance(error, sqlite3.OperationalError):
        return DatabaseUnavailableError(
            f"cannot open the SQLite log at {path}: {error}", database=str(path)
        )
    if not _begins_as_sqlite(path):  # a mistyped path (a Markdown file) is told so first
        return LogCorruptError(
            f"the file at {path} is not a SQLite database (it does not begin as one): check "
            "the path (--db / LOOM_DB_URL); if it held your log, it is damaged: restore it "
            "from a backup"
        )
    return LogCorruptError(
        f"the database at {settings.url!r} cannot be opened as a log ({error}): it is "
        "damaged or not a loom database; restore it from a backup"
    )


_SQLITE_HEADER = b"SQLite format 3\x00"
"""How every SQLite database file begins (its header string)."""


def _begins_as_sqlite(path: Path) -> bool:
    """Whether the file at ``path`` begins as a SQLite database does (an unreadable or empty
    file is given the benefit of the doubt: the driver's own error says more)."""
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except OSError:
        return True
    return not head or head == _SQLITE_HEADER


class _LoomApplication(Application[UUID]):
    """eventsourcing's Application with loom's mapper; its name keeps the stored table names."""

    name = "loom"

    def __init__(self, env: dict[str, str], redactor: Redactor | None) -> None:
        self._redactor = redactor
        super().__init__(env=env)

    def construct_mapper(self) -> Mapper[UUID]:
        return MsgspecMapper(redactor=self._redactor)

    def __del__(self) -> None:
        """Close when collected, as eventsourcing's ``__del__`` does, but without the module
        global it uses: this module is imported on first open, late, so at interpreter exit
        eventsourcing's module can be torn down before a log still referenced elsewhere."""
        try:  # noqa: SIM105 - contextlib.suppress is such a module global
            self.close()
        except AttributeError:
            pass


class EventsourcingLog:
    """The :class:`~loom_runtime.log.EventLog` of one database, stored by eventsourcing."""

    def __init__(self, settings: LogSettings) -> None:
        self.settings = settings
        env = environment(settings)
        import_backend(env)
        if not settings.is_sqlite:
            self._check_reachable()
        try:
            application = _LoomApplication(env, settings.redactor)
        except Exception as exc:
            if "engine" in self.__dict__:  # the reachability check's connection, pooled
                self.engine.dispose()
            driver_error = sqlite_error(exc) if settings.is_sqlite else None
            if driver_error is None:
                raise
            raise _unopenable(settings, driver_error) from exc
        self.application = application
        """The eventsourcing Application: for this package and tests of it, never above it."""

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
            # What the URL leaves out, libpq takes from PG* variables, then its defaults.
            connect = self.settings.postgres_connect_args()
            host = connect.get("host") or os.environ.get("PGHOST") or "libpq's default socket"
            port = connect.get("port") or os.environ.get("PGPORT") or "5432"
            user = connect.get("user") or os.environ.get("PGUSER") or _system_user()
            database = connect.get("dbname") or os.environ.get("PGDATABASE") or user
            raise DatabaseUnavailableError(
                f"cannot open the log in PostgreSQL database {database!r} at {host}:{port} as "
                f"{user}: {' '.join(str(exc.orig).split())}. Create the database (createdb "
                f"{database}), start the server, or fix the URL (--db / LOOM_DB_URL)",
                database=database,
            ) from exc

    @property
    def redactor(self) -> Redactor | None:
        return self.settings.redactor

    @cached_property
    def engine(self) -> Engine:
        return self.settings.create_engine()

    @property
    def position(self) -> int:
        try:
            return self.application.recorder.max_notification_id() or 0
        except (InterfaceError, OperationalError) as exc:  # lost on every retry
            raise DatabaseUnavailableError(
                f"the log's position could not be read, on every attempt: {exc} (check the "
                "database, then run again)",
                database=self.settings.url.render_as_string(hide_password=True),
            ) from exc

    # -- writing -----------------------------------------------------------------------------

    def append(
        self,
        stream: UUID,
        *,
        expected_version: int,
        events: Sequence[Change],
        precondition: Precondition | None = None,
    ) -> list[int]:
        now = datetime.now(UTC)
        return self._store(
            [
                cls(
                    originator_id=stream,
                    originator_version=expected_version + offset,
                    timestamp=now,
                    **fields,
                )
                for offset, (cls, fields) in enumerate(events, start=1)
            ],
            self._checked(precondition),
        )

    def append_replanned(
        self,
        stream: UUID,
        plan: Callable[[int], tuple[Sequence[Change], Outcome]],
        *,
        what: str,
        precondition: Precondition | PlannedPrecondition | None = None,
    ) -> tuple[list[int], Outcome]:
        def attempt() -> tuple[list[int], Outcome]:
            version = self.stream_version(stream)
            events, outcome = plan(version)
            if not events:
                return [], outcome
            checked = precondition(events) if callable(precondition) else precondition
            positions = self.append(
                stream, expected_version=version, events=events, precondition=checked
            )
            return positions, outcome

        return retrying(attempt, policy=self.settings.write_retry, what=what)

    @cached_property
    def checks_preconditions(self) -> bool:
        # The built-in recorders read one in the append's transaction: SQLite's after its
        # inserts, PostgreSQL's in the server-side function the append's one statement calls.
        # The PostgreSQL module (psycopg) is looked up only where it is loaded: a recorder of
        # its class means it is.
        recorder = self.application.recorder
        postgres = sys.modules.get("loom_runtime.storage.postgres")
        return isinstance(recorder, ChainedSQLiteRecorder) or (
            postgres is not None and isinstance(recorder, postgres.ChainedPostgresRecorder)
        )

    def save(self, aggregate: Saves, *, precondition: Precondition | None = None) -> list[int]:
        return self._store(aggregate.collect_events(), self._checked(precondition))

    def _checked(self, precondition: Precondition | None) -> Precondition | None:
        """``precondition``, refused when this log cannot read one in its append."""
        if precondition is not None and not self.checks_preconditions:
            raise ValueError(
                "this log cannot read a precondition inside its append's transaction "
                "(checks_preconditions is False): check before saving instead"
            )
        return precondition

    def _store(self, events: Sequence[Any], precondition: Precondition | None = None) -> list[int]:
        """Map and insert ``events`` in one transaction: the one path every write takes.

        The mapper and the recorder are called directly, not through ``Application.save``,
        which is the same two calls wrapped in work loom never uses (snapshots, an aggregate
        cache, followers' notification) and an ``isinstance`` of every event against a
        runtime-checkable Protocol, the one check whose cost grows with the Protocol's
        members: about a tenth of a recorded decision's CPU.
        """
        application = self.application
        stored = [application.mapper.to_stored_event(event) for event in events]
        try:
            if precondition is None:
                ids = application.recorder.insert_events(stored)
            else:
                ids = application.recorder.insert_events(stored, precondition=precondition)
        except IntegrityError as exc:
            raise StreamConflictError(_conflict(events[0])) from exc
        except PreconditionFailed as exc:
            raise exc.precondition.refusal() from None
        return list(ids or ())

    def insert_rows(
        self, rows: Sequence[Row], *, precondition: Precondition | None = None
    ) -> list[int]:
        self._checked(precondition)
        stored = [
            StoredEvent(
                originator_id=row.stream,
                originator_version=row.version,
                topic=row.topic,
                state=row.state,
            )
            for row in rows
        ]
        try:
            if precondition is None:
                ids = self.application.recorder.insert_events(stored)
            else:
                ids = self.application.recorder.insert_events(stored, precondition=precondition)
        except IntegrityError as exc:
            raise StreamConflictError(_conflict(stored[0])) from exc
        except PreconditionFailed as exc:
            raise exc.precondition.refusal() from None
        return list(ids or ())

    # -- reading -----------------------------------------------------------------------------

    def stream_version(self, stream: UUID) -> int:
        last = next(iter(self.application.events.get(stream, desc=True, limit=1)), None)
        return 0 if last is None else last.originator_version

    def events(
        self,
        stream: UUID,
        *,
        after_version: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Iterator[Any]:
        return iter(self.application.events.get(stream, gt=after_version, desc=desc, limit=limit))

    def rows(self, stream: UUID) -> list[Row]:
        recorder = self.application.recorder
        if isinstance(recorder, ChainedRecorder):  # the built-in persistence: one direct SELECT
            return recorder.stream_rows(stream)
        return [
            Row(
                stream=stream,
                version=stored.originator_version,
                topic=stored.topic,
                state=_stored_state(stored.state),
            )
            for stored in self.application.recorder.select_events(stream)
        ]

    def notifications(
        self,
        *,
        after: int = 0,
        upto: int | None = None,
        topics: Sequence[str] = (),
        page_size: int = PAGE_SIZE,
    ) -> Iterator[Record]:
        while True:
            page = self.application.recorder.select_notifications(
                start=after,
                limit=page_size,
                stop=upto,
                topics=topics,
                inclusive_of_start=False,
            )
            for n in page:
                yield Record(
                    position=n.id,
                    stream=_uuid(n.originator_id),
                    version=n.originator_version,
                    topic=n.topic,
                    state=_stored_state(n.state),
                )
            if len(page) < page_size:
                return
            after = page[-1].id

    def decode(self, row: Row) -> Any:
        return decode_row(row)

    def event_at(self, position: int) -> Stamped | None:
        page = self.application.recorder.select_notifications(start=position, limit=1)
        if not page:
            return None
        event = decode_event(
            stream=page[0].originator_id,
            version=page[0].originator_version,
            topic=page[0].topic,
            state=page[0].state,
        )
        return Stamped(position=page[0].id, event=event, timestamp=event.timestamp)

    def verify(
        self,
        *,
        anchor: Anchor | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> VerifyReport:
        recorder = self.application.recorder
        if not isinstance(recorder, ChainedRecorder):
            raise IntegrityUnsupportedError(
                f"the log at {self.settings.url!r} is stored with persistence="
                f"{self.settings.persistence!r}, which keeps no hash chain; use the built-in "
                "persistence (the default) to record a log that `loom verify` can check"
            )
        with recorder.reading() as cursor:
            chain = recorder.chain
            lowest, upto = chain.bounds(cursor)
            return verify_rows(
                chain.events(cursor, upto),
                chain.links(cursor, upto),
                anchor,
                upto=upto,
                lowest=lowest,
                progress=progress,
            )

    def close(self) -> None:
        if isinstance(self.application, Closed):
            return
        if "engine" in self.__dict__:
            self.engine.dispose()
        self.application.close()
        closed = Closed(f"the log at {self.settings.url!r}")
        self.application = closed  # type: ignore[assignment]  # every later use refuses
        self.__dict__["engine"] = closed


def _conflict(first: Any) -> str:
    """The refusal of an append whose ``first`` event (or row) found its version taken."""
    return (
        f"stream {first.originator_id} moved past version {first.originator_version - 1} "
        "before this append; nothing was written: re-read and retry"
    )


def _stored_state(state: bytes | bytearray | memoryview | str) -> bytes:
    """A row's state as the bytes loom wrote: a driver may hand them over as a memoryview, and
    SQLite as text when the log was edited outside loom (the sqlite3 shell's ``replace()``
    returns TEXT). Text is read as the UTF-8 it holds, as the stream reads (``sqlite.py``)
    already decode it: whether its content is still what loom wrote is ``loom verify``'s
    question, as for any edit."""
    if isinstance(state, str):
        return state.encode()
    return bytes(state)


def _uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
