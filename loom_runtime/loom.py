"""``Loom``: the public entry point that registers flows, runs, resumes and replays them.

It is deliberately a thin facade: the log is :class:`~loom_runtime.log.EventLog`, an execution
is the :class:`~loom_runtime.execution.Execution` aggregate, decisions are answered by the
sources in :mod:`loom_runtime.context` and :mod:`loom_runtime.replay`. Sync flows are called
directly; ``async def`` flows run on ``asyncio.run`` from the sync methods, or are awaited from
``arun``/``aresume``/``areplay`` inside a running loop. Each pair is one body
(:mod:`loom_runtime.driver`), driven now or awaited.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import math
import os
import socket
import threading
from collections import Counter
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, cast
from uuid import UUID, uuid4

import msgspec

from loom_runtime import codec
from loom_runtime.bundle import (
    Bundle,
    BundleEvent,
    read_bundle,
    read_importable,
    seal,
    write_bundle,
)
from loom_runtime.context import (
    NAMED_IN_A_WARNING,
    REFUSALS,
    AsyncFlowContext,
    DecisionSource,
    FlowContext,
    Recorder,
    SubAgentNaming,
    SubAgents,
    cancelling,
    current_context,
    rebuild_error,
    running,
    save,
    sub_agent,
)
from loom_runtime.driver import Pending, Steps, adrive, drive, loop_running
from loom_runtime.errors import (
    BundleConflictError,
    CancellationNotRepeatedError,
    ConfigurationError,
    DecisionKeyError,
    EncryptionOffError,
    ErasedError,
    ExecutionConflictError,
    ExecutionFinishedError,
    ExecutionNotFoundError,
    ExecutionOwnedError,
    FlowInputError,
    ForkPointError,
    LabelError,
    LogCorruptError,
    RecoveryLimitError,
    SubflowOutsideDecisionError,
    UnattributedCallError,
)
from loom_runtime.execution import (
    EXECUTION_TOPICS,
    Decision,
    Execution,
    Imported,
    imported_stream,
    project_rows,
    stored_labels,
)
from loom_runtime.flow import F, Flow, FlowRegistry
from loom_runtime.labels import NO_LABELS, Labels, checked_tags
from loom_runtime.log import (
    Closed,
    EventLog,
    LogSettings,
    Persistence,
    Precondition,
    Record,
    Row,
    Synchronous,
    open_log,
)
from loom_runtime.recorded_order import (
    AnswerSpacing,
    RecordedOrder,
    answer_spacing,
    completion_order,
)
from loom_runtime.recovery import DEAD_AFTER, HEARTBEAT_EVERY, RECOVER_EVERY, registered_worker
from loom_runtime.redaction import RedactorOption
from loom_runtime.replay import Replayer, ReplayResult, compare_outcome
from loom_runtime.retry import DEFAULT_RETRY, RetryPolicy
from loom_runtime.sealing import ExecutionSealer, input_flags, sealed_input
from loom_runtime.services import Services
from loom_runtime.storage.forks import renewed_in_child, reset_in_child
from loom_runtime.storage.mapper import MsgspecMapper, redacted_rows
from loom_runtime.timestamps import UtcTimestamp, as_utc

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from loom_runtime.erasure import ErasureReport
    from loom_runtime.read_model_check import Bars, ReadModelReport
    from loom_runtime.sealing import Keyring, KeyWrapper, Opener
    from loom_runtime.telemetry import Operation, Telemetry
    from loom_runtime.workers import Heartbeat, WorkerRegistry

logger = logging.getLogger("loom.runtime")
"""Executions started, finished and replayed, at INFO (nothing per decision: that path stays
free of logging calls; spans per decision are what ``tracer_provider`` is for)."""


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """A finished execution: its id (for replay and audit) and its output."""

    execution_id: UUID
    flow: str
    output: Any
    log_position: int


class ExecutionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One line of `loom executions list`."""

    execution_id: UUID
    flow: str
    code_version: str
    started_at: UtcTimestamp
    log_position: int
    status: Literal["running", "completed", "failed"]
    parent_id: UUID | None = None
    """The execution this one was forked from, if it is a fork."""
    tenant: str | None = None
    """Who and what it ran for, as given at start (ADR 0034)."""
    user: str | None = None
    session: str | None = None
    tags: tuple[str, ...] = ()

    @property
    def labels(self) -> Labels:
        """The labels as one value (they were checked when the execution was listed)."""
        return Labels(tenant=self.tenant, user=self.user, session=self.session, tags=self.tags)


_SUMMARY_TOPICS = (
    Execution.Created.TOPIC,
    Execution.Completed.TOPIC,
    Execution.Failed.TOPIC,
    Execution.Reopened.TOPIC,
)
_STATUS_AFTER: dict[type[Any], Literal["running", "completed", "failed"]] = {
    Execution.Completed: "completed",
    Execution.Failed: "failed",
    Execution.Reopened: "running",
}


class Loom:
    """One log (a SQLite file by default) and the flows that record into it."""

    def __init__(
        self,
        url: str | None = None,
        *,
        persistence: Persistence = "builtin",
        sqlite_synchronous: Synchronous = "NORMAL",
        lock_timeout: float = 5.0,
        pool_size: int = 5,
        flows: FlowRegistry | None = None,
        redactor: RedactorOption = "builtin",
        write_retry: RetryPolicy = DEFAULT_RETRY,
        tracer_provider: TracerProvider | None = None,
        encryption: KeyWrapper | None = None,
    ) -> None:
        """A log at ``url``, else ``LOOM_DB_URL``, else ./loom.db, and a flow registry.

        The settings are checked here; the database is opened (and created) on first use, so
        a process that only registers flows and replays bundles never touches one.
        ``redactor`` replaces secrets in every value and payload before it is stored (the
        built-in patterns by default; ``None`` to store values as given; ADR 0012).
        ``write_retry`` bounds how long a corpus or memory write waits and re-plans while
        other writers append to the same stream (ADR 0019).
        ``tracer_provider`` (an OpenTelemetry ``TracerProvider``, e.g.
        ``opentelemetry.trace.get_tracer_provider()``) turns on a span per execution and per
        decision (ADR 0030); without one nothing is traced and nothing of OpenTelemetry loaded.
        ``encryption`` (a :class:`~loom_runtime.sealing.KeyWrapper`, e.g.
        ``MasterKey.from_env("LOOM_MASTER_KEY")``) seals every new execution's input,
        decisions, output and error messages under a key of its own, so :meth:`erase` can
        destroy them (ADR 0049); off by default. A wrong master key is refused when the log is
        opened (:class:`~loom_runtime.errors.WrongMasterKeyError`).
        """
        self.settings = LogSettings(
            url,
            persistence=persistence,
            sqlite_synchronous=sqlite_synchronous,
            lock_timeout=lock_timeout,
            pool_size=pool_size,
            redactor=redactor,
            write_retry=write_retry,
        )
        self.flows = flows if flows is not None else FlowRegistry()
        self.services = Services()
        """Objects that live as long as this Loom (a corpus's read models, open corpora),
        created on first use and closed with it: see :class:`~loom_runtime.services.Services`."""
        self._telemetry: Telemetry | None = None
        if tracer_provider is not None:  # telemetry hook (ADR 0030): imported only when asked
            from loom_runtime.telemetry import Telemetry

            self._telemetry = Telemetry(tracer_provider)
        self._heartbeat: Heartbeat | None = None  # set while this Loom is a worker (ADR 0040)
        self._becoming_worker = threading.Lock()
        """Held from :meth:`worker`'s check that this Loom is no worker to its first beat: two
        threads entering at once were both accepted, the first beat's write between them."""
        self._running: Counter[UUID] = Counter()
        """The executions this Loom is running now, in any thread (a count: two runs of one
        execution race until one's append is refused). Its own recovery and ``resume`` leave
        them alone; an execution it owns and no longer runs (cancelled, interrupted) is
        stranded, and theirs to finish (ADR 0040, amended "review, second")."""
        self._running_lock = threading.Lock()
        # A child forked inside `worker()` (a `fork` pool) is no worker: its parent's heartbeat
        # and count are not its own (ADR 0040, amended "attack").
        renewed_in_child(self, "_running_lock")
        reset_in_child(self, "_forget_parents_runs")
        if encryption is not None:
            from loom_runtime.sealing import require_cryptography, require_key_wrapper

            require_key_wrapper(encryption)
            require_cryptography()
        self._encryption = encryption
        self._keyring: Keyring | None = None  # opened with the log when encryption is on

    def __repr__(self) -> str:
        """The log it is on, password hidden (SQLAlchemy's rendering): what a traceback or a
        failing test shows of it."""
        return f"{type(self).__name__}({self.settings.url!r})"

    @cached_property
    def log(self) -> EventLog:
        """The event log, opened on first use.

        A SQLite file the driver will not open fails here, with the error for its cause: one
        that is not a database (truncated, overwritten) is :class:`LogCorruptError`, one
        another connection keeps locked :class:`DatabaseBusyError`, a path in no folder
        :class:`ConfigurationError` (``loom_runtime.storage.application``).
        """
        log = open_log(self.settings)
        if self._encryption is not None:
            from loom_runtime.sealing import Keyring

            try:
                self._keyring = Keyring(log.engine, self._encryption)
            except BaseException:
                log.close()
                raise
        return log

    @property
    def encrypted(self) -> bool:
        """Whether this Loom seals what it records (it was given ``encryption``)."""
        return self._encryption is not None

    @property
    def encryption(self) -> KeyWrapper | None:
        """The key wrapper this Loom was given (None: it seals nothing): what another Loom
        on the same log needs to open it (the command line's, given this one by
        ``--flows``)."""
        return self._encryption

    @property
    def _opener(self) -> Opener:
        from loom_runtime.sealing import Opener

        _ = self.log  # opens the keyring with the log
        if self._keyring is not None:
            return Opener(self._keyring)
        return Opener(None, erased_at=self._erased_at)

    def _erased_at(self, subject: str) -> int | None:
        """The position of the forget event that erased ``subject``, or None: read only when a
        Loom without the master key meets a sealed field (the forget log is in clear)."""
        from loom_runtime.erasure import forget_events

        for position, event in forget_events(self):
            if subject in event.subjects:
                return position
        return None

    def _seal_new(self, execution: Execution) -> Precondition | None:
        """Give a new execution its own data key, so its events are sealed (ADR 0049); without
        encryption, the precondition its first append is given (refused if the log is
        encrypted by then: it would be stored in clear)."""
        guard = self._keyless_guard(f"execution {execution.id} of flow {execution.flow!r}")
        if self._keyring is not None:
            from loom_runtime.sealing import subject_of

            self._keyring.create(subject_of(execution.id), position=self.log.position)
            execution.sealer = ExecutionSealer(
                self._keyring, execution.id, self.settings.redactor, names=True, nulls=True
            )
        return guard

    def _parent_live(self, parent: Execution) -> Precondition | None:
        """What a fork's first append must find: its sealed parent's key still live, read in
        the append's own transaction (None for a clear parent, or a log that cannot read a
        precondition). A fork holds its parent's input and early decisions under its own key,
        so one started from a parent read just before another process erased it would keep
        what the erasure destroyed; refused instead (``SubjectErasedError``), and a fork that
        commits before the key is destroyed is found by the erasure (ADR 0049, amended
        "erasurerev"). The fork's own key needs no check there: no erasure can name an
        execution before its first append.

        Whether the parent is sealed is what it was read as (:meth:`execution` gave it a
        sealer), never whether its key is live now: a key destroyed since the parent was read
        would make a sealed parent look clear, and the fork would keep what was erased (ADR
        0049, amended "fork read"). A log that cannot read a precondition reads the key here,
        just before the append."""
        from loom_runtime.sealing import subject_of

        keyring = self._keyring
        if keyring is None or parent.sealer is None:
            return None
        subject = subject_of(parent.id)
        if not self.log.checks_preconditions:
            keyring.live_key(subject)  # SubjectErasedError once destroyed
            return None
        return keyring.live_precondition(subject)

    def _keyless_guard(self, what: str) -> Precondition | None:
        """What the append of ``what`` must find when this Loom has no master key: no key
        table, else :class:`~loom_runtime.errors.EncryptionOffError` and nothing written
        (``what`` would be in clear, beyond erasure's reach: ADR 0049, "Writes").
        None for a Loom with a key, or where the log was read for it here instead."""
        if self._keyring is not None:
            return None
        from loom_runtime.sealing import write_keyring

        return write_keyring(self.log, what)[1]

    # -- flows -------------------------------------------------------------------------------

    def flow(self, name: str | None = None, *, version: str | None = None) -> Callable[[F], F]:
        """Register a flow on this Loom's registry (see :meth:`FlowRegistry.flow`)."""
        return self.flows.flow(name, version=version)

    def get_flow(self, name: str, *, recorded_by: UUID | None = None) -> Flow:
        """The flow registered as ``name`` (:class:`FlowNotFoundError` otherwise; see
        :meth:`FlowRegistry.get_flow` for ``recorded_by``)."""
        return self.flows.get_flow(name, recorded_by=recorded_by)

    # -- running -----------------------------------------------------------------------------

    def run(self, flow: str, /, *, labels: Labels = NO_LABELS, **arguments: Any) -> Run:
        """Run ``flow`` durably: every decision is in the log before the flow sees it.

        ``labels`` (:class:`~loom_runtime.labels.Labels`: tenant, user, session, tags) say
        who and what the execution runs for; they are stored with it, kept by resume and fork,
        and select it in :meth:`executions` (ADR 0034). They are one argument, not four,
        because ``user`` or ``session`` is as likely a flow parameter as a label.
        """
        # Refused here, not in ``_run``: a subclass (the pytest plugin's) answers ``_run``.
        _refuse_in_a_running_loop(self.get_flow(flow), "arun")
        return drive(self._run(flow, labels, arguments), _run_now)

    async def arun(self, flow: str, /, *, labels: Labels = NO_LABELS, **arguments: Any) -> Run:
        """As :meth:`run`, from inside a running event loop."""
        return await adrive(self._run(flow, labels, arguments))

    def resume(
        self, execution_id: UUID | str, *, retry_failed: bool = False, force: bool = False
    ) -> Run:
        """Finish an interrupted execution: recorded decisions from the log, the rest live.

        A completed execution is returned as recorded (it completes exactly once). Two workers
        resuming the same execution race on the stream version: the loser gets
        :class:`ExecutionConflictError` and appends nothing. One that a live worker owns (it
        beats: it is running it) is :class:`ExecutionOwnedError` with nothing appended,
        unless ``force``: taking it over would compute its open decision again and stop that
        worker at its next append.

        A failed execution raises :class:`ExecutionFinishedError`, unless ``retry_failed``:
        then, once the cause is fixed, it is reopened (ADR 0026): its failure, its failed
        decisions and every decision recorded after the first of them are dropped and
        computed again, every decision recorded before it is kept (not computed again), and
        the flow runs to its end. Reopening is appending at the next
        version, so of two workers reopening the same failure exactly one does.
        """
        return drive(self._resume(execution_id, retry_failed, force, sync=True), _run_now)

    async def aresume(
        self, execution_id: UUID | str, *, retry_failed: bool = False, force: bool = False
    ) -> Run:
        """As :meth:`resume`, from inside a running event loop."""
        return await adrive(self._resume(execution_id, retry_failed, force))

    def fork(
        self,
        execution_id: UUID | str,
        *,
        at: str | int,
        override: Mapping[str, object] | None = None,
    ) -> Run:
        """Run the flow again as a new execution that takes the parent's decisions before
        ``at`` and computes the rest live: "had this decision been different, what then?".

        ``at`` is a recorded decision key (the fork takes every decision before it) or a
        number of decisions, in recorded order. ``override`` maps keys to values: a key the
        fork's flow asks is answered by its override whatever it is asked with (the override
        *is* the counterfactual), before the point or after it. The flow gets the parent's
        input; the parent is only read. The fork records its parent and fork point, and its
        inherited decisions as its own events, so it replays, exports and imports on its own
        (ADR 0027). Raises :class:`ForkPointError` for a point the parent does not have.
        """
        return drive(self._fork(execution_id, at, override, sync=True), _run_now)

    async def afork(
        self,
        execution_id: UUID | str,
        *,
        at: str | int,
        override: Mapping[str, object] | None = None,
    ) -> Run:
        """As :meth:`fork`, from inside a running event loop."""
        return await adrive(self._fork(execution_id, at, override))

    # -- replaying ---------------------------------------------------------------------------

    def replay(
        self, execution_id: UUID | str, *, live: frozenset[str] | set[str] = frozenset()
    ) -> ReplayResult:
        """Re-run the current code with every decision answered from the log; append nothing."""
        return drive(self._replay(self.execution(execution_id), live, in_log=True), _run_now)

    def replay_bundle(
        self,
        path: str | Path,
        *,
        live: frozenset[str] | set[str] = frozenset(),
        max_bundle_bytes: int | None = None,
    ) -> ReplayResult:
        """Replay an exported bundle with this Loom's flows; no database is opened.

        A file over ``max_bundle_bytes`` (default ``LOOM_MAX_BUNDLE_BYTES``, else 256 MiB) is
        refused unread with :class:`~loom_runtime.errors.BundleTooLargeError`.
        """
        bundle = read_bundle(_bundle_path(path), max_bytes=max_bundle_bytes)
        located = [(event.version, event.position) for event in bundle.events]
        return drive(
            self._replay(
                bundle.execution(), live, lambda execution: _decision_positions(execution, located)
            ),
            _run_now,
        )

    async def areplay(
        self, execution_id: UUID | str, *, live: frozenset[str] | set[str] = frozenset()
    ) -> ReplayResult:
        """As :meth:`replay`, from inside a running event loop."""
        return await adrive(self._replay(self.execution(execution_id), live, in_log=True))

    # -- reading -----------------------------------------------------------------------------

    def execution(self, execution_id: UUID | str) -> Execution:
        """The execution's current state, rebuilt from its events."""
        execution = project_rows(self.log.rows(_as_uuid(execution_id)))
        if execution is None:
            raise ExecutionNotFoundError(
                f"no execution {execution_id} in the log at {self.settings.url!r}"
            )
        if sealed_input(execution.input, execution.id):
            # Read before the input is opened: what sealed it first goes on sealing so.
            names, nulls = input_flags(execution.input)
            execution = self._opener.execution(execution)  # ErasedError once erased
            if self._keyring is not None:
                execution.sealer = ExecutionSealer(
                    self._keyring, execution.id, self.settings.redactor, names=names, nulls=nulls
                )
        return execution

    def check_read_models(self, *, bars: Bars | None = None) -> ReadModelReport:
        """Every read model of this SQLite log compared with a rebuild of it from the log, in
        two copies of the database (:mod:`~loom_runtime.read_model_check`; ``loom verify
        --read-models``); ``bars`` makes a progress callback per read model and step.
        :class:`~loom_runtime.errors.ReadModelCheckUnsupportedError` on PostgreSQL."""
        from loom_runtime.read_model_check import check_read_models

        return check_read_models(self.settings, encryption=self._encryption, bars=bars)

    def erase(
        self,
        *,
        execution: UUID | str | None = None,
        user: str | None = None,
        tenant: str | None = None,
        document: str | None = None,
        memory_key: str | None = None,
        memory_keys: Sequence[str] = (),
        reason: str,
        by: str,
        dry_run: bool = False,
    ) -> ErasureReport:
        """Erase an execution, or every execution of a user or a tenant (by their labels), or
        a corpus document (``document="SCOPE:DOC_ID"`` or ``'["SCOPE","DOC_ID"]'``, every
        revision: ADR 0055), or a key of
        an event-sourced memory (``memory_key="NAME:KEY"``: ADR 0060): destroy their data
        keys and append a forget event naming them, who and why (ADR 0049).

        Their input, decisions, output and error messages become unreadable everywhere the
        log is (a replay raises :class:`~loom_runtime.errors.ErasedError` naming the forget
        event); ids, labels, kinds and positions stay, and ``loom verify`` still passes.
        Before it returns, every read model in the log's database that forgets on the forget
        event (passage index, manifest, memory stores) is caught up to it, so none keeps the
        clear text until its next read; one that cannot is named in the report's
        ``unpurged``. ``dry_run`` says what would be erased and writes nothing. Needs ``encryption``
        (:class:`~loom_runtime.errors.EncryptionOffError` otherwise); naming nothing erasable
        is :class:`~loom_runtime.errors.ErasureSubjectError`. Exported bundles are copies,
        outside erasure's reach.

        ``memory_keys`` (``"NAME:KEY"`` each), with ``user`` or ``tenant``: those memory keys
        are erased with the executions, in the same forget event. Memory entries carry no
        labels, so the application names a person's keys (ADR 0060, amended).
        """
        from loom_runtime.erasure import erase

        return erase(
            self,
            execution=execution,
            user=user,
            tenant=tenant,
            document=document,
            memory_key=memory_key,
            memory_keys=memory_keys,
            reason=reason,
            by=by,
            dry_run=dry_run,
        )

    def retain(
        self,
        *,
        older_than: timedelta,
        tenant: str | None = None,
        reason: str | None = None,
        by: str = "retention",
        dry_run: bool = False,
        scope: str | None = None,
        memory: str | None = None,
    ) -> ErasureReport:
        """Erase every execution (of ``tenant``, if given) that started more than
        ``older_than`` ago, as :meth:`erase` does, in one forget event whose reason names the
        policy unless ``reason`` is given (ADR 0053). Nothing old enough left writes nothing
        (safe to run on a schedule); an age that is not positive is
        :class:`~loom_runtime.errors.RetentionPolicyError`. With ``scope``, the documents of
        that knowledge scope whose last revision was written before the cutoff are erased
        instead (every revision, as ``erase(document=...)`` does; ADR 0060). With ``memory``,
        the keys of that event-sourced memory whose last write is older than the cutoff
        (every entry ever written at each, as ``erase(memory_key=...)`` does; ADR 0060).
        """
        from loom_runtime.retention import retain

        return retain(
            self,
            older_than=older_than,
            tenant=tenant,
            reason=reason,
            by=by,
            dry_run=dry_run,
            scope=scope,
            memory=memory,
        )

    def executions(
        self,
        *,
        tenant: str | None = None,
        user: str | None = None,
        session: str | None = None,
        tags: tuple[str, ...] | list[str] = (),
    ) -> list[ExecutionSummary]:
        """Every execution in the log, oldest first, with its status (one pass over the log).

        ``tenant``, ``user`` and ``session`` keep those labelled so, ``tags`` those having
        every one of them (ADR 0034). The pass reads each execution's start, end and reopening
        events (not its decisions); one that does not match is dropped at its start, so its
        later events cost a dictionary miss.
        """
        wanted = Labels(tenant=tenant, user=user, session=session, tags=checked_tags(tags))
        summaries: dict[UUID, ExecutionSummary] = {}
        for notification in self.log.notifications(topics=_SUMMARY_TOPICS):
            event = self.log.decode(notification)
            if isinstance(event, Execution.Created):
                labels = stored_labels(
                    event.originator_id,
                    tenant=event.tenant,
                    user=event.user,
                    session=event.session,
                    tags=event.tags,
                )
                if not labels.matches(wanted):
                    continue
                summaries[event.originator_id] = ExecutionSummary(
                    execution_id=event.originator_id,
                    flow=event.flow,
                    code_version=event.code_version,
                    started_at=as_utc(event.timestamp),  # whatever zone it was stored in
                    log_position=event.log_position,
                    status="running",
                    parent_id=event.parent_id,
                    tenant=labels.tenant,
                    user=labels.user,
                    session=labels.session,
                    tags=labels.tags,
                )
            elif event.originator_id in summaries:
                summaries[event.originator_id] = msgspec.structs.replace(
                    summaries[event.originator_id], status=_STATUS_AFTER[type(event)]
                )
        return list(summaries.values())

    def export(
        self, execution_id: UUID | str, path: str | Path, *, follow_link: bool = True
    ) -> Path:
        """Write the execution to a portable bundle file (see :mod:`loom_runtime.bundle`).

        A link at ``path`` is followed (the file it points to is replaced) unless
        ``follow_link`` is False, when the link itself is
        (:func:`~loom_runtime.bundle.write_bundle`).

        The bundle holds the execution's values in clear (it replays with no database and no
        key), so it is a copy outside erasure's reach; an erased execution cannot be exported
        (:class:`~loom_runtime.errors.ErasedError`). From an encrypted log, a new file is
        readable by its owner only (0o600): the clear copy of what the log keeps sealed.
        """
        return write_bundle(
            self.bundle_of(execution_id),
            _bundle_path(path),
            follow_link=follow_link,
            private=self._encryption is not None,
        )

    def bundle_of(self, execution_id: UUID | str) -> Bundle:
        """The bundle :meth:`export` writes, in memory (to write later, once the log is
        closed: the pytest plugin writes a test's bundle only once its teardown passed)."""
        try:
            execution = self.execution(execution_id)
        except ErasedError as exc:
            raise ErasedError(
                f"execution {execution_id} cannot be exported: {exc}",
                subject=exc.subject,
                position=exc.position,
            ) from exc
        return seal(
            execution_id=execution.id,
            flow=execution.flow,
            code_version=execution.code_version,
            started_at_position=execution.log_position,
            events=self._bundle_events(execution),
        )

    def import_bundle(self, path: str | Path, *, max_bundle_bytes: int | None = None) -> UUID:
        """Add a bundle's execution to this log, keeping it replayable; never duplicates it.

        Importing an execution the log already holds identically writes nothing; one it holds
        with different events raises :class:`BundleConflictError`. ``max_bundle_bytes`` as
        for :meth:`replay_bundle`. With ``encryption`` the execution is sealed under a key of
        its own, as if recorded here, so :meth:`erase` can erase it; one erased here is
        refused (:class:`~loom_runtime.errors.ErasedError`): a copy cannot bring it back. An
        execution that starts more than a day after this machine's clock is refused
        (:class:`~loom_runtime.errors.BundleFormatError`): no retention age would select it.
        """
        bundle, rows = read_importable(_bundle_path(path), max_bytes=max_bundle_bytes)
        if self.settings.redactor is not None:  # as if recorded here (ADR 0012, "import")
            rows = redacted_rows(self.settings.redactor, rows)
        existing = self.log.rows(bundle.execution_id)
        if not existing:
            guard = self._keyless_guard(f"the imported execution {bundle.execution_id}")
            if self._keyring is not None:
                sealer = ExecutionSealer(self._keyring, bundle.execution_id, names=True, nulls=True)
                rows = sealer.seal_rows(rows, position=self.log.position)
            # That it was imported, in the same transaction: its recorded position is the
            # exporting log's, which readers of "what it saw" must know (ADR 0013, "imported").
            marker = _imported_row(bundle.execution_id, str(bundle.exported_at))
            self.log.insert_rows([*rows, marker], precondition=guard)
        elif not _same_rows(self._opener.rows(existing), rows):
            raise BundleConflictError(
                f"this log already holds execution {bundle.execution_id} with different "
                f"events ({len(existing)} here, {len(rows)} in the bundle); nothing was imported"
            )
        return bundle.execution_id

    def imported(self, execution_id: UUID | str) -> Imported | None:
        """The record that execution ``execution_id`` came from a bundle, or None if it was
        recorded here (or imported before imports were recorded). Its ``log_position`` is then
        the exporting log's: this log's corpus there is not what it saw."""
        rows = self.log.rows(imported_stream(_as_uuid(execution_id)))
        return None if not rows else cast(Imported, self.log.decode(rows[0]))

    def _bundle_events(self, execution: Execution) -> list[BundleEvent]:
        """The execution's events with their log positions, sealed fields opened: a bundle
        replays with no database and no key, which puts it outside erasure's reach."""
        records = self._stream_records(execution)
        return [
            BundleEvent(
                position=record.position,
                topic=record.topic,
                version=record.version,
                state=state.decode(),
            )
            for record, state in zip(records, self._opener.states(records), strict=True)
        ]

    def _stream_records(self, execution: Execution) -> list[Record]:
        """The execution's stored events up to its version (another worker may append more
        meanwhile) with their log positions, found by one scan of the log (from where it
        started: its events can only come after)."""
        for start in (execution.log_position, 0):  # 0: an imported execution's positions differ
            found = [
                record
                for record in self.log.notifications(after=start, topics=EXECUTION_TOPICS)
                if record.stream == execution.id and record.version <= execution.version
            ]
            if len(found) == execution.version:
                return found
        raise ExecutionNotFoundError(f"the log's events of execution {execution.id} are incomplete")

    def _recorded_positions(self, execution: Execution) -> dict[str, int]:
        """Where each recorded decision of ``execution`` is in the log, by key: what its span
        reports. Asked only when tracing, and then one scan of the log for an execution that
        has recorded decisions (a resume, a fork, a replay); none for a new run."""
        if not execution.decisions:
            return {}
        return _decision_positions(
            execution,
            ((record.version, record.position) for record in self._stream_records(execution)),
        )

    def close(self) -> None:
        """Close this Loom's services, then release the log's connections (if it was ever
        opened): services may still need the log while they close."""
        try:
            self.services.close()
        finally:
            if self._keyring is not None:
                self._keyring.close()
            if "log" in self.__dict__:
                self.log.close()
            else:  # never opened: a later use must not open (or create) it now
                self.__dict__["log"] = Closed(f"the Loom on {self.settings.url!r}")

    def __enter__(self) -> Loom:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- workers and recovery (ADR 0040) ----------------------------------------------------

    @cached_property
    def workers(self) -> WorkerRegistry:
        """The registry of workers and their heartbeats, in the log's database."""
        from loom_runtime.workers import WorkerRegistry

        return WorkerRegistry(self.log.engine)

    def _forget_parents_runs(self) -> None:
        """In a forked child: neither its parent's worker nor running what the parent runs.
        Under the parent's worker id, the parent's recovery would take the child's live runs
        for its own stranded ones (it does not count them) and compute them again."""
        self._heartbeat = None
        self._running = Counter()
        self._becoming_worker = threading.Lock()  # a fork copies it held if a thread held it

    @property
    def worker_id(self) -> str | None:
        """This Loom's id as a registered worker, inside :meth:`worker`; None outside it."""
        return None if self._heartbeat is None else self._heartbeat.worker

    def _owner_of_new_runs(self) -> str | None:
        """The worker a run or fork started here is owned by: this Loom's inside
        :meth:`worker`; else, in the thread running a one-off recovery pass, the worker that
        pass registered (``workers.RECOVERING_AS``); else none."""
        from loom_runtime.workers import RECOVERING_AS

        return self.worker_id or RECOVERING_AS.get()

    @contextmanager
    def worker(
        self,
        *,
        heartbeat: float = HEARTBEAT_EVERY,
        recover_every: float | None = RECOVER_EVERY,
        dead_after: float = DEAD_AFTER,
        include_unowned: bool = False,
    ) -> Iterator[str]:
        """Run this process as a registered worker for the block; yields its worker id.

        A daemon thread beats every ``heartbeat`` seconds, so executions this Loom starts or
        claims inside the block are owned by a worker others can see alive. With
        ``recover_every``, another daemon thread runs :meth:`recover` at once and then every
        ``recover_every`` seconds. Leaving the block waits for the execution a recovery is
        running, then marks the worker stopped: what it leaves unfinished (the block raised)
        can be recovered by others at once. If this Loom still runs executions then (other
        threads' runs), it only stops beating: its row expires after ``dead_after``, as a
        crashed worker's, so those runs are not taken over while they go on. Runs started
        after the block are no worker's. A process forked inside the block is no worker
        either (it may enter a block of its own). On an encrypted log a Loom without the master
        key is :class:`EncryptionOffError` before anything is registered: it could run
        nothing (ADR 0049, amended "worker").
        """
        from loom_runtime.recovery import recovering
        from loom_runtime.workers import Heartbeat, new_worker_id

        with self._becoming_worker:
            if self._heartbeat is not None:
                raise ConfigurationError(
                    f"this Loom is already worker {self._heartbeat.worker}; use one "
                    "`with loom.worker(...)` block per Loom"
                )
            if not 0 < heartbeat < dead_after:
                raise ConfigurationError(
                    f"heartbeat={heartbeat!r} must be positive and shorter than "
                    f"dead_after={dead_after!r}, or live workers would be taken for dead"
                )
            for name, seconds in (("heartbeat", heartbeat), ("recover_every", recover_every)):
                if seconds is not None and not seconds <= threading.TIMEOUT_MAX:
                    raise ConfigurationError(
                        f"{name}={seconds!r} is past the longest wait this platform takes "
                        f"({threading.TIMEOUT_MAX:.0f} s): its thread would die at its first wait"
                    )
            if not math.isfinite(dead_after):
                raise ConfigurationError(
                    f"dead_after={dead_after!r} must be finite: recoverers judge this worker by "
                    "it, so if it died its executions would never be recovered"
                )
            if dead_after < 2 * heartbeat:  # one late beat must not make a live worker dead
                raise ConfigurationError(
                    f"dead_after={dead_after!r} must be at least twice heartbeat={heartbeat!r}: "
                    "one beat late (a slow commit, a paused process) and a live worker would be "
                    "taken over, its open decision computed twice"
                )
            if recover_every is not None and not recover_every > 0:  # NaN fails too
                raise ConfigurationError(
                    f"recover_every={recover_every!r} must be a positive number of seconds (or "
                    "None for no recovery): zero or less would recover in a busy loop"
                )
            self._refuse_keyless_recovery("worker", "no worker was registered")
            beating = Heartbeat(
                self.workers, worker=new_worker_id(), every=heartbeat, dead_after=dead_after
            )
            beating.start()
            self._heartbeat = beating
        try:
            with recovering(
                self, every=recover_every, dead_after=dead_after, include_unowned=include_unowned
            ):
                yield beating.worker
        finally:
            self._heartbeat = None  # from here on, a run started is no worker's
            with self._running_lock:  # a run counts itself before it reads its owner
                running = bool(self._running)
            beating.stop(gone=not running)

    def recover(
        self, *, dead_after: float = DEAD_AFTER, include_unowned: bool = False
    ) -> list[Run]:
        """Claim and finish every unfinished, not failed execution whose owner is not a live
        worker (no beat within ``dead_after`` seconds); returns the runs it finished.

        Safe to call from any number of workers at once (ADR 0040): an execution is claimed at
        the version it was found at, so of two recoverers exactly one claims it; the other
        skips it. Executions of flows this Loom has not registered are left for a worker that
        has them. An execution whose owner never registered (started outside
        :meth:`worker`, or before workers existed) is taken only with ``include_unowned``:
        its process may still be running it. A flow that raises again is recorded as failed
        (as in :meth:`resume`), logged, and the pass goes on. A ``dead_after`` that is not
        positive (or NaN) is :class:`ConfigurationError`: it would take every worker for dead;
        so is an infinite one, which would take none.
        """
        from loom_runtime.recovery import recover

        if not dead_after > 0:  # NaN fails too: no beat compares with it, so none is alive
            raise ConfigurationError(
                f"dead_after={dead_after!r} must be a positive number of seconds: with zero or "
                "less every live worker would be taken for dead and its executions taken over"
            )
        if not math.isfinite(dead_after):
            raise ConfigurationError(
                f"dead_after={dead_after!r} must be finite: no worker would ever be taken for "
                "dead, and nothing recovered, however long ago it stopped"
            )
        # Even with nothing to recover yet: a scheduled pass whose key went missing reported
        # "0 recovered" until the first crash needed it.
        self._refuse_keyless_recovery("recovery", "nothing was recovered")
        return recover(self, dead_after=dead_after, include_unowned=include_unowned)

    def _refuse_keyless_recovery(self, what: str, outcome: str) -> None:
        """:class:`EncryptionOffError` when this Loom was opened without the master key of an
        encrypted log (not "no keyring yet": the keyring opens with the log, on its first
        use, which a fresh Loom's worker or recovery can be)."""
        if self._encryption is not None:
            return
        from loom_runtime.sealing import has_key_table

        if has_key_table(self.log.engine):
            raise EncryptionOffError(
                f"this log is encrypted but this Loom was opened without its master key: a "
                f"{what} could neither read the executions it would recover nor store the ones "
                "it starts sealed. Open it with Loom(url, encryption=MasterKey.from_env()) and "
                f"set $LOOM_MASTER_KEY (for `loom worker` or `loom recover`: set "
                f"$LOOM_MASTER_KEY); {outcome}"
            )

    def _take_over(self, execution: Execution, call: _Call | None, *, worker: str) -> Run:
        """Claim ``execution`` for ``worker`` at the version it was loaded at, and finish it
        with ``call`` (its :meth:`_resumable`): the step of a recovery that needs this Loom's
        internals (``recovery.recover``)."""
        if call is not None:
            _refuse_in_a_running_loop(call.definition, "aresume")
        with self._running_here(execution.id):
            self._claim(execution, worker=worker)
            return drive(self._continue(execution, call), _run_now)

    def runs_now(self, execution_id: UUID) -> bool:
        """Whether this Loom is running ``execution_id`` now, in any of its threads."""
        return self._running[execution_id] > 0

    @contextmanager
    def _running_here(self, execution_id: UUID) -> Iterator[None]:
        """Count ``execution_id`` as run by this Loom for the block (see ``_running``)."""
        self._runs(execution_id)
        try:
            yield
        finally:
            self._ran(execution_id)

    def _runs(self, execution_id: UUID) -> None:
        """The start of a run of ``execution_id`` here (see ``_running``)."""
        with self._running_lock:
            self._running[execution_id] += 1

    # -- internals ---------------------------------------------------------------------------

    def _start(
        self, flow: str, labels: Labels, arguments: dict[str, Any]
    ) -> tuple[Flow, Execution, dict[str, Any], SubAgents | None]:
        """Start a run of ``flow``: its definition, its new execution (stored, counted
        running here), its arguments as the flow takes them, and None. A sub-agent (a run
        inside a recording flow's decision) that this decision started before its run stopped
        is that execution, loaded, and what named it: the caller finishes it
        (:meth:`_rejoin`)."""
        if not isinstance(labels, Labels):
            raise LabelError(
                f"labels must be a loom_runtime.Labels (e.g. Labels(tenant='acme', "
                f"user='u-42')), not {type(labels).__name__}",
                label="labels",
            )
        definition = self.get_flow(flow)
        parent = current_context()
        if parent is not None and not parent.computing_here():
            raise SubflowOutsideDecisionError(flow=definition.name, parent=parent.execution_id)
        raw_input, kwargs = definition.bind(arguments, redactor=self.settings.redactor)
        sub = sub_agent(definition.name)
        earlier = None
        if sub is None:
            execution_id = uuid4()
        else:
            with sub.lock:  # the compute's threads pick their runs' ids one at a time
                n, execution_id, earlier = self._sub_agent(sub, definition, raw_input, labels)
                sub.take(n)
        # Counted before its owner is read and before it exists (the run's own block ends it):
        # a worker block that ends meanwhile either sees it running or gives it no owner.
        self._runs(execution_id)
        if earlier is not None:
            return definition, earlier, kwargs, sub
        try:
            execution = Execution.start(
                id=execution_id,
                flow=definition.name,
                code_version=definition.version,
                input=raw_input,
                log_position=self.log.position,
                labels=labels,
                worker=self._owner_of_new_runs(),
                started_by=None if sub is None else sub.parent,
            )
            save(self.log, execution, precondition=self._seal_new(execution))
        except BaseException:
            self._ran(execution_id)
            raise
        logger.info(
            "execution %s of flow %r started at log position %d",
            execution.id,
            definition.name,
            execution.log_position,
        )
        return definition, execution, kwargs, None

    def _sub_agent(
        self, sub: SubAgents, definition: Flow, raw_input: msgspec.Raw, labels: Labels
    ) -> tuple[int, UUID, Execution | None]:
        """The number and id of a run of ``definition`` inside a decision (a sub-agent,
        ``sub``), and the execution found there if the decision started this same run before
        its run stopped (None: it is new). The same run: started by this parent, recorded
        here (an imported one was made elsewhere: a bundle can name any id), of the same flow
        and labels (read in clear first: another user's child is never opened), and the same
        input. One that is not (another input: the code
        changed, or the compute's threads started their runs in another order) is passed over
        for the next id, and so is an erased one (erasure forgets what was stored, it does not
        forbid a new run); what was read at each id is kept for the attempt's other runs. A
        found one running in a live worker is :class:`ExecutionOwnedError`, as :meth:`resume`
        refuses it, unless the parent's run was forced."""
        asked: Any = _NOT_READ
        for n, execution_id in sub.ids():
            seen = sub.found.get(execution_id)
            if seen is None:
                stored = project_rows(self.log.rows(execution_id))  # in clear: nothing opened
                if stored is None:
                    return n, execution_id, None
                seen = sub.found[execution_id] = _Sibling(stored)
            if not seen.may_be(sub.parent, definition.name, labels):
                continue
            if seen.skipped is None:
                seen.skipped = self.imported(execution_id) is not None
            if seen.skipped:
                continue
            opened = None
            if seen.input is _NOT_READ:
                try:
                    opened = self.execution(execution_id)
                except ErasedError:  # erased: nothing to take up; a new run is no erased write
                    seen.skipped = True  # passed over from now on
                    continue
                seen.input = codec.decode_untyped(opened.input)
            if asked is _NOT_READ:
                asked = codec.decode_untyped(raw_input)
            if seen.input != asked:
                continue
            found = opened or self.execution(execution_id)
            if not sub.force or self.runs_now(execution_id):
                self._refuse_live_owner(found)
            return n, execution_id, found
        raise AssertionError("unreachable: ids() ends only at a free id")  # pragma: no cover

    def _rejoin(self, definition: Flow, execution: Execution, sub: SubAgents) -> Steps[Run]:
        """Finish a sub-agent its decision (``sub``) started before its run stopped, as that
        run would have: its output if it completed, its failure raised again if it failed (as
        the decision saw it), else resumed (what it stored is not computed again)."""
        logger.info(
            "execution %s of flow %r, started by a decision of execution %s in a run that "
            "stopped, is taken up again",
            execution.id,
            definition.name,
            sub.parent,
        )
        if execution.error is not None:
            error_type, message = execution.error
            raise rebuild_error(
                Decision(sub.key, None, execution.input, error_type=error_type, message=message)
            )
        call = self._resumable(execution)
        self._claim(execution, worker=self._owner_of_new_runs())
        return (yield from self._continue(execution, call))

    def _resumable(self, execution: Execution, retry_failed: bool = False) -> _Call | None:
        """How to call ``execution``'s flow to finish it: None for a completed one (returned as
        recorded). Everything that refuses a resume is checked here, before :meth:`_claim`
        writes anything: a failure not to be retried, a flow not registered, and a stored
        input the flow no longer takes (its signature changed since the execution started),
        which would otherwise leave a claim behind at every attempt (ADR 0040, amended
        "attack")."""
        if execution.error is not None and not retry_failed:
            error_type, message = execution.error
            raise ExecutionFinishedError(
                f"execution {execution.id} failed ({error_type}: {message}). Once the cause "
                "is fixed, reopen it with loom.resume(id, retry_failed=True) (`loom resume "
                "ID --retry-failed`): its failed decisions are computed again, the rest kept"
            )
        if execution.output is not None:
            return None
        definition = self.get_flow(execution.flow, recorded_by=execution.id)
        try:
            kwargs = definition.decode_input(execution.input)
        except FlowInputError as exc:
            raise FlowInputError(
                f"execution {execution.id} was not resumed: {exc} (the flow's parameters "
                "changed since it started); nothing was written. Resume it with code whose "
                f"flow {definition.name!r} takes the input it was started with"
            ) from exc
        return _Call(definition, kwargs, _stored_overrides(execution))

    def _claim(self, execution: Execution, *, worker: str | None = None) -> None:
        """Claim an unfinished ``execution`` for ``worker`` (this Loom's) at the version it was
        loaded at, reopening it if it failed (:meth:`_resumable` said it may be); a completed
        one is left as it is."""
        worker = worker or self.worker_id or f"{socket.gethostname()}:{os.getpid()}"
        if execution.error is not None:
            execution.reopen(worker=worker)
            save(self.log, execution)
        elif execution.output is None:
            execution.claim(worker=worker)
            save(self.log, execution)

    def _context(
        self,
        definition: Flow,
        execution: Execution,
        source: DecisionSource,
        *,
        naming: SubAgentNaming | None,
        replaying: bool | Callable[[], bool] = False,
        spacing: AnswerSpacing | None = None,
    ) -> FlowContext | AsyncFlowContext:
        """The flow's ``ctx``; ``naming``: what a recording run names the sub-agents its
        decisions start by (None in a replay); ``replaying``: a replay's (``ctx.replaying``);
        ``spacing``: an async recording's (:class:`AnswerSpacing`, its recorder's too)."""
        if not definition.is_async:
            return FlowContext(
                source,
                execution_id=execution.id,
                flow=definition.name,
                naming=naming,
                replaying=replaying,
            )
        # A replay or a resume hands an async flow's recorded answers out in the order they
        # were recorded (ADR 0002, amended "completion order"); a fork's inherited ones were
        # recorded by its parent's run, and are asked in whatever order its branch asks them.
        # A call the flow cancelled is ranked where it was cancelled, not where it was stored.
        versions, decisions = execution.decision_versions, execution.decisions
        recorded = completion_order(sorted(versions, key=versions.__getitem__), decisions)
        if execution.parent_id is not None:
            recorded = [key for key in recorded if decisions[key].origin != "inherited"]
        # An answer that came live passes after the one before it, to another task, is
        # handed out no sooner (ADR 0002, amended "answers spaced").
        order = (
            RecordedOrder(recorded, spacing=answer_spacing(recorded, decisions))
            if len(recorded) > 1
            else None
        )
        return AsyncFlowContext(
            source,
            execution_id=execution.id,
            flow=definition.name,
            order=order,
            naming=naming,
            replaying=replaying,
            spacing=spacing,
        )

    def _run(self, flow: str, labels: Labels, arguments: dict[str, Any]) -> Steps[Run]:
        definition, execution, kwargs, earlier = self._start(flow, labels, arguments)  # running
        try:
            if earlier is not None:
                return (yield from self._rejoin(definition, execution, earlier))
            return (yield from self._record("run", definition, execution, kwargs))
        finally:
            self._ran(execution.id)

    def _ran(self, execution_id: UUID) -> None:
        """The end of a run :meth:`_runs` counted (see ``_running``)."""
        with self._running_lock:
            self._running[execution_id] -= 1
            if not self._running[execution_id]:
                del self._running[execution_id]

    def _resume(
        self, execution_id: UUID | str, retry_failed: bool, force: bool, *, sync: bool = False
    ) -> Steps[Run]:
        execution = self.execution(execution_id)
        if not force:
            self._refuse_live_owner(execution)
        call = self._resumable(execution, retry_failed)
        if call is None:  # completed: returned as recorded, nothing claimed
            return self._finished_run(execution)
        if sync:
            _refuse_in_a_running_loop(call.definition, "aresume")
        # Claimed for a worker registered for the resume, not for host:pid (which nobody can
        # judge alive): a second resume elsewhere is refused while this one runs, and
        # recovery takes the execution if this one dies (ADR 0040, amended "resume").
        with (
            self._running_here(execution.id),
            registered_worker(self, forget_when_done=True) as worker,
        ):
            self._claim(execution, worker=worker)
            return (yield from self._continue(execution, call, force=force))

    def _refuse_live_owner(self, execution: Execution) -> None:
        """Refuse to resume an unfinished execution that is running: in this Loom (another
        thread), or in a live worker other than this one, by the ``dead_after`` that worker
        asked for (:meth:`resume`)."""
        owner = execution.owner
        if execution.finished:
            return
        if self.runs_now(execution.id):
            raise ExecutionOwnedError(
                f"execution {execution.id} is running in this process (another thread of "
                "this Loom): resuming it too would compute its open decision again; nothing "
                "was written"
            )
        if owner is None or owner == self.worker_id:  # unowned, or this worker's, stranded
            return
        live = {w.worker: w for w in self.workers.workers(dead_after=None) if w.alive}
        if owner in live:
            expires = live[owner].dead_after or DEAD_AFTER
            raise ExecutionOwnedError(
                f"execution {execution.id} is owned by worker {owner}, which is alive (it beat "
                f"within the {expires:g} s it asked to be judged by): resuming it here would "
                "compute its open decision again and stop that worker at its next append; "
                "nothing was written. Wait for it (a killed worker, or a killed `loom resume` "
                f"or `loom recover`, which beat while they ran, is taken for dead {expires:g} s "
                "after its last beat), or, if that worker is gone or no longer runs it (a run "
                "cancelled in a worker started with recover_every=None stays its own until it "
                "stops), resume with force=True (`loom resume ID --force`)"
            )

    def _set_aside(self, execution: Execution, *, worker: str, claims: int) -> None:
        """Claim ``execution`` for ``worker`` and record :class:`RecoveryLimitError` as its
        failure in the same append, without running its flow (``recovery``'s guard)."""
        execution.claim(worker=worker)
        execution.fail(
            error=RecoveryLimitError(
                f"execution {execution.id} was claimed {claims} times in a row with nothing "
                "stored in between (by recovery, or by hand: its flow may stop the process that "
                "runs it): set aside by recovery; once the cause is fixed, reopen it with "
                f"loom resume {execution.id} --retry-failed"
            )
        )
        save(self.log, execution)

    def _continue(
        self, execution: Execution, call: _Call | None, *, force: bool = False
    ) -> Steps[Run]:
        """Run a claimed execution's flow to its end with ``call`` (None, for a completed one:
        its recorded output); ``force``: a forced resume (its sub-agents' owners are
        overridden as its own was)."""
        if call is None:
            return self._finished_run(execution)
        logger.info("execution %s of flow %r resumed", execution.id, call.definition.name)
        return (
            yield from self._record(
                "resume", call.definition, execution, call.kwargs, call.overrides, force=force
            )
        )

    def _fork(
        self,
        execution_id: UUID | str,
        at: str | int,
        override: Mapping[str, object] | None,
        *,
        sync: bool = False,
    ) -> Steps[Run]:
        """Create the fork (its Created event and inherited decisions in one append), then
        run the flow with its overrides."""
        parent = self.execution(execution_id)
        taken = _fork_point(parent, at)
        definition = self.get_flow(parent.flow, recorded_by=parent.id)
        if sync:
            _refuse_in_a_running_loop(definition, "afork")
        if override is not None and not isinstance(override, Mapping):
            raise ConfigurationError(
                f"override must map decision keys to values ({{'key': value}}), not {override!r}"
            )
        overrides = {
            _override_key(key): codec.encode(
                value, path=f"override of {key!r}", redactor=self.settings.redactor
            )
            for key, value in (override or {}).items()
        }
        kwargs = definition.decode_input(parent.input)
        fork_id = uuid4()
        with self._running_here(fork_id):  # counted before its owner is read, as a run's
            execution = Execution.start(
                id=fork_id,
                flow=definition.name,
                code_version=definition.version,
                input=parent.input,
                log_position=self.log.position,
                parent_id=parent.id,
                forked_at=taken,
                labels=parent.labels,
                worker=self._owner_of_new_runs(),
                overrides=codec.encode(overrides, path="overrides") if overrides else None,
            )
            for decision in list(parent.decisions.values())[:taken]:
                if decision.key not in overrides:
                    execution.inherit(decision)
            guard = self._seal_new(execution)
            save(self.log, execution, precondition=self._parent_live(parent) or guard)
            logger.info(
                "execution %s forked from %s after %d decisions", execution.id, parent.id, taken
            )
            return (yield from self._record("fork", definition, execution, kwargs, overrides))

    def _record(
        self,
        operation: Operation,
        definition: Flow,
        execution: Execution,
        kwargs: dict[str, Any],
        overrides: Mapping[str, msgspec.Raw] | None = None,
        *,
        force: bool = False,
    ) -> Steps[Run]:
        """Call the flow with a recording context; store its output, or its failure
        (``force``: a forced resume, see :meth:`_continue`)."""
        positions = None if self._telemetry is None else self._recorded_positions(execution)
        spacing = AnswerSpacing() if definition.is_async else None
        recorder = Recorder(
            self.log, execution, overrides=overrides, positions=positions, spacing=spacing
        )
        recorded = tuple(execution.decisions)  # a resume's: asked again, or said not to be
        with self._traced(operation, execution, recorder, positions) as source:
            ctx = self._context(
                definition,
                execution,
                source,
                naming=_naming(execution, force=force),
                spacing=spacing,
            )
            # Open decisions are stored before the end event (nothing is stored after it);
            # an interrupt or a cancellation that stops the run stores nothing more (ADR 0026).
            try:
                result = yield from _call(definition, ctx, kwargs)
                ctx.end_open_decisions()
            except Exception as exc:
                try:
                    ctx.end_open_decisions()  # nothing left to store if it already ran
                finally:
                    _warn_unattributed(execution, ctx, sealed=self._sealed(execution))
                    self._fail(execution, exc)
                raise
            _warn_unattributed(execution, ctx, sealed=self._sealed(execution))
            if recorded:
                never_asked = recorder.never_asked(recorded)
                _warn_never_asked(execution, never_asked, sealed=self._sealed(execution))
            return self._complete(definition, execution, result)

    def _recorded_here(self, execution_id: UUID) -> bool:
        """Whether ``execution_id`` was recorded in this log, not imported from a bundle: the
        writes its flow made through loom (a memory's) are here, and a replay leaves them out
        (``ctx.replaying``; ADR 0002, amended "replay writes nothing")."""
        return self.imported(execution_id) is None

    def _replay(
        self,
        execution: Execution,
        live: frozenset[str] | set[str],
        recorded_positions: Callable[[Execution], dict[str, int]] | None = None,
        *,
        in_log: bool = False,
    ) -> Steps[ReplayResult]:
        """Call the flow with a replaying context; compare what it did with the recording.

        ``recorded_positions`` says where the recording's decisions are (default: where this
        log holds them); asked only when tracing (their spans report it). ``in_log``: the
        execution was read from this log; unless it was imported there, its flow's writes are
        here too (``ctx.replaying``, asked only when the flow writes: a read of the import
        marker cost a short replay a tenth of its time).
        """
        definition, replayer, kwargs = self._prepare_replay(execution, live)
        output: msgspec.Raw | None = None
        value: object = None
        error: BaseException | None = None
        positions = (
            None
            if self._telemetry is None
            else (recorded_positions or self._recorded_positions)(execution)
        )
        ctx: FlowContext | AsyncFlowContext | None = None
        try:  # outside the traced block: what the flow raised marks the replay's span as a run's
            with self._traced("replay", execution, replayer, positions) as source:
                recorded_here = partial(self._recorded_here, execution.id)
                ctx = self._context(
                    definition,
                    execution,
                    source,
                    naming=None,
                    replaying=recorded_here if in_log else False,
                )
                result = yield from _call(definition, ctx, kwargs)
                # Checked against the return type as the run checked it (_complete): an output
                # that does not fit was the run's failure, and is the replay's.
                output, value = codec.round_trip(
                    result,
                    path="output",
                    type=definition.output_type,
                    redactor=replayer.redactor,
                )
        except Exception as exc:
            error = exc
        except asyncio.CancelledError as exc:
            if cancelling():  # the replay itself was cancelled (its caller's task)
                raise
            # A cancellation recorded as raised by a call, that the code no longer catches:
            # the flow's outcome, reported, never raised out of replay() (ADR 0026).
            error = exc
        if ctx is not None and ctx.unattributed_count:
            replayer.divergences.append(
                UnattributedCallError(calls=ctx.unattributed, count=ctx.unattributed_count)
            )
        if ctx is not None:
            # What the recording could not answer, caught by the flow or not (ADR 0002,
            # amended "caught findings"): an uncaught one is the outcome, told by identity.
            replayer.divergences.extend(ctx.findings)
            replayer.divergences.extend(
                CancellationNotRepeatedError(key=key, waited=bound)
                for key, bound in ctx.uncancelled
            )
        replayed = self._replay_result(execution, definition, replayer, output, value, error)
        logger.info(
            "replay of execution %s: %d divergences", execution.id, len(replayed.divergences)
        )
        return replayed

    def _traced(
        self,
        operation: Operation,
        execution: Execution,
        source: DecisionSource,
        positions: dict[str, int] | None,
    ) -> AbstractContextManager[DecisionSource]:
        """Telemetry hook (ADR 0030): ``source`` as is, or wrapped to make a span per decision
        inside the execution's span when this Loom was given a tracer provider. ``positions``
        (by decision key, filled as decisions are stored) is where each decision's span finds
        its own log position (ADR 0034)."""
        if self._telemetry is None:
            return nullcontext(source)
        return self._telemetry.execution(
            operation,
            execution,
            source,
            {} if positions is None else positions,
            sealed=self._sealed(execution),
        )

    def _sealed(self, execution: Execution) -> bool:
        """Whether what leaves the log of ``execution`` (spans, log lines) must hold none of
        what it seals: with a master key every execution is treated so, a bundle's clear copy
        too (ADR 0030, amended "sealed")."""
        return self._encryption is not None or execution.sealer is not None

    def _complete(self, definition: Flow, execution: Execution, result: object) -> Run:
        try:
            raw, output = codec.round_trip(
                result,
                path="output",
                type=definition.output_type,
                redactor=self.settings.redactor,
            )
        except REFUSALS as exc:  # the codec's and the redactor's: the run's failure
            self._fail(execution, exc)
            raise
        with execution.appending:  # a thread of the flow still recording is refused after it
            execution.complete(output=raw)
            save(self.log, execution)
        logger.info("execution %s of flow %r completed", execution.id, execution.flow)
        return Run(
            execution_id=execution.id,
            flow=execution.flow,
            output=output,
            log_position=execution.log_position,
        )

    def _fail(self, execution: Execution, error: Exception) -> None:
        if execution.lost or isinstance(error, ExecutionConflictError):
            return  # another worker owns the execution now (or this one can no longer append)
        with execution.appending:
            execution.fail(error=error)
            save(self.log, execution)
        logger.info("execution %s failed: %s", execution.id, type(error).__name__)
        error.add_note(f"loom: recorded as the failure of execution {execution.id}")

    def _finished_run(self, execution: Execution) -> Run:
        definition = self.flows.find(execution.flow)
        output_type = definition.output_type if definition else Any
        return Run(
            execution_id=execution.id,
            flow=execution.flow,
            output=codec.decode(execution.output or b"null", type=output_type),
            log_position=execution.log_position,
        )

    def _prepare_replay(
        self, execution: Execution, live: frozenset[str] | set[str]
    ) -> tuple[Flow, Replayer, dict[str, Any]]:
        kinds = _kinds(live)
        if kinds is None:
            raise ConfigurationError(  # a str would be read as its characters, silently
                f"live must be a set of decision kinds, such as {{'retrieval'}}, not {live!r}"
            )
        definition = self.get_flow(execution.flow, recorded_by=execution.id)
        replayer = Replayer(execution.decisions, live=kinds, redactor=self.settings.redactor)
        return definition, replayer, definition.decode_input(execution.input)

    def _replay_result(
        self,
        execution: Execution,
        definition: Flow,
        replayer: Replayer,
        output: msgspec.Raw | None,
        value: object,
        error: BaseException | None,
    ) -> ReplayResult:
        divergences = replayer.divergences + compare_outcome(
            execution, replayer, output=output, error=error
        )
        return ReplayResult(
            execution_id=execution.id,
            flow=execution.flow,
            recorded_code_version=execution.code_version,
            code_version=definition.version,
            divergences=tuple(divergences),
            output=value,
            live_values=replayer.live_values,
        )


def _bundle_path(path: object) -> Path:
    """``path`` as a bundle file's path; anything that names no file (None, a number) is
    :class:`ConfigurationError`, where ``Path(...)`` raised a bare ``TypeError``."""
    if not isinstance(path, str | os.PathLike):
        raise ConfigurationError(f"a bundle's path must be a str or a Path, not {path!r}")
    return Path(path)


def _kinds(live: object) -> frozenset[str] | None:
    """``live`` as a replay's set of decision kinds, or None when it is none: a str (read as
    its characters), a mapping, no iterable, or an iterable of anything but strings."""
    if isinstance(live, str | bytes | Mapping) or not isinstance(live, Iterable):
        return None
    kinds = tuple(live)
    if not all(isinstance(kind, str) for kind in kinds):
        return None
    return frozenset(kinds)


class _Call(NamedTuple):
    """How a resume calls an execution's flow (:meth:`Loom._resumable`), checked before the
    claim is written."""

    definition: Flow
    kwargs: dict[str, Any]
    overrides: dict[str, msgspec.Raw] | None


_NOT_NAMED: Final = "not named: the execution is sealed"
"""What a warning about a sealed execution says in place of its calls' or keys' names: a log
line is beyond erasure's reach once a handler keeps it (ADR 0049, amended "log lines")."""


def _warn_unattributed(
    execution: Execution, ctx: FlowContext | AsyncFlowContext, *, sealed: bool
) -> None:
    """Say which calls of a recorded kind were made without the flow's context while it ran
    (:func:`~loom_runtime.context.note_unattributed`): they are not in the recording, so its
    replay will make them live and report :class:`UnattributedCallError`. Named only for a
    clear execution: a call's name holds its URL's path, part of a sealed key had it been
    recorded."""
    if ctx.unattributed_count:
        logger.warning(
            "execution %s: %d call(s) loom records were made from a thread or task without "
            "the flow's context and were not recorded (%s); start the flow's threads with "
            "its context: pool.submit(contextvars.copy_context().run, fn, ...)",
            execution.id,
            ctx.unattributed_count,
            _NOT_NAMED if sealed else ", ".join(ctx.unattributed),
        )


def _warn_never_asked(execution: Execution, keys: list[str], *, sealed: bool) -> None:
    """Say which recorded decisions a resumed run never asked: its code changed since they
    were recorded (a key renamed), so the execution now holds two runs' decisions and its
    replay will report them unused (ADR 0026, "changed code"). Keys are sealed in a sealed
    execution: only their count is said."""
    if keys:
        shown = ", ".join(map(repr, keys[:NAMED_IN_A_WARNING]))
        more = (
            f" and {len(keys) - NAMED_IN_A_WARNING} more" if len(keys) > NAMED_IN_A_WARNING else ""
        )
        logger.warning(
            "execution %s was resumed by code that never asked %d of its recorded decisions "
            "(%s): the code changed since they were recorded, so the execution holds two "
            "runs' decisions and its replay will report them unused",
            execution.id,
            len(keys),
            _NOT_NAMED if sealed else shown + more,
        )


def _call(
    definition: Flow, ctx: FlowContext | AsyncFlowContext, kwargs: dict[str, Any]
) -> Steps[Any]:
    """The flow's result: an async flow's coroutine is pending, for the driver to settle.

    ``ctx`` is the current context while the body runs; the coroutine is awaited in this
    context, or in a copy of it (``asyncio.run`` copies it into its task).
    """
    with running(ctx):
        result = definition.fn(ctx, **kwargs)
        if definition.is_async:
            result = yield Pending(definition.name, _on_its_loop(ctx, result))
    return result


async def _on_its_loop(ctx: FlowContext | AsyncFlowContext, body: Awaitable[Any]) -> Any:
    """An async flow's body, awaited once its context knows the loop it runs on: the loop
    whose tasks wait for their recorded turns (ADR 0002, "completion order"). As it ends
    (returned, raised or cancelled), the decisions its tasks still ask are cancelled and
    waited for (:meth:`AsyncFlowContext.settle_in_flight`), on the caller's loop as on
    ``asyncio.run``'s."""
    if not isinstance(ctx, AsyncFlowContext):
        return await body
    ctx.runs_on_this_loop()
    try:
        return await body
    finally:
        await ctx.settle_in_flight()


def _decision_positions(execution: Execution, located: Iterable[tuple[int, int]]) -> dict[str, int]:
    """The log position of each of ``execution``'s decisions, from the ``(version, position)``
    of its stored events: nothing is decoded again (the execution knows each decision's
    version)."""
    position_of = dict(located)
    return {
        key: position_of[version]
        for key, version in execution.decision_versions.items()
        if version in position_of
    }


_NOT_READ: Final = object()


class _Sibling:
    """What ``Loom._sub_agent`` read at one id of a decision's sub-agents: the fields stored
    in clear at once, whether it was imported (or erased: passed over alike) and its input
    (opened) once they are asked."""

    __slots__ = ("flow", "input", "labels", "skipped", "started_by")

    def __init__(self, stored: Execution) -> None:
        self.flow, self.labels, self.started_by = stored.flow, stored.labels, stored.started_by
        self.skipped: bool | None = None
        """Imported or erased: never taken up (None: not asked yet)."""
        self.input: Any = _NOT_READ

    def may_be(self, parent: UUID, flow: str, labels: Labels) -> bool:
        """Whether its clear fields are those of a run of ``flow`` for ``labels`` that
        ``parent`` started."""
        return self.started_by == parent and self.flow == flow and self.labels == labels


def _naming(execution: Execution, *, force: bool) -> SubAgentNaming:
    """What a recording run of ``execution`` names the sub-agents its decisions start by
    (:func:`~loom_runtime.context.sub_agent`)."""
    sealer = execution.sealer
    return SubAgentNaming(
        reopened=Counter(key for reopening in execution.reopenings for key in reopening.dropped),
        seal=sealer.sealed_name if sealer is not None and sealer.names else None,
        force=force,
    )


def _fork_point(parent: Execution, at: str | int) -> int:
    """How many of ``parent``'s decisions (in recorded order) a fork ``at`` takes."""
    keys = list(parent.decisions)
    if isinstance(at, str) and at in parent.decisions:
        return keys.index(at)
    if isinstance(at, int) and not isinstance(at, bool) and 0 <= at <= len(keys):
        return at
    if isinstance(at, str):
        nearest = difflib.get_close_matches(at, keys, n=3, cutoff=0.4)
        hint = f" (nearest: {', '.join(map(repr, nearest))})" if nearest else ""
        problem = f"recorded no decision {at!r}{hint}"
    else:
        problem = f"cannot be forked at {at!r}"
    raise ForkPointError(
        f"execution {parent.id} {problem}; fork at one of its decision keys (see `loom "
        f"executions show {parent.id}`) or at a number of decisions from 0 to {len(keys)}"
    )


def _stored_overrides(execution: Execution) -> dict[str, msgspec.Raw] | None:
    """A fork's overrides as its start stored them (None for a run): a map of decision keys
    to values, or the row was edited."""
    if execution.overrides is None:
        return None
    try:
        return msgspec.json.decode(execution.overrides, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:  # ValidationError included
        raise LogCorruptError(
            f"execution {execution.id}'s stored overrides are not a map of decision keys to "
            f"values ({exc}); run `loom verify`: the row may have been edited"
        ) from exc


def _override_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise DecisionKeyError(
            f"an override is keyed by a decision key (a non-empty str), not {key!r}"
        )
    return key


def _refuse_in_a_running_loop(definition: Flow, instead: str) -> None:
    """Refuse, before anything is written, to run an async flow from a sync method while an
    event loop runs in this thread (:func:`_run_now` cannot settle it there). Refused by the
    driver instead, after the run was started or the execution claimed, it was stored as the
    flow's failure: an interrupted execution resumed at an application's start-up became
    failed for good over a usage error."""
    if definition.is_async and loop_running():
        raise ConfigurationError(
            f"flow {definition.name!r} is async and an event loop is already running: use "
            f"`await loom.{instead}(...)` instead; nothing was written"
        )


def _run_now(pending: Pending) -> Any:
    """Settle an async flow from a sync method: on a new event loop, never inside one."""
    coroutine = cast("Coroutine[Any, Any, Any]", pending.awaitable)
    if not loop_running():
        return asyncio.run(coroutine)
    coroutine.close()
    raise ConfigurationError(
        f"flow {pending.what!r} is async and an event loop is already running: "
        "use `await loom.arun(...)` / `aresume` / `areplay` instead"
    )


def _same_rows(stored: list[Row], imported: list[Row]) -> bool:
    """Whether two executions' rows hold the same events, compared as JSON values re-encoded
    (an opened sealed field is re-encoded, so its bytes may differ from the bundle's), not as
    Python values, where ``true``, ``1`` and ``1.0`` are equal (:func:`codec.same_json`); an
    ``input``'s key order counts too (:func:`_same_input`)."""
    return len(stored) == len(imported) and all(
        (a.version, a.topic) == (b.version, b.topic)
        and codec.same_json(a.state, b.state)
        and _same_input(a.state, b.state)
        for a, b in zip(stored, imported, strict=True)
    )


def _same_input(one: bytes, other: bytes) -> bool:
    """Whether two states (equal but for key order) hold their ``input`` (a flow's, a
    decision's) in the same key order: a replay compares inputs byte for byte, since their
    order is what the code, a model, reads (ADR 0002, "key order"), so a bundle differing there
    replays otherwise than the execution in the log and is not "already in the log"."""
    first, second = msgspec.json.decode(one), msgspec.json.decode(other)
    if not isinstance(first, dict) or not isinstance(second, dict):
        return True
    return msgspec.json.encode(first.get("input")) == msgspec.json.encode(second.get("input"))


def _as_uuid(execution_id: UUID | str) -> UUID:
    if isinstance(execution_id, UUID):
        return execution_id
    try:
        return UUID(str(execution_id))
    except ValueError:
        raise ExecutionNotFoundError(
            f"{execution_id!r} is not an execution id (expected a whole UUID, such as "
            "'3f2b5c1e-8d4a-4c7e-9b1a-2f6d0e9c4b7a' printed by `loom run`)"
        ) from None


def _imported_row(execution_id: UUID, exported_at: str) -> Row:
    """The row of :class:`Imported` for an execution imported now, as the mapper stores it."""
    event = Imported(
        originator_id=imported_stream(execution_id),
        originator_version=1,
        timestamp=datetime.now(UTC),
        execution_id=str(execution_id),
        exported_at=exported_at,
    )
    stored = MsgspecMapper().to_stored_event(event)
    return Row(stream=event.originator_id, version=1, topic=stored.topic, state=stored.state)
