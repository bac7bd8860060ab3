"""Tracked projections: read models rebuilt from the log, exactly once, crash-safe.

The log is the only source of truth; every store (the corpus index, the document manifest,
memory) is a projection of it. A projection remembers the last log position it applied, and
writes its rows *and* that position in one transaction. So:

* a crash mid-page rolls back both: the page is applied again on the next catch-up, never
  half-applied and never twice (no write-order tricks needed);
* two projectors racing on the same projection serialise on the tracking row (SQLite:
  ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR UPDATE``) and the loser re-reads the
  position, so no event is applied twice;
* a projection can be dropped and rebuilt from position 0, or built "as of" any position P
  with ``upto=P`` (:meth:`~loom_runtime.log.EventLog.notifications` includes ``upto``).

Paging continues from the last id seen, so permanent gaps in PostgreSQL's notification ids
are harmless. Pages are one transaction each (a transaction per event is many times slower).
"""

from __future__ import annotations

import logging
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import Any, Final, Protocol, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    MetaData,
    String,
    Table,
    bindparam,
    inspect,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from loom_runtime.entry_points import installed
from loom_runtime.errors import LogCorruptError, PositionError
from loom_runtime.log import PAGE_SIZE, READ_ONLY, DomainEventProtocol, EventLog
from loom_runtime.schema import create_missing

Progress = Callable[[int, int], None]
"""Called after each page with (position reached, target position)."""

logger = logging.getLogger("loom.runtime")
"""Rebuilds at INFO, catch-ups at DEBUG."""

_tracking_metadata = MetaData()
tracking_table = Table(
    "loom_tracking",
    _tracking_metadata,
    Column("projection", String(200), primary_key=True),
    Column("position", BigInteger, nullable=False),
)

# Built once: a catch-up runs these several times per write, and a statement built per call
# costs SQLAlchemy more than SQLite takes to run it (ADR 0044).
_SELECT_POSITION = select(tracking_table.c.position).where(
    tracking_table.c.projection == bindparam("b_projection")
)
_LOCK_POSITION = _SELECT_POSITION.with_for_update()
_UPDATE_POSITION = (
    tracking_table.update()
    .where(tracking_table.c.projection == bindparam("b_projection"))
    .values(position=bindparam("b_position"))
)


class TrackedProjection(Protocol):
    """What :func:`catch_up` needs from a read model, SQL or not."""

    name: str

    @property
    def topics(self) -> Sequence[str]:
        """The event topics the projection reads (empty: every event)."""
        ...

    def position(self) -> int:
        """The last log position applied (0 before any)."""
        ...

    def apply(
        self, events: Sequence[tuple[int, DomainEventProtocol[Any]]], *, after: int, upto: int
    ) -> bool:
        """Apply events and record ``upto`` atomically, only if the projection is still at
        ``after``, the position the page was read after.

        Returns False (and applies nothing) when the position moved meanwhile: another
        projector applied the page first, or reset the projection (a rebuild) after the page
        was read, when applying it would move past the events the reset cleared.
        """
        ...

    def reset(self) -> None:
        """Forget every row and the position, so a catch-up rebuilds from 0."""
        ...


ProjectionT = TypeVar("ProjectionT", bound=TrackedProjection)


class SQLProjection(ABC):
    """A read model in SQL tables of the log's own database, tracked in ``loom_tracking``.

    Subclasses declare their tables on ``self.metadata`` and implement :meth:`handle` (one
    event, inside the page's transaction) and :meth:`clear` (delete every row).

    One thread at a time applies a page of one projection object (``_applying``). A
    projection is shared by every thread that reads through it, and a subclass may keep the
    page being applied on the object (what it opened or holds before its transaction): the
    tracking row orders two threads' transactions, but not that state. A subclass that
    prepares a page in its own ``apply`` does so under the same lock, before calling this one
    (ADR 0051, amended "threads").
    """

    topics: Sequence[str] = ()

    def __init__(self, engine: Engine, *, name: str) -> None:
        self.engine = engine
        self.name = name
        self.metadata = MetaData()
        self._applying = threading.RLock()

    def create_tables(self, *, rows_lost: bool = False) -> None:
        """Create the tracking table and this projection's tables if missing.

        If any of the projection's tables had to be created while its tracking row says it is
        past position 0, the rows it counted are gone (someone dropped the tables): the
        position is reset so the next catch-up rebuilds from the log instead of trusting it.
        ``rows_lost``: the same for tables created elsewhere (a store that creates its own
        tables when it is opened says so, since they are not missing by the time this runs).
        The reverse too: a tracking row made here (none was left: deleted by hand, its table
        dropped) starts at 0, so rows its tables still hold are cleared, not applied over
        again from the log's start (duplicates, or a unique key's IntegrityError).
        """
        with self.engine.begin() as conn:
            created = create_missing(conn, [tracking_table, *self.metadata.sorted_tables])
            recreated = bool(created - {tracking_table.name})
            insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            # RETURNING, not rowcount: psycopg reports -1 for an insert that did nothing.
            tracked_anew = (
                conn.execute(
                    insert(tracking_table)
                    .values(projection=self.name, position=0)
                    .on_conflict_do_nothing(index_elements=["projection"])
                    .returning(tracking_table.c.projection)
                ).first()
                is not None
            )
            if tracked_anew and not (recreated or rows_lost):
                logger.warning(
                    "projection %r had tables but no tracking row (deleted, or the tables were "
                    "filled outside the log): its rows are cleared and rebuilt from the log",
                    self.name,
                )
            if recreated or rows_lost or tracked_anew:
                self.clear(conn)
                self._set_position(conn, 0)

    @abstractmethod
    def handle(self, conn: Connection, position: int, event: DomainEventProtocol[Any]) -> None:
        """Apply one event to the rows, inside the page's transaction."""

    @abstractmethod
    def clear(self, conn: Connection) -> None:
        """Delete every row of this projection (the tracking row is handled here)."""

    def position(self, *, conn: Connection | None = None) -> int:
        """The last log position applied; call :meth:`create_tables` first.

        ``conn``: read it in that connection's transaction (a reader that checks the position
        and reads the rows in one snapshot), not a transaction of its own."""
        if conn is not None:
            return self._read_position(conn)
        with self.reading() as own:
            return self._read_position(own)

    def _read_position(self, conn: Connection) -> int:
        value = conn.execute(_SELECT_POSITION, {"b_projection": self.name}).scalar_one_or_none()
        return value or 0

    def reading(self) -> Connection:
        """A connection for reads only: on SQLite its transactions are deferred, so a read
        takes no write lock (a writer's ``BEGIN IMMEDIATE`` would make every reader of the
        file wait for it, and it for them). Use it as a context manager; never write on it."""
        return self.engine.connect().execution_options(**{READ_ONLY: True})

    def apply(
        self, events: Sequence[tuple[int, DomainEventProtocol[Any]]], *, after: int, upto: int
    ) -> bool:
        with self._applying, self.engine.begin() as conn:
            if self._lock_position(conn) != after:
                return False  # another projector applied this page first, or reset meanwhile
            for position, event in events:
                self.handle(conn, position, event)
            self._set_position(conn, upto)
        return True

    def reset(self) -> None:
        with self._applying, self.engine.begin() as conn:
            self._lock_position(conn)
            self.clear(conn)
            self._set_position(conn, 0)

    def _lock_position(self, conn: Connection) -> int:
        query = _LOCK_POSITION if conn.dialect.name == "postgresql" else _SELECT_POSITION
        return int(conn.execute(query, {"b_projection": self.name}).scalar_one())

    def _set_position(self, conn: Connection, position: int) -> None:
        conn.execute(_UPDATE_POSITION, {"b_projection": self.name, "b_position": position})


PROJECTIONS: Final = "loom.projections"
"""The entry-point group through which packages above the runtime declare their read models."""

Unopened = Callable[[str, Exception], None]
"""Told the name of a read model that could not be opened, and why, so the rest go on."""


def registered_projections(
    log: EventLog, *, unopened: Unopened | None = None
) -> list[TrackedProjection]:
    """Every read model the installed packages keep in ``log``'s database.

    Packages above the runtime declare theirs through the ``loom.projections`` entry-point
    group: each entry point is a function ``(log, *, unopened) -> Sequence[TrackedProjection]``.
    This is what ``loom rebuild`` and ``loom doctor`` walk, without the runtime importing
    them. With ``unopened``, a read model that cannot be opened (a missing extra, a store built
    with a stemmer this environment lacks, a lock) is reported to it and skipped, instead of
    raising: by the projection's name where a package opens several (:func:`open_each`, so one
    memory store does not keep the others from an erasure's purge), else by the entry point's.
    """
    found: list[TrackedProjection] = []
    for entry_point in installed(PROJECTIONS):
        try:
            found.extend(entry_point.load()(log, unopened=unopened))
        except Exception as exc:
            if unopened is None:
                raise
            unopened(entry_point.name, exc)
    return found


def open_each(
    openers: Iterable[tuple[str, Callable[[], ProjectionT]]], unopened: Unopened | None
) -> list[ProjectionT]:
    """Each read model ``(name, open)`` names, opened; one whose ``open`` raises is reported to
    ``unopened`` and skipped, or raised when there is none to tell."""
    opened: list[ProjectionT] = []
    for name, open_one in openers:
        try:
            opened.append(open_one())
        except Exception as exc:
            if unopened is None:
                raise
            unopened(name, exc)
    return opened


_held_in_process: weakref.WeakKeyDictionary[Engine, weakref.WeakSet[Any]] = (
    weakref.WeakKeyDictionary()
)
_held_lock = threading.Lock()  # a memory made on one thread while another thread erases


def hold_in_process(log: EventLog, projection: TrackedProjection) -> None:
    """Note a read model this process keeps in memory over ``log`` (an in-process memory
    store), for as long as something else holds it.

    No catalog in the database lists it, so :func:`registered_projections` cannot find it;
    an erasure through ``log`` catches it up by this note (:func:`held_in_process`). Without
    it the erased subject's clear text stayed readable in this process until the store's
    next write, and a flow recalling it recorded it again, under a live key."""
    with _held_lock:
        _held_in_process.setdefault(log.engine, weakref.WeakSet()).add(projection)


def held_in_process(log: EventLog) -> list[TrackedProjection]:
    """The in-process read models :func:`hold_in_process` noted over ``log``, still alive."""
    with _held_lock:
        return list(_held_in_process.get(log.engine, ()))


def tracked_names(engine: Engine) -> list[str]:
    """Names of the projections that have a tracking row in this database."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(tracking_table.name):
            return []
        return [row[0] for row in conn.execute(select(tracking_table.c.projection))]


def catch_up(
    log: EventLog,
    projection: TrackedProjection,
    *,
    upto: int | None = None,
    page_size: int = PAGE_SIZE,
    progress: Progress | None = None,
) -> int:
    """Apply every event after the projection's position up to ``upto`` (default, and at most:
    the head; a :class:`PositionError` if it is not a position).

    Returns the position reached. Safe to call from many processes at once, and after a crash.
    """
    _check_upto(upto)
    # Never past the head: a position stored beyond it would skip the events appended up to
    # it later (read-your-writes lost), or be refused as past the head by the next catch-up.
    target = log.position if upto is None else min(upto, log.position)
    position = projection.position()
    if position > target and position > log.position:  # read again: another may have written
        raise LogCorruptError(
            f"projection {projection.name!r} is at log position {position}, past the log's head "
            f"({log.position}): its tracking row in {tracking_table.name} was altered, or the "
            "log was restored from an older backup than its read models; run `loom verify`, "
            "then `loom rebuild`"
        )
    while position < target:
        page = list(
            islice(
                log.notifications(
                    after=position, upto=target, topics=projection.topics, page_size=page_size
                ),
                page_size,
            )
        )
        reached = page[-1].position if len(page) == page_size else target
        events = [(record.position, log.decode(record)) for record in page]
        if not projection.apply(events, after=position, upto=reached):
            # lost a race (another projector applied the page, or reset the projection after
            # it was read): continue from where the projection is now
            position = projection.position()
            continue
        position = reached
        if progress is not None:
            progress(position, target)
    logger.debug("projection %r caught up to log position %d", projection.name, position)
    return position


def _check_upto(upto: object) -> None:
    """A :class:`PositionError` unless ``upto`` is None or a log position (an int from 0)."""
    if upto is not None and (isinstance(upto, bool) or not isinstance(upto, int) or upto < 0):
        raise PositionError(f"upto must be a log position (an int from 0), not {upto!r}")


def rebuild(
    log: EventLog,
    projection: TrackedProjection,
    *,
    upto: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Drop the projection's rows and build it again from position 0 (up to ``upto``).

    ``upto`` is checked first: refused after the drop, it left the read model empty."""
    _check_upto(upto)
    logger.info("rebuilding projection %r from the log", projection.name)
    projection.reset()
    return catch_up(log, projection, upto=upto, progress=progress)
