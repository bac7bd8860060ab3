"""An execution of a flow: one event stream in the log.

Why an aggregate: the stream's version numbers are the log's optimistic lock. Two
workers that load the same execution and both try to append the next event collide on
``(originator_id, originator_version)``; exactly one wins. That is the whole of loom's
"exactly once" story for resume, and it costs no extra table.

Every event class names an explicit, stable ``TOPIC``: the stored topic never depends on the
Python module path, so moving or renaming a class cannot orphan stored events. They are
registered in loom's closed set of readable topics (:mod:`loom_runtime.storage.topics`), so a stored
topic is looked up, never imported; an alias, if a topic itself must ever change, goes there.

Values (inputs, decision values, outputs) are held as ``msgspec.Raw``: the exact JSON bytes
that were stored. They are decoded on demand, typed by whoever reads them. Each event lists
its identifier fields in ``IDENTIFIERS`` (a decision key is how a replay finds its value):
the mapper never redacts those, and refuses one that holds a secret (ADR 0012).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal, cast
from uuid import UUID

import msgspec

from loom_runtime.errors import ExecutionNotFoundError, LabelError, LogCorruptError
from loom_runtime.labels import NO_LABELS, Labels
from loom_runtime.log import Event, Row
from loom_runtime.storable import storable_text
from loom_runtime.storage.domain import (
    Aggregate,
    CanMutateProtocol,
    OriginatorIDError,
    OriginatorVersionError,
)
from loom_runtime.storage.topics import register_aggregate
from loom_runtime.stream import LogEvent, stream_id

_TOPIC = "loom.execution"


Origin = Literal["inherited", "override"]
"""Where a fork's decision came from (ADR 0027)."""


class Decision(msgspec.Struct, frozen=True, gc=False):
    """One recorded decision, as a replay looks it up by its occurrence key.

    Exactly one of ``value`` and ``error_type`` is set: a ``compute`` that raised is a recorded
    outcome too, so a replay raises where the live run raised instead of computing again.

    Untracked by the garbage collector (``gc=False``): its fields are text and JSON bytes, so
    it can be in no reference cycle, and an execution holds one per decision (see
    :class:`~loom_runtime.log.Row`).
    """

    key: str
    kind: str | None
    input: msgspec.Raw
    value: msgspec.Raw | None = None
    error_type: str | None = None
    message: str | None = None
    meta: msgspec.Raw | None = None
    """What was measured while deciding (a model's name, latency, token usage, the attempts a
    retry made), as JSON: shown by audits, never compared by a replay."""
    origin: Origin | None = None
    """In a fork (ADR 0027): ``"inherited"`` from the parent, or ``"override"`` (the value the
    fork was told to use); None for a decision this execution computed."""


class Reopening(msgspec.Struct, frozen=True, kw_only=True):
    """A failure that a worker reopened (ADR 0026): what the flow had raised, the failed
    decisions dropped to be computed again, and who reopened it."""

    error_type: str
    message: str
    dropped: tuple[str, ...]
    worker: str


class Execution(Aggregate):
    """The event-sourced state of one run of a flow."""

    TOPIC = _TOPIC

    class Created(Aggregate.Created):
        """The flow was started with this input, by this code, having seen the log up to here."""

        TOPIC = f"{_TOPIC}.Created"
        IDENTIFIERS = (
            *("flow", "code_version", "parent_id"),
            *("tenant", "user", "session", "tags", "worker", "started_by"),
        )
        flow: str
        code_version: str
        input: msgspec.Raw
        log_position: int
        parent_id: UUID | None = None
        """The execution this one was forked from (ADR 0027); None for a run."""
        forked_at: int | None = None
        """How many of the parent's decisions, in recorded order, the fork took."""
        tenant: str | None = None
        """Who and what the execution ran for (ADR 0034): absent from the stored event when
        not given, so an execution without labels is stored as it was before they existed.
        Identifiers: never redacted (erasure and filters name them as given)."""
        user: str | None = None
        session: str | None = None
        tags: tuple[str, ...] | None = None
        """Sorted and unique; None (absent) rather than empty."""
        worker: str | None = None
        """The registered worker that started it (ADR 0040): its owner until another claims
        it. None when started outside a worker (and in logs written before workers existed)."""
        started_by: UUID | None = None
        """The execution one of whose decisions started this one (a sub-agent: ``loom.run``
        inside a compute, ADR 0040 amended "sub-agents"); None (absent) otherwise, and in logs
        written before sub-agents were told apart. Not the decision's key: this event is
        sealed under the child's key, which does not seal a parent's key (ADR 0049)."""
        overrides: msgspec.Raw | None = None
        """A fork's overrides (ADR 0027), ``{key: value}`` as JSON, kept from its start: a fork
        interrupted before the flow asked an overridden key is resumed (or recovered) with the
        key still answered by its override. None (absent) for a run, and for a fork without."""

    class DecisionRecorded(Aggregate.Event):
        """A nondeterministic result, stored before the flow was allowed to see it."""

        TOPIC = f"{_TOPIC}.DecisionRecorded"
        IDENTIFIERS = ("key", "kind")
        key: str
        kind: str | None
        value: msgspec.Raw
        input: msgspec.Raw
        meta: msgspec.Raw | None = None
        origin: Origin | None = None

        def apply(self, aggregate: Any) -> None:
            _note(aggregate, recorded_decision(self), self.originator_version)

    class DecisionFailed(Aggregate.Event):
        """A decision's ``compute`` raised; ``error_type`` is ``module:qualname`` of the error."""

        TOPIC = f"{_TOPIC}.DecisionFailed"
        IDENTIFIERS = ("key", "kind", "error_type")
        key: str
        kind: str | None
        input: msgspec.Raw
        error_type: str
        message: str
        meta: msgspec.Raw | None = None
        origin: Origin | None = None

        def apply(self, aggregate: Any) -> None:
            _note(aggregate, failed_decision(self), self.originator_version)

    class Resumed(Aggregate.Event):
        """A worker claimed an unfinished execution; a second claimant of the same version loses.

        It changes no state but the owner: claiming *is* appending it, at the next version.
        """

        TOPIC = f"{_TOPIC}.Resumed"
        IDENTIFIERS = ("worker",)
        worker: str

        def apply(self, aggregate: Any) -> None:
            aggregate.owner = self.worker

    class Completed(Aggregate.Event):
        """The flow returned; ``output`` is the stored return value."""

        TOPIC = f"{_TOPIC}.Completed"
        output: msgspec.Raw

        def apply(self, aggregate: Any) -> None:
            aggregate.output = self.output

    class Failed(Aggregate.Event):
        """The flow raised; ``error_type`` is ``module:qualname`` of the exception."""

        TOPIC = f"{_TOPIC}.Failed"
        IDENTIFIERS = ("error_type",)
        error_type: str
        message: str

        def apply(self, aggregate: Any) -> None:
            aggregate.error = (self.error_type, self.message)

    class Reopened(Aggregate.Event):
        """A worker reopened the failed execution once its cause was fixed (ADR 0026): the
        failure and the ``dropped`` failed decisions are gone from the state, so they are
        computed again; every decision that succeeded stays. Appended at the next version, so
        of two workers reopening the same failure one wins and the other is refused."""

        TOPIC = f"{_TOPIC}.Reopened"
        IDENTIFIERS = ("worker", "dropped")
        worker: str
        dropped: tuple[str, ...]

        def apply(self, aggregate: Any) -> None:
            if aggregate.error is None:
                raise LogCorruptError(
                    f"event v{self.originator_version} of execution {self.originator_id} "
                    "reopens an execution that had not failed; run `loom verify`: the log "
                    "was edited"
                )
            error_type, message = aggregate.error
            aggregate.reopenings.append(
                Reopening(
                    error_type=error_type,
                    message=message,
                    dropped=self.dropped,
                    worker=self.worker,
                )
            )
            aggregate.error = None
            for key in self.dropped:
                aggregate.decisions.pop(key, None)
                aggregate.decision_versions.pop(key, None)
            aggregate.owner = self.worker

    def __init__(
        self,
        *,
        flow: str,
        code_version: str,
        input: msgspec.Raw,
        log_position: int,
        parent_id: UUID | None = None,
        forked_at: int | None = None,
        tenant: str | None = None,
        user: str | None = None,
        session: str | None = None,
        tags: tuple[str, ...] | None = None,
        worker: str | None = None,
        started_by: UUID | None = None,
        overrides: msgspec.Raw | None = None,
    ) -> None:
        self.flow = flow
        self.overrides = overrides
        self.started_by = started_by
        self.code_version = code_version
        self.input = input
        self.log_position = log_position
        self.parent_id = parent_id
        self.forked_at = forked_at
        self.labels = stored_labels(self.id, tenant=tenant, user=user, session=session, tags=tags)
        self.decisions: dict[str, Decision] = {}
        self.decision_versions: dict[str, int] = {}
        """The stream version of the event that recorded each decision, by key (kept in
        memory, never stored): how a decision's span finds its log position (ADR 0034)."""
        self.output: msgspec.Raw | None = None
        self.error: tuple[str, str] | None = None
        self.reopenings: list[Reopening] = []
        self.lost = False  # set when this worker may append no more: a lost race (never stored)
        self.appending = threading.RLock()
        """Held from an event's trigger to its append (never stored): a flow's threads record
        at once (a tool pool), and a thread switch between one's new version and its save let
        another's event take that version (ADR 0002, amended "threads record one at a
        time")."""
        self.owner = worker
        """The worker that started it or last claimed or reopened it (ADR 0040)."""
        self.sealer: Any = None
        """What seals its events before they are stored, when its log is encrypted (ADR
        0049): a :class:`~loom_runtime.sealing.ExecutionSealer`; never stored."""

    @classmethod
    def start(
        cls,
        *,
        id: UUID,
        flow: str,
        code_version: str,
        input: msgspec.Raw,
        log_position: int,
        parent_id: UUID | None = None,
        forked_at: int | None = None,
        labels: Labels = NO_LABELS,
        worker: str | None = None,
        started_by: UUID | None = None,
        overrides: msgspec.Raw | None = None,
    ) -> Execution:
        return cls._create(
            cls.Created,
            id=id,
            flow=flow,
            code_version=code_version,
            input=input,
            log_position=log_position,
            parent_id=parent_id,
            forked_at=forked_at,
            tenant=labels.tenant,
            user=labels.user,
            session=labels.session,
            tags=labels.tags or None,
            worker=worker,
            started_by=started_by,
            overrides=overrides,
        )

    def reset_to(self, stored: Execution) -> None:
        """Take the state of ``stored``, this execution as its events in the log rebuild it.

        After a failed save the log, not this process, says what was stored; events this
        process triggered that the log does not hold are dropped.
        """
        if stored.id != self.id:
            raise ValueError(f"cannot reset execution {self.id} to execution {stored.id}")
        self.collect_events()
        self.version = stored.version
        self.modified_on = stored.modified_on
        self.decisions = dict(stored.decisions)
        self.decision_versions = dict(stored.decision_versions)
        self.output = stored.output
        self.error = stored.error
        self.reopenings = list(stored.reopenings)
        self.owner = stored.owner

    @property
    def finished(self) -> bool:
        return self.output is not None or self.error is not None

    def record_decision(
        self,
        *,
        key: str,
        kind: str | None,
        value: msgspec.Raw,
        input: msgspec.Raw,
        meta: msgspec.Raw | None = None,
        origin: Origin | None = None,
    ) -> None:
        self.trigger_event(
            self.DecisionRecorded,
            key=key,
            kind=kind,
            value=value,
            input=input,
            meta=meta,
            origin=origin,
        )

    def inherit(self, decision: Decision) -> None:
        """Take a parent's decision as this fork's own event, marked ``inherited``: a fork
        replays, exports and imports on its own, without its parent."""
        if decision.error_type is None:
            self.record_decision(
                key=decision.key,
                kind=decision.kind,
                value=decision.value or msgspec.Raw(b"null"),
                input=decision.input,
                meta=decision.meta,
                origin="inherited",
            )
        else:
            self.trigger_event(
                self.DecisionFailed,
                key=decision.key,
                kind=decision.kind,
                input=decision.input,
                error_type=decision.error_type,
                message=decision.message or "",
                meta=decision.meta,
                origin="inherited",
            )

    def record_failure(
        self,
        *,
        key: str,
        kind: str | None,
        input: msgspec.Raw,
        error: BaseException,
        meta: msgspec.Raw | None = None,
    ) -> None:
        self.trigger_event(
            self.DecisionFailed,
            key=key,
            kind=kind,
            input=input,
            error_type=error_type_of(error),
            message=error_message_of(error),
            meta=meta,
        )

    def claim(self, *, worker: str) -> None:
        self.trigger_event(self.Resumed, worker=worker)

    def reopen(self, *, worker: str) -> None:
        """Drop the failure, every failed decision and every decision recorded after the first
        of them, to compute them again (ADR 0026, amended "reopened after").

        After: a flow that caught a failure and went on asked later decisions with what the
        failure left it (no hits); kept, they would be asked again with what the retried one
        returns, a changed input on every reopening, or answer stale without an input."""
        versions = self.decision_versions
        failed = [versions[k] for k, d in self.decisions.items() if d.error_type is not None]
        first = min(failed, default=None)
        dropped = (
            ()
            if first is None
            else tuple(
                k for k in sorted(self.decisions, key=versions.__getitem__) if versions[k] >= first
            )
        )
        self.trigger_event(self.Reopened, worker=worker, dropped=dropped)

    def complete(self, *, output: msgspec.Raw) -> None:
        self.trigger_event(self.Completed, output=output)

    def fail(self, *, error: BaseException) -> None:
        self.trigger_event(
            self.Failed, error_type=error_type_of(error), message=error_message_of(error)
        )


def recorded_decision(fields: Any) -> Decision:
    """The :class:`Decision` a ``DecisionRecorded`` holds: from the event, or from its stored
    fields as the mapper decodes them (:func:`project_rows`), which carry the same names."""
    # Positional, in Decision's field order: a replay builds one per recorded decision, and
    # keywords cost a lookup of each name.
    return Decision(
        fields.key, fields.kind, fields.input, fields.value, None, None, fields.meta, fields.origin
    )


def failed_decision(fields: Any) -> Decision:
    """The :class:`Decision` a ``DecisionFailed`` holds (as :func:`recorded_decision`)."""
    return Decision(
        fields.key,
        fields.kind,
        fields.input,
        None,
        fields.error_type,
        fields.message,
        fields.meta,
        fields.origin,
    )


def _note(execution: Execution, decision: Decision, version: int) -> None:
    execution.decisions[decision.key] = decision
    execution.decision_versions[decision.key] = version


def stored_labels(
    execution_id: UUID,
    *,
    tenant: str | None,
    user: str | None,
    session: str | None,
    tags: tuple[str, ...] | None,
) -> Labels:
    """The labels a start event holds, checked again: a stored row is untrusted input (ADR
    0018), and a label loom would have refused is :class:`LogCorruptError`, not a
    :class:`LabelError` blaming the caller."""
    try:
        return Labels(tenant=tenant, user=user, session=session, tags=tags or ())
    except LabelError as exc:
        raise LogCorruptError(
            f"execution {execution_id} was stored with a label loom never writes ({exc}); "
            "run `loom verify`: the log was edited"
        ) from exc


def error_type_of(error: BaseException) -> str:
    """``module:qualname`` of an exception's class: how failures are named in the log."""
    cls = type(error)
    return storable_text(f"{cls.__module__}:{cls.__qualname__}")


def error_message_of(error: BaseException) -> str:
    """``str(error)`` as the log records it: a NUL or a lone surrogate in it is escaped
    (:func:`~loom_runtime.storable.storable_text`), because a failure that cannot be recorded
    would leave the execution neither failed nor resumable; and a URL it quotes is stored as
    a request's URL is, without its userinfo and credential query parameters
    (:func:`~loom_runtime.http_request.url_without_credentials`): an HTTP client's error names
    the URL it failed on, ``?key=...`` included, which no pattern of a redactor knows."""
    return stored_message(described(error))


GROUP_DEPTH: Final = 8
"""How deep :func:`described` names, and :func:`group_members` keeps, the errors of groups
inside groups."""


GROUP_NAMED: Final = 20
"""How many errors of a group (nested ones counted) a failure's message names before
``... N more``: a fan-out of thousands would otherwise store a message of megabytes."""

GROUP_KEPT: Final = 1_000
"""The most errors (nested ones counted) a failure's meta keeps to rebuild a group on replay
(:func:`group_members`); a larger group keeps none and replays as ``RecordedComputeError``."""


def described(error: BaseException) -> str:
    """:func:`printed`, and for an exception group (``asyncio.TaskGroup``'s), each error inside
    it by type and message, in brackets, nested groups likewise (``GROUP_DEPTH`` deep, the
    first ``GROUP_NAMED`` errors, then how many more).

    A group's own message ("unhandled errors in a TaskGroup (1 sub-exception)") says nothing
    of what failed: stored alone, a task raising ``KeyError`` where it had raised
    ``ValueError`` replayed identical, and the audit could not say what failed (ADR 0002)."""
    return _described(error, 0, [GROUP_NAMED])


def _described(error: BaseException, depth: int, budget: list[int]) -> str:
    text = printed(error)
    if not isinstance(error, BaseExceptionGroup):
        return text
    if depth >= GROUP_DEPTH:
        return f"{text} [...]"
    named = []
    for at, item in enumerate(error.exceptions):
        if budget[0] <= 0:
            named.append(f"... {len(error.exceptions) - at} more")
            break
        budget[0] -= 1
        named.append(f"{error_type_of(item)}: {_described(item, depth + 1, budget)}")
    return f"{text} [{'; '.join(named)}]"


def group_members(group: BaseExceptionGroup[Any]) -> dict[str, object] | None:
    """An exception group as a failure's meta keeps it, so a replay rebuilds it with its
    errors (ADR 0002, amended): its own ``message`` and each error's type and message (as
    :func:`error_message_of` stores a message, without the brackets of a nested group, which
    is kept as a member of its own), ``GROUP_DEPTH`` deep; None for a group of more than
    ``GROUP_KEPT`` errors, nested ones counted (kept whole or not at all: a group rebuilt with
    some of its errors would take another path in an ``except*``)."""
    budget = [GROUP_KEPT]
    members = _members(group, 0, budget)
    return None if members is None else {"message": stored_message(group.message), **members}


def _members(
    group: BaseExceptionGroup[Any], depth: int, budget: list[int]
) -> dict[str, object] | None:
    budget[0] -= len(group.exceptions)
    if budget[0] < 0:
        return None
    members: list[dict[str, object]] = []
    for error in group.exceptions:
        member: dict[str, object] = {"type": error_type_of(error)}
        if isinstance(error, BaseExceptionGroup) and depth + 1 < GROUP_DEPTH:
            nested = _members(error, depth + 1, budget)
            if nested is None:
                return None
            member |= {"message": stored_message(error.message), **nested}
        else:
            member["message"] = stored_message(printed(error))
        members.append(member)
    return {"exceptions": members}


def stored_message(text: str) -> str:
    """An error's text as the log stores it (:func:`error_message_of`): storable, and any
    URL in it without its credentials."""
    from loom_runtime.http_request import urls_without_credentials

    return storable_text(urls_without_credentials(text))


UNPRINTABLE: Final = "<exception str() failed>"
"""What :func:`printed` gives for an exception whose ``__str__`` raises: Python's own words
for it in a traceback."""


def printed(error: BaseException) -> str:
    """``str(error)``, or :data:`UNPRINTABLE` when its ``__str__`` raises: an exception that
    cannot print itself is still a failure to record (and to rebuild), never a second error
    replacing the one the flow or its compute raised."""
    try:
        return str(error)
    except Exception:
        return UNPRINTABLE


register_aggregate(Execution)


FORGET_LOG = stream_id("loom:forget-log")
"""The one stream of forget events (ADR 0049): every erasure, in order."""


class Forgotten(LogEvent):
    """An erasure: the subjects whose data keys were destroyed, how many stored events each
    key sealed, who erased them and why (ADR 0049). Never content: what was erased is named by
    its subject (``execution:<uuid>``), which is an id, and its labels stay in the log."""

    TOPIC = "loom.forget"
    IDENTIFIERS = ("subjects", "events", "by")
    subjects: tuple[str, ...]
    events: tuple[int, ...]
    """For each subject (same order), how many of its stored events held sealed fields."""
    by: str
    reason: str


class Imported(LogEvent):
    """That an execution came from a bundle (``Loom.import_bundle``), stored in the same
    transaction as its rows, in a stream of its own (:func:`imported_stream`): the execution's
    own events stay exactly the exporting log's. Its ``log_position`` is that log's, so this
    log's corpus at that position is not what it saw (ADR 0013, amended "imported")."""

    TOPIC = "loom.execution.imported"
    IDENTIFIERS = ("execution_id",)
    execution_id: str
    exported_at: str
    """When the bundle was exported (the exporting log's clock), as the bundle says."""


def imported_stream(execution_id: UUID) -> UUID:
    """The stream that says execution ``execution_id`` was imported (one event, or none)."""
    return stream_id(f"loom:imported:{execution_id}")


EXECUTION_EVENT_TYPES: tuple[type[Any], ...] = (
    Execution.Created,
    Execution.DecisionRecorded,
    Execution.DecisionFailed,
    Execution.Resumed,
    Execution.Completed,
    Execution.Failed,
    Execution.Reopened,
)

EXECUTION_TOPICS: tuple[str, ...] = tuple(cls.TOPIC for cls in EXECUTION_EVENT_TYPES)


def project_execution(execution: Execution | None, events: Iterable[Event]) -> Execution | None:
    """Apply ``events`` in order: ``project_execution(None, log.events(id))`` loads one.

    The events come from a log or a bundle, which anyone with access can edit, so they are
    checked as an execution's stream (execution events only, one ``Created`` first, versions
    in sequence) and a stream that is not one is a :class:`LogCorruptError`, never
    eventsourcing's own ``OriginatorVersionError``/``OriginatorIDError``.

    Checked with a concrete ``isinstance``: asserting a runtime-checkable Protocol per event
    (as eventsourcing's default projector does) costs more than the rest of a replay.
    """
    for event in events:
        if execution is None and not isinstance(event, EXECUTION_EVENT_TYPES):
            # Another kind of stream (a memory key's, a corpus's): no execution has this id.
            # Called an edited log, it sent an operator to `loom verify`, which said ok.
            raise ExecutionNotFoundError(
                f"stream {event.originator_id} is not an execution: it begins with a "
                f"{type(event).__qualname__} (no execution has this id)"
            )
        if not isinstance(event, EXECUTION_EVENT_TYPES) or (
            isinstance(event, Execution.Created) != (execution is None)
        ):
            raise LogCorruptError(
                f"event v{event.originator_version} of stream {event.originator_id} is a "
                f"{type(event).__qualname__}, which cannot come "
                f"{'first in' if execution is None else 'there in'} an execution's stream; "
                "run `loom verify`: the log was edited"
            )
        try:
            execution = cast("CanMutateProtocol[Execution]", event).mutate(execution)
        except (OriginatorVersionError, OriginatorIDError) as exc:
            raise _out_of_sequence(
                event.originator_version, event.originator_id, type(exc).__name__
            ) from exc
    return execution


def _out_of_sequence(version: int, stream: UUID, check: str) -> LogCorruptError:
    return LogCorruptError(
        f"event v{version} of execution {stream} is out of sequence ({check}); run `loom "
        "verify`: the log was edited"
    )


_DECISIONS: dict[str, tuple[type, Callable[[Any], Decision]]] = {
    Execution.DecisionRecorded.TOPIC: (Execution.DecisionRecorded, recorded_decision),
    Execution.DecisionFailed.TOPIC: (Execution.DecisionFailed, failed_decision),
}
"""The topics :func:`project_rows` applies from their decoded fields, with no event built:
each one's class and how its fields become a :class:`Decision`."""


def project_rows(rows: Iterable[Row]) -> Execution | None:
    """The execution stored ``rows`` rebuild (a log's :meth:`~loom_runtime.log.EventLog.rows`,
    a bundle's): the same state, checks and errors as ``project_execution(None, events)`` of
    the events they hold, without building an event or running eventsourcing's ``mutate`` for
    each decision.

    A replay reads every decision of an execution, and most of the cost of reading one was
    the objects in between: the row, the event, the aggregate's generic checks. A decision's
    row here is decoded typed (upcast, and refused as corrupt, by the mapper exactly as for
    an event), checked to be the stream's next version, and noted as its
    :class:`Decision`; the version and time it leaves are set on the execution before any
    other event applies and at the end. Every other event (the start, the end, a claim or a
    reopening: a few per execution) is applied as an event, by :func:`project_execution`.

    A decision's state goes straight to its class's current decoder; only a row that does not
    decode as the current version (an old one to upcast, or a corrupt one) takes the mapper's
    :func:`~loom_runtime.storage.mapper.decode_state`, which upcasts it or raises exactly
    what it raises for an event (ADR 0043).
    """
    from loom_runtime.storage.mapper import current_decoder, decode_row, decode_state

    applied = {topic: (build, *current_decoder(cls)) for topic, (cls, build) in _DECISIONS.items()}
    # What a row's topic is looked up in: nothing until the first event made the execution
    # (a decision cannot come first), then ``applied``. Swapped once, not tested per row.
    table: dict[str, tuple[Callable[[Any], Decision], msgspec.json.Decoder[Any], int]] = {}
    execution: Execution | None = None
    version = 0
    last = None  # the fields of the last decision applied since the last event: its timestamp
    # The execution's two maps, held here while decisions are applied (per row, every name
    # looked up on the execution was a visible share); taken again after each event, which
    # may replace them.
    decisions: dict[str, Decision] = {}
    versions: dict[str, int] = {}
    for row in rows:
        decision = table.get(row.topic)
        if decision is None:
            if last is not None and execution is not None:
                execution.version, execution.modified_on = version, last.timestamp
            # One event applied always leaves an execution (or raises).
            execution = cast("Execution", project_execution(execution, (decode_row(row),)))
            stream, version, last = execution.id, execution.version, None
            decisions, versions = execution.decisions, execution.decision_versions
            table = applied
            continue
        build, decoder, current = decision
        try:
            fields = decoder.decode(row.state)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError):
            # TypeError: no state at all (a row edited to NULL)
            fields = None  # decode_state below raises the LogCorruptError (or upcasts)
        if fields is None or fields.class_version != current:
            _, fields = decode_state(
                stream=row.stream, version=row.version, topic=row.topic, state=row.state
            )
        if row.stream is not stream and row.stream != stream:
            raise _out_of_sequence(row.version, row.stream, "OriginatorIDError")
        version += 1
        if row.version != version:
            raise _out_of_sequence(row.version, row.stream, "OriginatorVersionError")
        key = fields.key
        decisions[key] = build(fields)
        versions[key] = version
        last = fields
    if last is not None and execution is not None:
        execution.version, execution.modified_on = version, last.timestamp
    return execution
