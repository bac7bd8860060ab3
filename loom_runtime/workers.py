"""Which workers are alive: a registry of heartbeats in the log's own database.

Recovery (:meth:`~loom_runtime.loom.Loom.recover`) must tell a worker that is slow from one
that is gone. A worker that runs :class:`Heartbeat` writes its row of ``loom_workers`` every
few seconds; one whose last beat is older than ``dead_after`` is taken for dead, and the
executions it owns are claimed by a live worker.

Why a table and not events (ADR 0040): a heartbeat is operational state, not history. As
events, an idle fleet would grow the log with time instead of with work, every projection
would page past them, and an audit would wade through them. Nothing about correctness rests
on this table either: it only says *whom to suspect*. That a suspected execution is resumed
by exactly one worker comes from the log, where a claim is an event appended at the next
version of the execution's stream, and two claimants of one version cannot both succeed. So a
worker wrongly taken for dead (a long GC pause, a clock jump) loses its next append and stops;
nothing is duplicated.

Times are the database's clock, never a worker's: workers on hosts whose clocks disagree
still compare beats on one clock.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Collection
from contextvars import ContextVar
from uuid import uuid4

import msgspec
from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Float,
    MetaData,
    String,
    Table,
    inspect,
    literal_column,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from loom_runtime.log import READ_ONLY
from loom_runtime.recovery import DEAD_AFTER
from loom_runtime.schema import create_missing, serialise_ddl

RECOVERING_AS: ContextVar[str | None] = ContextVar("loom_recovering_as", default=None)
"""The worker a one-off recovery pass (``loom.recover()`` outside :meth:`Loom.worker`)
registered, in the thread (and the tasks and threads copying its context) running that pass:
a sub-agent a recovered flow starts (``loom.run`` inside a decision) is owned by it, as the
claim is. Scoped to the pass, not set on the Loom: another thread's run meanwhile stays
unowned, and its worker() block is not refused."""

logger = logging.getLogger("loom.runtime")
"""A heartbeat the database refused, at WARNING (the worker keeps trying)."""

_metadata = MetaData()
workers_table = Table(
    "loom_workers",
    _metadata,
    Column("worker", String(300), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", BigInteger, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("beat_at", Float, nullable=False),
    Column("dead_after", Float, nullable=True),
)
"""One row per worker that ever beat; times are seconds since the epoch, database clock.
``dead_after`` is how long the worker itself asks to be given without a beat (its own
setting): a recoverer judging by a shorter one would take a live worker's executions."""

_STOPPED = 0.0
"""``beat_at`` of a worker that stopped on purpose: dead at once, whatever ``dead_after``."""


class WorkerRow(msgspec.Struct, frozen=True, kw_only=True):
    """A registered worker as its row says, with its liveness at the time it was read."""

    worker: str
    host: str
    pid: int
    started_at: float
    beat_at: float
    alive: bool
    dead_after: float | None = None
    """What the worker asked to be judged by (None: a row written before it could say)."""


def new_worker_id() -> str:
    """``host:pid:nonce``: unique even when a pid is reused after a crash, so a new process
    never inherits (and keeps alive) the executions of a dead one that had its pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"


class WorkerRegistry:
    """The ``loom_workers`` table of one database: beat, read who is alive, stop."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Read first, without the write lock: a table already in place (every open but the
        # first) needs no write transaction, which would wait for (and fail on) any other
        # writer holding the SQLite log's lock.
        with engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            if inspect(conn).has_table(workers_table.name) and _has_dead_after(conn):
                return
        with engine.begin() as conn:
            created = create_missing(conn, _metadata.sorted_tables)
            if workers_table.name not in created and not _has_dead_after(conn):
                serialise_ddl(conn)  # a table of an earlier release: add the column, once
                if not _has_dead_after(conn):
                    conn.exec_driver_sql(
                        f"ALTER TABLE {workers_table.name} ADD COLUMN dead_after DOUBLE PRECISION"
                    )

    def beat(self, worker: str, *, dead_after: float | None = None) -> None:
        """Register ``worker`` (this process) if new, and stamp it alive now; ``dead_after``:
        how long it asks others to wait for its next beat before they take it for dead."""
        host, pid = socket.gethostname(), os.getpid()
        with self.engine.begin() as conn:
            now = _now(conn)
            insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            statement = insert(workers_table).values(
                worker=worker,
                host=host,
                pid=pid,
                started_at=now,
                beat_at=now,
                dead_after=dead_after,
            )
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["worker"],
                    set_={
                        "beat_at": statement.excluded.beat_at,
                        "dead_after": statement.excluded.dead_after,
                    },
                )
            )

    def stop(self, worker: str) -> None:
        """Declare ``worker`` gone: what it still owns may be recovered at once."""
        with self.engine.begin() as conn:
            conn.execute(
                workers_table.update()
                .where(workers_table.c.worker == worker)
                .values(beat_at=_STOPPED)
            )

    def forget(self, workers: Collection[str], *, dead_after: float) -> None:
        """Delete the rows of ``workers``, dead ones that own nothing unfinished, so the table
        does not grow with every worker that ever ran; a row that beat within ``dead_after``
        since they were read is kept. Without that condition a worker that woke from a pause
        between the read and the delete lost its fresh row, and what it started next had an
        owner nobody registered: unowned, taken by ``include_unowned`` while it ran."""
        if workers:
            with self.engine.begin() as conn:
                now = _now(conn)
                row = workers_table.c
                asked = (row.dead_after.is_(None)) | (row.beat_at < now - row.dead_after)
                conn.execute(
                    workers_table.delete().where(
                        row.worker.in_(workers),
                        (row.beat_at <= _STOPPED) | ((row.beat_at < now - dead_after) & asked),
                    )
                )

    def workers(self, *, dead_after: float | None) -> list[WorkerRow]:
        """Every registered worker, alive when it beat within the last ``dead_after`` seconds,
        or within its own ``dead_after`` if it asked for longer (a worker that beats every 45
        seconds is not dead to a recoverer that waits 30). ``None``: each by its own alone
        (:data:`~loom_runtime.recovery.DEAD_AFTER` for a row that asked for nothing), as a
        caller that is no recoverer asks whether a worker is alive."""
        # Read-only: on SQLite a deferred transaction, so every recovery pass's read neither
        # queues behind an append nor holds one up (a snapshot is all it needs).
        with self.engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            now = _now(conn)
            rows = conn.execute(select(workers_table).order_by(workers_table.c.started_at))
            return [
                WorkerRow(
                    worker=row.worker,
                    host=row.host,
                    pid=row.pid,
                    started_at=row.started_at,
                    beat_at=row.beat_at,
                    alive=row.beat_at > _STOPPED
                    and row.beat_at >= now - _horizon(dead_after, row.dead_after),
                    dead_after=row.dead_after,
                )
                for row in rows
            ]


def _horizon(asked: float | None, own: float | None) -> float:
    """How long a worker is given since its last beat (see :meth:`WorkerRegistry.workers`)."""
    if asked is None:
        return own if own is not None else DEAD_AFTER
    return max(asked, own or 0.0)


def _has_dead_after(conn: Connection) -> bool:
    """Whether the workers table has its ``dead_after`` column (added after its first release)."""
    columns = inspect(conn).get_columns(workers_table.name)
    return any(column["name"] == "dead_after" for column in columns)


def _now(conn: Connection) -> float:
    """The database's clock, in seconds since the epoch."""
    return float(conn.execute(select(_clock(conn.dialect.name))).scalar_one())


def _clock(dialect: str) -> ColumnElement[float]:
    if dialect == "postgresql":
        return literal_column("extract(epoch from clock_timestamp())", Float)
    return literal_column("(julianday('now') - 2440587.5) * 86400.0", Float)


class Heartbeat:
    """A daemon thread that keeps one worker's row alive, every ``every`` seconds.

    The first beat is written before :meth:`start` returns, so a worker is registered before
    it owns anything. A beat the database refuses is logged and tried again next time: if the
    database stays away longer than ``dead_after``, others take this worker's executions over,
    and its own next append to them is refused (it never duplicates anything).
    """

    def __init__(
        self,
        registry: WorkerRegistry,
        *,
        worker: str,
        every: float,
        dead_after: float | None = None,
    ) -> None:
        if every <= 0:
            raise ValueError(f"a heartbeat interval must be positive, not {every!r}")
        self.registry = registry
        self.worker = worker
        self.every = every
        self.dead_after = dead_after
        """Written with every beat: how long others should wait before taking it for dead."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"loom-heartbeat {worker}")
        self._thread.daemon = True
        self._pid = os.getpid()
        """The process that beats: a forked child's copy is not its heartbeat to stop."""

    def start(self) -> None:
        self.registry.beat(self.worker, dead_after=self.dead_after)
        self._thread.start()

    def stop(self, *, gone: bool = True) -> None:
        """Stop beating and, if ``gone``, mark this worker stopped (its unfinished work
        recoverable now); else its row keeps its last beat and expires after ``dead_after``,
        as a crashed worker's does (runs it owns are still going on). In a process forked
        after :meth:`start` nothing is done: the beating thread and the worker are the
        parent's, alive."""
        if os.getpid() != self._pid:
            return
        self._stopping.set()
        self._thread.join()
        if gone:
            self.registry.stop(self.worker)

    def _beat(self) -> None:
        while not self._stopping.wait(self.every):
            try:
                self.registry.beat(self.worker, dead_after=self.dead_after)
            except Exception as exc:  # the database is away: beat again next time
                logger.warning("heartbeat of worker %s failed: %s", self.worker, exc)
