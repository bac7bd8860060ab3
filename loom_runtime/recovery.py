"""Recovery: live workers take over the unfinished executions of workers that are gone.

:meth:`Loom.recover <loom_runtime.loom.Loom.recover>` is one pass of :func:`recover`, and
:meth:`Loom.worker <loom_runtime.loom.Loom.worker>` runs passes in the background
(:func:`recovering`). Why a pass is safe to run anywhere, any number of times, at once
(ADR 0040):

* **Finding** is a read: one pass over the log's ownership events (who started, claimed,
  reopened, finished each execution) and one read of the worker registry. Two recoverers
  may find the same execution; nothing has happened yet.
* **Claiming** is an append, ``Resumed`` at the version the recoverer loaded the execution
  at. Of two recoverers that loaded the same version exactly one appends; the other's append
  is refused whole (a version conflict) and it moves on. A recoverer that loaded *after*
  another's claim sees a new owner, alive, and leaves it.
* **Resuming** answers every decision already in the log from the log, so work the dead
  worker finished is not done again; only decisions it never stored run live.

A worker wrongly taken for dead keeps running until its next append, which is refused
(the claim moved the stream past it): it stops, and the execution still completes once.

Liveness is only ever judged for owners that promised it by heart-beating. An execution whose
owner never registered (started outside a worker, or recorded before workers existed) may be
running right now in a process nobody can see, so it is taken only when asked
(``include_unowned``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING
from uuid import UUID

import msgspec

from loom_runtime.driver import loop_running
from loom_runtime.errors import (
    DatabaseUnavailableError,
    ErasedError,
    ExecutionConflictError,
    FlowInputError,
    LogCorruptError,
    LogWriteError,
)

if TYPE_CHECKING:
    from loom_runtime.execution import Execution
    from loom_runtime.log import EventLog
    from loom_runtime.loom import Loom, Run

logger = logging.getLogger("loom.runtime")
"""Each execution recovered at INFO; a recovered flow that failed again, at WARNING."""

HEARTBEAT_EVERY = 5.0
"""Seconds between a worker's beats."""
DEAD_AFTER = 30.0
"""Seconds without a beat after which a worker is taken for dead: six missed beats, so a
busy database or a long pause is not mistaken for a crash (a mistake costs a wasted run,
never a duplicate)."""
RECOVER_EVERY = 30.0
"""Seconds between a worker's recovery passes."""
MAX_CLAIMS = 5
"""Claims of one execution in a row, with no event of its own between them (nothing it ran
after a claim was stored), after which recovery sets it aside as failed
(:class:`RecoveryLimitError`) instead of running it again: a flow that kills whatever process
runs it (out of memory, a native crash) would otherwise be claimed for ever and, oldest first,
take down each recoverer before the executions behind it. DBOS's ``max_recovery_attempts`` is
the same guard. Claims between which the flow stored a decision are progress, not a loop: a
flow resumed by hand many times, each time going further, is never set aside."""


class Unfinished(msgspec.Struct, frozen=True, kw_only=True):
    """An execution neither completed nor failed, and its owner as the scan saw it."""

    execution_id: UUID
    flow: str
    owner: str | None
    """A recoverer that loads a different owner leaves the execution (claimed since the scan)."""
    claims: int = 0
    """How many times in a row it was claimed (``Resumed`` at consecutive versions)."""
    taken_from: tuple[str | None, ...] = ()
    """The owners those claims took it from, in order: workers alive again now were taken for
    dead while their heartbeats lagged (:func:`recover`)."""
    started_by: UUID | None = None
    """The execution whose decision started it, for a sub-agent: while that one is unfinished,
    its recovery finishes the sub-agent (:func:`recover`)."""


def unfinished(log: EventLog) -> list[Unfinished]:
    """Every execution of ``log`` that is neither completed nor failed nor erased, oldest
    first, with its owner: the worker that started it or last claimed or reopened it (one
    pass, no decisions).

    Erased ones (named by a forget event, ADR 0049; retention erases executions still
    running) have nothing left to finish them with: listed, every pass would load each again
    for good, and their dead owners' rows would be kept for them forever."""
    # here: the CLI imports this module's defaults
    from loom_runtime.execution import Execution, Forgotten
    from loom_runtime.sealing import subject_of

    ownership = (  # the events that start, move or end ownership; decisions do not
        Execution.Created.TOPIC,
        Execution.Resumed.TOPIC,
        Execution.Reopened.TOPIC,
        Execution.Completed.TOPIC,
        Execution.Failed.TOPIC,
        Forgotten.TOPIC,
    )
    flows: dict[UUID, str] = {}
    parents: dict[UUID, UUID] = {}
    owners: dict[UUID, str | None] = {}
    claims: dict[UUID, int] = {}
    claimed_at: dict[UUID, int] = {}  # the version of each one's last claim
    taken_from: dict[UUID, list[str | None]] = {}  # the owners of the claims in a row
    erased: set[str] = set()
    damaged: set[UUID] = set()
    for notification in log.notifications(topics=ownership):
        try:
            event = log.decode(notification)
        except LogCorruptError as exc:  # an altered row: that stream is left, not every pass
            damaged.add(notification.stream)
            logger.error("execution %s does not read, not recovered: %s", notification.stream, exc)
            continue
        stream = event.originator_id
        if isinstance(event, Forgotten):
            erased.update(event.subjects)
        elif isinstance(event, Execution.Created):
            flows[stream] = event.flow
            owners[stream] = event.worker
            if event.started_by is not None:
                parents[stream] = event.started_by
        elif isinstance(event, Execution.Completed | Execution.Failed):
            owners.pop(stream, None)
        elif isinstance(event, Execution.Reopened) or stream in owners:  # or Resumed
            previous = owners.get(stream)
            owners[stream] = event.worker
            if isinstance(event, Execution.Resumed):  # in a row: nothing stored since the last
                version = event.originator_version
                in_a_row = claimed_at.get(stream) == version - 1
                claims[stream] = claims.get(stream, 0) + 1 if in_a_row else 1
                claimed_at[stream] = version
                row = taken_from.setdefault(stream, []) if in_a_row else []
                taken_from[stream] = [*row, previous]
            else:  # reopened: a fresh start
                claims.pop(stream, None)
                claimed_at.pop(stream, None)
                taken_from.pop(stream, None)
    return [
        Unfinished(
            execution_id=stream,
            flow=flows[stream],
            owner=owner,
            claims=claims.get(stream, 0),
            taken_from=tuple(taken_from.get(stream, ())),
            started_by=parents.get(stream),
        )
        for stream, owner in owners.items()
        if subject_of(stream) not in erased and stream not in damaged
    ]


def is_abandoned(owner: str | None, liveness: Mapping[str, bool], *, include_unowned: bool) -> bool:
    """Whether an execution owned by ``owner`` may be taken over: its owner registered and is
    no longer alive; an owner that is None or never registered only with ``include_unowned``.
    ``liveness`` maps each registered worker to whether it is alive."""
    if owner is None or owner not in liveness:
        return include_unowned
    return not liveness[owner]


def recover(
    loom: Loom,
    *,
    dead_after: float,
    include_unowned: bool,
    stopping: threading.Event | None = None,
) -> list[Run]:
    """One pass of :meth:`Loom.recover <loom_runtime.loom.Loom.recover>`; stops between
    executions once ``stopping`` is set (what is left is left for the others).

    A Loom never takes over an execution it is running, whoever owns it (a worker's
    heartbeat may lag behind a long computation, but it is not dead; a run started outside a
    worker is unowned, but not abandoned); one it owns and no longer runs (a run cancelled,
    or a recovered flow stopped by a ``BaseException``) is stranded, and it finishes it.
    Executions claimed fewer times in a row go first, and one claimed :data:`MAX_CLAIMS`
    times in a row is set aside as failed (by a recoverer that has its flow)."""
    runs = []
    every = min(HEARTBEAT_EVERY, dead_after / 3)
    with registered_worker(loom, every=every, dead_after=dead_after) as worker:
        # The log before the registry: a worker that registers in between and starts an
        # execution is then either unseen by the scan or seen alive, never taken for unowned.
        # Only a worker already dead before the scan is forgotten: one that started something
        # after the scan and died before the registry was read owns work the scan did not see.
        dead_before = {w.worker for w in loom.workers.workers(dead_after=dead_after) if not w.alive}
        pending = unfinished(loom.log)
        workers = loom.workers.workers(dead_after=dead_after)
        owners = {execution.owner for execution in pending}
        loom.workers.forget(
            [
                w.worker
                for w in workers
                if not w.alive and w.worker in dead_before and w.worker not in owners
            ],
            dead_after=dead_after,
        )
        liveness = {w.worker: w.alive for w in workers}
        unfinished_ids = {execution.execution_id for execution in pending}
        for execution in sorted(pending, key=lambda e: e.claims):  # stable: oldest first
            if stopping is not None and stopping.is_set():
                break
            if loom.runs_now(execution.execution_id):
                continue
            if execution.started_by in unfinished_ids:
                # A sub-agent is its parent's to finish: the parent's decision, computed
                # again, takes it up (Loom._rejoin). Taken here as well, it would run beside
                # that, which finds it running and fails (ADR 0040, amended "sub-agents").
                logger.debug(
                    "execution %s: left to its unfinished parent %s",
                    execution.execution_id,
                    execution.started_by,
                )
                continue
            if execution.owner == worker:
                abandoned = True  # stranded: owned here, run here no more
            else:
                abandoned = is_abandoned(execution.owner, liveness, include_unowned=include_unowned)
            if not abandoned:
                continue
            if loom.flows.find(execution.flow) is None:  # left for a worker that has it
                logger.debug(
                    "execution %s: flow %r not registered here",
                    execution.execution_id,
                    execution.flow,
                )
                continue
            if execution.claims >= MAX_CLAIMS:
                # Not this recoverer: taking back its own stranded run (a flow that stops
                # whatever runs it) is no lagging heartbeat.
                lagging = sorted(
                    {w for w in execution.taken_from if w and w != worker and liveness.get(w)}
                )
                if not lagging:
                    _set_aside(loom, execution, worker=worker)
                    continue
                # Taken from workers alive again since: their beats lagged (a compute holding
                # the GIL, a paused process), not a flow that stops what runs it.
                logger.warning(
                    "execution %s of flow %r was claimed %d times in a row, from workers alive "
                    "again since (%s): their heartbeats lag behind dead_after (a compute that "
                    "holds the GIL, a paused process); it is recovered, not set aside. Raise "
                    "dead_after above the longest such pause",
                    execution.execution_id,
                    execution.flow,
                    execution.claims,
                    ", ".join(lagging),
                )
            run = _adopt(loom, execution, worker=worker)
            if run is not None:
                runs.append(run)
    return runs


def _failed_again(loom: Loom, orphan: Unfinished, execution: Execution, exc: Exception) -> None:
    """Log a recovered flow that failed again (its failure is recorded, as by any resume)."""
    # A sealed execution's failure message is sealed so that an erasure destroys it; a log
    # handler is out of its reach, so only the error's type is logged (the message and
    # traceback are in the log for the key holder: `loom executions show ID`).
    logger.warning(
        "execution %s of flow %r, recovered from %s, failed: %s",
        orphan.execution_id,
        orphan.flow,
        _left_by(orphan.owner),
        type(exc).__name__,
        exc_info=None if loom._sealed(execution) else exc,
    )


def _not_resumable(
    loom: Loom, orphan: Unfinished, execution: Execution, exc: FlowInputError
) -> None:
    """Log an execution whose stored input the flow registered here no longer takes: left
    unfinished and unclaimed, every pass, for a worker still on code that takes it or for a
    resume once the code does (a claim each pass would only set it aside, never run)."""
    # A sealed execution's refusal may quote its input (an enum value): it is not logged.
    reason = (
        "its stored input does not fit the flow registered here (FlowInputError, not quoted "
        "for a sealed execution: `loom resume ID` shows it); nothing was written"
        if loom._sealed(execution)
        else str(exc)
    )
    logger.warning(
        "execution %s of flow %r, left by %s, is left unfinished: %s",
        orphan.execution_id,
        orphan.flow,
        _left_by(orphan.owner),
        reason,
    )


def _set_aside(loom: Loom, orphan: Unfinished, *, worker: str) -> None:
    """Claim an execution claimed :data:`MAX_CLAIMS` times in a row with nothing stored, and
    record :class:`RecoveryLimitError` as its failure, without running its flow again."""
    try:
        execution = loom.execution(orphan.execution_id)
        if execution.finished or execution.owner != orphan.owner:
            return  # finished or claimed since the scan
        loom._set_aside(execution, worker=worker, claims=orphan.claims)
    except (ErasedError, LogCorruptError, ExecutionConflictError):
        return  # erased, unreadable, or another recoverer got there first
    logger.error(
        "execution %s of flow %r was claimed %d times in a row with nothing stored: set aside "
        "as failed (RecoveryLimitError); reopen it once the cause is fixed: loom resume %s "
        "--retry-failed",
        orphan.execution_id,
        orphan.flow,
        orphan.claims,
        orphan.execution_id,
    )


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _left_by(owner: str | None) -> str:
    """Who left an execution, for the log: ``worker ID``, or a process that was none."""
    return f"worker {owner}" if owner is not None else "a process outside any worker"


@contextmanager
def recovering(
    loom: Loom, *, every: float | None, dead_after: float, include_unowned: bool
) -> Iterator[None]:
    """Recover in a daemon thread at once and then every ``every`` seconds (never if None),
    until the block ends; the end waits for the execution being recovered."""
    if every is None:
        yield
        return
    stopping = threading.Event()

    def keep_recovering() -> None:
        while True:
            try:
                recover(
                    loom,
                    dead_after=dead_after,
                    include_unowned=include_unowned,
                    stopping=stopping,
                )
            except Exception:  # the database is away: try again next pass
                logger.warning("recovery pass failed", exc_info=True)
            if stopping.wait(every):
                return

    thread = threading.Thread(target=keep_recovering, name="loom-recovery", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopping.set()
        thread.join()


@contextmanager
def registered_worker(
    loom: Loom,
    *,
    every: float = HEARTBEAT_EVERY,
    dead_after: float = DEAD_AFTER,
    forget_when_done: bool = False,
) -> Iterator[str]:
    """``loom``'s worker id if it is a worker; else a worker for the block, so that what a
    one-off recovery or a resume (``Loom.resume``) claims is owned by a worker others see
    alive, stopped afterwards: a second resume is refused while it runs, and recovery takes
    what it leaves unfinished once it stops beating. It owns what the block starts too
    (:data:`~loom_runtime.workers.RECOVERING_AS`, in this thread): a sub-agent a recovered
    flow starts (``loom.run`` inside a decision) was stored unowned, and left by every later
    pass had this one died mid-child. Not the Loom's worker
    (``loom.worker()``): another thread's run meanwhile would be owned by a worker that stops
    beating when the pass ends, and taken over while it still runs.

    ``forget_when_done``: the worker's row is deleted when the block ends without an error, or
    with the flow's own error (a resume that completed or failed its execution owns nothing
    recovery would take), where it was left stopped for a later recovery pass to delete: an
    application resuming by hand, with no pass running, piled up one row per resume, and each
    resume's liveness check read them all. A block stopped by an interrupt (a cancellation, a
    SIGTERM's exit, a crash standing in for one), or by the log failing (the execution may be
    unfinished), keeps the row, stopped, so its execution is recovered."""
    from loom_runtime.workers import RECOVERING_AS, Heartbeat, new_worker_id

    if loom.worker_id is not None:
        yield loom.worker_id
        return
    heartbeat = Heartbeat(loom.workers, worker=new_worker_id(), every=every, dead_after=dead_after)
    heartbeat.start()
    token = RECOVERING_AS.set(heartbeat.worker)
    done = False
    try:
        yield heartbeat.worker
        done = True
    except Exception as exc:
        done = not isinstance(exc, LogWriteError | DatabaseUnavailableError)
        raise
    finally:
        RECOVERING_AS.reset(token)
        heartbeat.stop()
        if done and forget_when_done:
            loom.workers.forget([heartbeat.worker], dead_after=dead_after)


def _adopt(loom: Loom, orphan: Unfinished, *, worker: str) -> Run | None:
    """Claim and finish an abandoned execution of a flow registered here; None when another
    worker has it, or its flow failed again (recorded as failed, logged), or stopped
    with a ``BaseException`` that is no interrupt (this worker owns it and no longer runs
    it, so it takes it again next pass; :data:`MAX_CLAIMS` ends that)."""
    try:
        execution = loom.execution(orphan.execution_id)
    except ErasedError:  # erased while unfinished (ADR 0049): nothing left to finish it with
        logger.info("execution %s was erased: not recovered", orphan.execution_id)
        return None
    except LogCorruptError as exc:  # altered rows: nobody can finish it, the rest of the pass can
        logger.error("execution %s does not read, not recovered: %s", orphan.execution_id, exc)
        return None
    if execution.finished or execution.owner != orphan.owner or loom.runs_now(execution.id):
        return None  # finished or claimed since the scan, or being resumed in another thread
    try:
        call = loom._resumable(execution)
    except FlowInputError as exc:  # nothing claimed: a worker whose flow takes it can finish it
        _not_resumable(loom, orphan, execution, exc)
        return None
    except LogCorruptError as exc:  # its stored overrides do not read
        logger.error("execution %s does not read, not recovered: %s", orphan.execution_id, exc)
        return None
    if call is not None and call.definition.is_async and loop_running():
        # A sync pass in a thread running an event loop (Jupyter, an application's start-up)
        # cannot run an async flow: left for a pass that can, nothing claimed.
        logger.warning(
            "execution %s of flow %r is left unfinished: the flow is async and this pass runs "
            "in a thread with a running event loop; recover from another thread "
            "(`await asyncio.to_thread(loom.recover)`) or a `loom worker`",
            orphan.execution_id,
            orphan.flow,
        )
        return None
    try:
        run = loom._take_over(execution, call, worker=worker)
    except ExecutionConflictError:
        return None  # another worker claimed it first, or took it over from this one since
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit) and _main_thread():
            raise  # the process is asked to stop: a one-off `loom recover` stops with it
        # (outside the main thread no signal arrives: the flow's code raised it)
        if isinstance(exc, Exception):
            _failed_again(loom, orphan, execution, exc)
            return None
        logger.error(
            "execution %s of flow %r, recovered from %s, stopped with %s, not an Exception: "
            "left unfinished, taken again at the next pass (set aside after %d claims)",
            orphan.execution_id,
            orphan.flow,
            _left_by(orphan.owner),
            type(exc).__name__,
            MAX_CLAIMS,
        )
        return None
    logger.info(
        "execution %s of flow %r recovered from %s by %s",
        orphan.execution_id,
        orphan.flow,
        _left_by(orphan.owner),
        worker,
    )
    return run
