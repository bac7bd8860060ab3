"""The ``ctx`` a flow receives: ``decide`` and the recorded clock, uuid and random built on it.

A flow never touches the log itself. Every nondeterministic result goes through
``ctx.decide(key, compute)``, and *where the answer comes from* is a :class:`DecisionSource`:

* :class:`Recorder` (a live run or a resume): answer from the log when the key was already
  recorded (resume), else run ``compute``, append the result durably, and return the decoded
  round trip of what was stored, so live code sees exactly the types a replay will see.
* ``Replayer`` (in :mod:`loom_runtime.replay`): answer from the log only; ``compute`` is
  never called and nothing is appended.

Matching is by key, not by position (ADR 0002). The n-th use of the same key within one
execution is ``key#n`` (the first is plain ``key``), numbered when ``decide`` is *called*
(program order), not when it completes, so ``asyncio.gather`` replays whatever order its
computations finish in.

A value that is complete only after the caller has started using it (an HTTP response body
read as it streams) is an :class:`OpenDecision`: its key is numbered and looked up when the
call is made, and its value stored once, when it is complete (ADR 0024).

While a flow body runs, its context is :func:`current_context` (a ``ContextVar``), so code
the flow calls without passing ``ctx`` (an HTTP transport) can record into it.

A decision is recorded once, by the outermost call (ADR 0002, amended 2026-12-05 "inside a
decision"): while a decision's ``compute`` (or a tool's body, or an MCP call) runs live, the
recorded calls it makes (a request through a recording transport, another tool, another
``decide``) run as plain calls. A replay answers the outer decision and never runs its body,
so an inner record would be a decision no replay asks for.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import functools
import inspect
import itertools
import queue
import random
import re
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, Final, NamedTuple, Protocol, TypeGuard, TypeVar, overload
from uuid import UUID

import msgspec

from loom_runtime import codec
from loom_runtime.backoff import Attempt, Backoff, retry_after, transient
from loom_runtime.diff import diff
from loom_runtime.driver import Pending, Steps, adrive, drive
from loom_runtime.errors import (
    DecisionAfterEndError,
    DecisionArgumentError,
    DecisionInputChangedError,
    DecisionKeyError,
    DecisionKindChangedError,
    DecisionTypeChangedError,
    ExecutionConflictError,
    LogWriteError,
    LoomError,
    NotSerialisableError,
    OverrideTypeError,
    ReadPastRecordingError,
    RecordedComputeError,
    ReplayDivergence,
    SecretRefusedError,
    StreamConflictError,
)
from loom_runtime.execution import (
    GROUP_DEPTH,
    GROUP_KEPT,
    Decision,
    Execution,
    error_message_of,
    error_type_of,
    group_members,
    printed,
    project_execution,
)
from loom_runtime.log import EventLog, Precondition
from loom_runtime.recorded_order import (
    CANCELLED_AFTER,
    AnswerSpacing,
    RecordedOrder,
    bounded_wait,
    meta_number,
    spaced_meta,
)
from loom_runtime.redaction import Redactor, as_stored, marked_in_a_run
from loom_runtime.storable import is_unicode
from loom_runtime.timestamps import UtcTimestamp

T = TypeVar("T")

_NULL = msgspec.Raw(b"null")
_UNANSWERED: Any = object()
_OPEN_PRUNED_AT: Final = 64
"""How many opened decisions a run keeps before it drops those already stored: a stored one
holds its value (a whole model response), which a long run must not keep to its end."""
"""What :meth:`_Context._answer` returns when the source has no answer (compute runs): no
decoded value can be this object."""


class Decide(Protocol):
    """A sync flow's ``ctx.decide``, as a value: helpers that record decisions take one.

    Declared as a protocol so a helper (a knowledge base, a tiered memory) can require "a
    decide" without depending on :class:`FlowContext`.
    """

    def __call__(
        self,
        key: str,
        compute: Callable[[], T],
        *,
        input: object = None,
        type: Any = Any,
        kind: str | None = None,
    ) -> T: ...


class Slot(msgspec.Struct, frozen=True, gc=False):
    """One ``decide`` call: its occurrence key, its kind and its recorded-form input.

    Untracked by the garbage collector (``gc=False``): its fields are text and JSON bytes, so
    it can be in no reference cycle, and every ``decide`` makes one.
    """

    key: str
    kind: str | None
    input: msgspec.Raw
    matched: Decision | None = None
    """The recorded decision numbering found at this key with this very input (None: none
    found, or not looked for). A replay's lookup answers with it rather than finding and
    comparing it a second time; every other source looks the key up itself."""


class DecisionSource(Protocol):
    """Where a decision's value comes from: the log, a live computation, or both.

    ``redactor`` is applied to each decision's input as it is encoded, so the input compared
    with the recording has the same ``[REDACTED:...]`` markers the recording has (ADR 0012).
    """

    redactor: Redactor | None

    @property
    def recorded(self) -> Mapping[str, Decision]:
        """The decisions already recorded, by occurrence key (empty for a new execution)."""
        ...

    def lookup(self, slot: Slot) -> Decision | None:
        """The recorded decision for ``slot`` or ``None`` to compute live (may raise)."""
        ...

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        """Store a freshly computed value (or not) and return what a reader will see.

        ``meta`` is what was measured while computing it (:func:`encode_meta`).
        """
        ...

    def record_failure(
        self, slot: Slot, error: BaseException, *, meta: msgspec.Raw | None = None
    ) -> None:
        """Store that ``compute`` raised ``error`` (or not)."""
        ...


class _Unrecorded:
    """The source of a call made inside one of the flow's decisions computed live (see
    :func:`computing`): it is a part of that decision, so nothing is looked up or stored, but
    its value is handed back as a recorded one would be (the decoded round trip, ``type=``
    applied, an unstorable value refused), and ``retry=`` still retries: a helper behaves
    the same whether a tool calls it or the flow does. Nothing is redacted: the value is
    never stored, and the outer decision's value is redacted when it is."""

    redactor: Redactor | None = None

    @property
    def recorded(self) -> Mapping[str, Decision]:
        return {}

    def lookup(self, slot: Slot) -> Decision | None:
        return None

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        return codec.round_trip(value, path=f"decision {slot.key!r}", type=type)[1]

    def record_failure(
        self, slot: Slot, error: BaseException, *, meta: msgspec.Raw | None = None
    ) -> None:
        return None


_PART: Final = _Unrecorded()


class Recorder:
    """A live run or a resume: recorded keys answer from the log, the rest run and append.

    A fork's recorder also holds its ``overrides`` (ADR 0027): a key the flow asks that is
    not recorded yet and has an override is answered by it, stored as this execution's
    decision (``origin="override"``) with the input it was asked with, whatever that input.

    Given ``positions``, it notes there the log position of each decision it stores, by key:
    what a decision's span reports (ADR 0034); without, it notes nothing. Given ``spacing``
    (an async flow's), each answer's meta says how many loop passes after the one before it
    it came, when a replay must not hand it out sooner (ADR 0002, amended "answers spaced").
    """

    def __init__(
        self,
        log: EventLog,
        execution: Execution,
        *,
        overrides: Mapping[str, msgspec.Raw] | None = None,
        positions: dict[str, int] | None = None,
        spacing: AnswerSpacing | None = None,
    ) -> None:
        self._log = log
        self._execution = execution
        self._overrides = overrides or {}
        self._positions = positions
        self._spacing = spacing
        self.redactor = log.redactor
        self._asked: set[str] = set()
        """The recorded keys this run was answered from (see :meth:`never_asked`)."""

    @property
    def recorded(self) -> Mapping[str, Decision]:
        return self._execution.decisions

    def never_asked(self, recorded: Iterable[str]) -> list[str]:
        """Of ``recorded`` (the keys recorded when this run began), those it never asked,
        a fork's inherited ones aside (ADR 0027, "paths"): a resume by code that renamed a
        key leaves them, and the execution's replay will report them unused."""
        decisions = self._execution.decisions
        return [
            key
            for key in recorded
            if key not in self._asked and key in decisions and decisions[key].origin != "inherited"
        ]

    def lookup(self, slot: Slot) -> Decision | None:
        decision = self._execution.decisions.get(slot.key)
        if decision is None:
            self._refuse_after_end(slot.key)  # before anything is computed for it
        else:
            self._asked.add(slot.key)
        if decision is None and slot.key in self._overrides:
            with self._execution.appending:
                self._refuse_after_end(slot.key)  # again: another thread may have ended it
                self._execution.record_decision(
                    key=slot.key,
                    kind=slot.kind,
                    value=self._overrides[slot.key],
                    input=slot.input,
                    origin="override",
                )
                self._save(slot.key)
                return self._execution.decisions[slot.key]
        if decision is not None and decision.input != slot.input:
            # Resuming with code that asks a recorded key differently would splice two
            # different runs into one execution: refuse rather than guess.
            raise DecisionInputChangedError(
                key=slot.key,
                diff=diff(decision.input, slot.input, label=f"input of {slot.key}"),
            )
        if decision is not None and decision.kind != slot.kind:  # as another kind: the same
            raise DecisionKindChangedError(key=slot.key, recorded=decision.kind, asked=slot.kind)
        return decision

    def _refuse_after_end(self, key: str) -> None:
        """Nothing is stored after the execution's end event (see DecisionAfterEndError), and
        nothing computed for a run another worker took over: once its append was refused
        (:func:`save`), each later decision's compute would run its side effects again and
        only its append be refused, in a flow that catches errors around ``decide`` (ADR
        0040, amended: only the decision open at the takeover is computed twice)."""
        if self._execution.finished:
            raise DecisionAfterEndError(execution_id=self._execution.id, key=key)
        if self._execution.lost:
            raise ExecutionConflictError(
                f"execution {self._execution.id} is owned by another worker since this "
                "worker's append was refused, or its log could not be re-read after a failed "
                f"write: decision {key!r} is not computed here"
            )

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        self._refuse_after_end(slot.key)
        # Redacted before it is stored and decoded back: the flow sees what a replay will see.
        raw, decoded = codec.round_trip(
            value, path=f"decision {slot.key!r}", type=type, redactor=self.redactor
        )
        if self._spacing is not None:
            meta = self._spaced(self._spacing, slot.key, meta)
        with self._execution.appending:
            self._refuse_after_end(slot.key)  # again: another thread may have ended it since
            self._execution.record_decision(
                key=slot.key, kind=slot.kind, value=raw, input=slot.input, meta=meta
            )
            self._save(slot.key)
        return decoded

    def record_failure(
        self, slot: Slot, error: BaseException, *, meta: msgspec.Raw | None = None
    ) -> None:
        """Store ``error`` as the decision's outcome. One whose message the log refuses (a
        secret under ``Redactor(mode="refuse")``) is not lost: the refusal is stored in its
        place and raised, as for a refused value, so the flow sees what its replay will
        (ADR 0026, amended "refused failures")."""
        passes = None if self._spacing is None else self._spacing.stamp(slot.key)
        try:
            self._append_failure(slot, error, _with_passes(meta, passes))
        except REFUSALS as refused:  # nothing was stored: the save put the execution back
            if isinstance(error, asyncio.CancelledError):
                # A cancellation raised with a secret in its message (stored after the flow
                # went on): it stays a cancellation, its message withheld, as a refusal raised
                # at the flow's next decision would be a failure the live run never saw.
                withheld = as_stored(self.redactor, error_message_of(error), path="message")
                cancelled = asyncio.CancelledError(withheld)
                self._append_failure(slot, cancelled, _with_passes(meta, passes))
                return
            self._append_failure(slot, refused, _with_passes(None, passes))
            raise

    def _append_failure(self, slot: Slot, error: BaseException, meta: msgspec.Raw | None) -> None:
        with self._execution.appending:
            self._refuse_after_end(slot.key)
            self._execution.record_failure(
                key=slot.key, kind=slot.kind, input=slot.input, error=error, meta=meta
            )
            self._save(slot.key)

    @staticmethod
    def _spaced(spacing: AnswerSpacing, key: str, meta: msgspec.Raw | None) -> msgspec.Raw | None:
        """``meta`` of ``key``'s answer, with the passes since the answer before it when a
        replay needs them."""
        return _with_passes(meta, spacing.stamp(key))

    def _save(self, key: str) -> None:
        """Append the decision just triggered for ``key``; note its position if asked to."""
        stored = save(self._log, self._execution)
        if self._positions is not None:
            self._positions[key] = stored[-1]


def _with_passes(meta: msgspec.Raw | None, passes: int | None) -> msgspec.Raw | None:
    """``meta`` with the loop passes since the answer before (None: none to keep)."""
    return meta if passes is None else spaced_meta(meta, passes)


def save(
    log: EventLog, execution: Execution, *, precondition: Precondition | None = None
) -> list[int]:
    """Append the execution's pending events; a lost version race is a typed conflict.

    Losing is final for this worker: its in-memory version has moved past the refused event,
    so a later append could land *after* the winner's events. Every later save by it raises
    too, even if the flow swallowed the first conflict in an ``except Exception``.

    Any other failure (the mapper refusing the event, the database failing) must not leave
    the in-memory version ahead of the stream either: the next event would be stored past a
    gap and the execution could never be loaded again. So the execution is put back to what
    the log holds (the failed events were stored or not: the log, not this process, says
    which), and the failure is raised typed: a ``LoomError`` as it is, anything else as
    :class:`LogWriteError`. If the log cannot even be read, or it shows the execution claimed
    by another worker since (this one was taken for dead while paused), the worker stops
    appending to the execution, as after a lost race; resuming it later continues from what
    was stored.
    ``precondition``: what a keyless Loom's new execution must find in its first append
    (:func:`~loom_runtime.sealing.write_keyring`), or what a sealed one's must find in place
    of its own key's check (a fork's first append: its parent's key still live). Returns the
    positions of the appended events, in order.
    """
    if execution.lost:
        raise ExecutionConflictError(
            f"execution {execution.id} is owned by another worker since this worker's append "
            "was refused, or its log could not be re-read after a failed write; nothing more "
            "is appended by this worker"
        )
    try:
        sealer = execution.sealer
        if sealer is None:
            # A keyless Loom's new execution: refused if the log is encrypted (ADR 0049).
            return log.save(execution, precondition=precondition)
        # An encrypted log (ADR 0049): seal copies, then store; where the log can, the key is
        # checked live by the append's own transaction rather than by a read before it.
        if log.checks_preconditions:
            return log.save(
                _Sealing(execution, checked=True), precondition=precondition or sealer.precondition
            )
        return log.save(_Sealing(execution, checked=False))
    except StreamConflictError as exc:
        execution.lost = True
        raise ExecutionConflictError(
            f"execution {execution.id} was appended to by another worker first; this worker's "
            f"event (version {execution.version}) was refused, so the log holds no duplicate "
            "(a decision both computed did run twice). Reload the execution to see the "
            "winner's result."
        ) from exc
    except BaseException as exc:
        attempted = execution.version
        state = _reset_to_log(log, execution)
        if isinstance(exc, LoomError) or not isinstance(exc, Exception):
            raise
        raise LogWriteError(
            f"the log failed while storing event version {attempted} of execution "
            f"{execution.id} ({type(exc).__name__}: {exc}); {state}"
        ) from exc


class _Sealing:
    """An execution's pending events as the log stores them: their personal fields sealed
    under its data key. The execution itself keeps them clear."""

    def __init__(self, execution: Execution, *, checked: bool) -> None:
        self.execution = execution
        self.checked = checked
        """Whether the log checks the key in the append's transaction (else the sealer does)."""

    def collect_events(self) -> list[Any]:
        events = self.execution.collect_events()
        return self.execution.sealer.seal_events(events, checked=self.checked)


def _reset_to_log(log: EventLog, execution: Execution) -> str:
    """Make ``execution`` exactly what its stored events rebuild, or mark it lost; returns
    what happened, for the error message."""
    try:
        stored = project_execution(None, log.events(execution.id))
        if stored is not None and execution.sealer is not None:
            from loom_runtime.sealing import Opener

            stored = Opener(execution.sealer.keyring).execution(stored)
    except Exception:
        execution.lost = True
        return (
            "this worker appends nothing more to it (the log could not be re-read): resume it "
            "once the log is reachable"
        )
    if stored is None:
        execution.lost = True
        return "nothing of it was stored: run the flow again"
    if stored.owner != execution.owner:
        # Claimed by another worker meanwhile (this one was taken for dead), or this worker's
        # own claim was not stored: carrying on from the reloaded state would append after
        # the owner's claim, as if the log had not refused this worker (ADR 0040).
        execution.lost = True
        return (
            f"the log names {stored.owner!r} its owner, not this worker ({execution.owner!r}): "
            "this worker appends nothing more to it"
        )
    execution.reset_to(stored)
    return f"it was reloaded from the log at version {execution.version}"


class _Context:
    """What sync and async contexts share: key numbering and answering from a source."""

    def __init__(
        self,
        source: DecisionSource,
        *,
        execution_id: UUID,
        flow: str,
        order: RecordedOrder | None = None,
        naming: SubAgentNaming | None = None,
        replaying: bool | Callable[[], bool] = False,
        spacing: AnswerSpacing | None = None,
    ) -> None:
        self.execution_id = execution_id
        self.flow = flow
        self._replaying = replaying
        self._began = time.perf_counter()
        """When the flow began, about (this context is made as it starts): a cut's place in
        the run, live and on replay (:data:`CUT_AT`)."""
        self._spacing = spacing
        """A recording async flow's (its recorder's too): bound to the flow's loop as it
        starts, set aside while what the flow cancelled is stored."""
        """:attr:`replaying`, or what tells it, asked the first time it is read."""
        self._source = source
        self._order = order
        """The order recorded answers are handed out in (an async flow's replay or resume,
        :mod:`~loom_runtime.recorded_order`); None: each as it is asked."""
        self.naming = naming
        """What the sub-agents this run's decisions start are named by (:func:`sub_agent`);
        None in a replay, whose decisions computed live start executions of their own."""
        self.unattributed: list[str] = []
        """The first calls of a recorded kind made without a flow context while this body
        ran (:func:`note_unattributed`); ``unattributed_count`` counts them all."""
        self.unattributed_count = 0
        self.findings: list[ReplayDivergence] = []
        """What loom raised into the flow because the recording cannot answer what the code
        now asks (a value that no longer decodes, a read past a recorded response): a
        replay reports each whether or not the flow catches it (:func:`note_finding`)."""
        self.uncancelled: list[tuple[str, float]] = []
        """Each call recorded as cancelled that nothing cancelled again within its bound (a
        replay's divergence even when the flow catches what it then raises), and the bound."""
        self._open: list[OpenDecision] = []
        """Decisions opened by this run and not answered from the log (see
        :meth:`end_open_decisions`)."""
        self._in_flight: dict[asyncio.Task[Any], None] = {}
        """The tasks asking one of an async flow's decisions now (an ordered set: cancelled
        in the order they asked, :meth:`AsyncFlowContext.settle_in_flight`)."""
        self._cancellations: list[Callable[[], object]] = []
        """Calls the flow cancelled, each stored once the flow goes on (:meth:`_go_on`)."""
        self._seen: dict[str, int] = {}
        self._taken: set[str] = set()
        self._taken_in_order: list[str] = []
        """Keys taken in order and not yet in ``_taken``: only :meth:`_occurrence` reads
        ``_taken``, and adds these first. Listed, not added, on the in-order path every call
        of a replay takes: a set growing by every key of a long execution costs a replay
        several times a list's append (ADR 0048, replay2)."""
        self._taken_ahead = False  # see _occurrence
        self._by_input: dict[str, _Run] = {}
        """Per key, its recorded occurrences by input (see :meth:`_later_with_input`)."""
        # Numbering's lock is a queue holding one token: ``get`` takes it, or waits for it
        # as ``Lock.acquire`` waits (interruptibly, without a timeout), and ``put`` hands it
        # back. The same exclusion at half the cost: ``Lock.acquire`` parses a tuple and
        # keywords on every call, and a replay takes the lock once per decide (ADR 0043).
        numbering: queue.SimpleQueue[None] = queue.SimpleQueue()
        numbering.put(None)
        self._acquire, self._release = numbering.get, numbering.put

    @property
    def replaying(self) -> bool:
        """Whether this run is a replay (``Loom.replay``) of an execution recorded in this log,
        which appends nothing to it: a write the flow's body makes through loom (a memory's)
        is in the log already, from the run it replays, and is left out (ADR 0002, amended
        "replay writes nothing"). False for a bundle's replay and an imported execution's:
        their writes were made in another log."""
        if not isinstance(self._replaying, bool):  # two threads may both ask: same answer
            self._replaying = self._replaying()
        return self._replaying

    def _slot(self, key: str, input: object, kind: str | None) -> Slot:
        if self._cancellations:
            self._go_on()
        if not isinstance(key, str) or not key:
            raise DecisionKeyError(f"a decision key must be a non-empty str, not {key!r}")
        if not key.isascii() and not is_unicode(key):  # ASCII (most keys) has no surrogate
            raise DecisionKeyError(
                f"decision key {key!r} contains a lone surrogate, which cannot be stored; "
                "build keys from valid text (decode bytes with errors='replace' first)"
            )
        if kind is not None and (not isinstance(kind, str) or not is_unicode(kind)):
            raise DecisionKeyError(
                f"the kind of decision {key!r} must be a str of valid text or None, not {kind!r}"
            )
        # Most decisions have no input: no encoder, no redactor, and no call to find that out.
        raw_input = _NULL if input is None else self._input(key, input)
        # Threads a flow starts (a tool pool) number keys concurrently. Taken and released by
        # bound methods in ``try``/``finally``: a failure while numbering gives the token back.
        self._acquire()
        try:
            if self._taken_ahead or "#" in key:
                matched = None
                slot_key = self._occurrence(key, raw_input)
            else:
                # Nothing was taken ahead, so the next occurrence is free: it is the answer
                # when it was recorded with this input, or not recorded. Every call of a
                # replay or a resume whose code asks its keys in the recorded order, and every
                # call of a new run, ends here (in line: a replay makes one call per decide).
                below = self._seen.get(key, 0)
                slot_key = key if below == 0 else f"{key}#{below + 1}"
                matched = self._source.recorded.get(slot_key)
                if matched is None or matched.input == raw_input:
                    self._seen[key] = below + 1
                    self._taken_in_order.append(slot_key)
                else:
                    matched = None
                    slot_key = self._occurrence(key, raw_input)
        finally:
            self._release(None)
        if matched is None and self._spacing is not None:  # one a resume answers: no ask
            self._spacing.asked(slot_key)
        return Slot(slot_key, kind, raw_input, matched)

    def _input(self, key: str, input: object) -> msgspec.Raw:
        """``input`` (not None) as it is stored and compared: redacted by the source's redactor.

        A replay or resume asks mostly for inputs already recorded. When the plain encoding
        is byte for byte the recorded input of the occurrence this call most likely is, that
        recording is the answer: redaction is idempotent and the recorded bytes are its
        output, so redacting again (a walk over every string of a long conversation) would
        give the same bytes. Anything else takes the full, checked and redacted encoding.
        """
        likely = self._source.recorded.get(_numbered(key, self._seen.get(key, 0) + 1))
        if likely is not None and codec.encodes_to(input, likely.input):
            return likely.input
        path, redactor = f"input of {key!r}", self._source.redactor
        raw = codec.encode(input, path=path, redactor=redactor)
        if (
            likely is None
            or redactor is None
            or raw == likely.input
            or not marked_in_a_run(bytes(likely.input))
        ):
            return raw
        # Recorded before the redactor passed by base64 payloads and sealed texts, it may hold
        # a marker written into one (a chance key-shaped run): compared as it was stored then,
        # so an unchanged agent replays identical (ADR 0012, amended "older recordings").
        try:
            earlier = codec.encode(input, path=path, redactor=redactor.marking_payloads())
        except REFUSALS:  # keys that collide under the earlier rule: not the recorded input
            return raw
        return likely.input if earlier == likely.input else raw

    def _occurrence(self, key: str, raw_input: msgspec.Raw) -> str:
        """The occurrence key of this call of ``key``, taken: the first not yet taken, unless
        that one was recorded with another input and a later untaken one with this very input.

        Calls made one after another are numbered in program order, as always. Calls made at
        the same time from threads (a framework's tool pool) arrive in any order, so a replay
        or resume matches them to the recorded occurrences by input; a changed input still
        finds no match and diverges at its own number. ``_seen`` is the highest number below
        which every occurrence is taken, so numbering stays O(1) per call.

        ``_taken_ahead`` says whether an occurrence past some ``_seen`` may have been taken:
        only a key that itself holds ``#`` (a caller's own ``"k#2"``), a skipped occurrence
        or one matched out of order can take one. Until then ``_seen`` is not walked forward
        (a set lookup of a freshly built ``key#n`` per call, in every replay); the keys
        returned never depend on it, only how far the first loop has to look. Nor is the walk
        taken at all while nothing was taken ahead and the next occurrence is the one recorded
        with this input (or none was): that occurrence is free, and it is the answer, found by
        :meth:`_slot` before it calls this.
        """
        taken = self._taken
        if self._taken_in_order:
            taken.update(self._taken_in_order)
            self._taken_in_order.clear()
        below = self._seen.get(key, 0)
        recorded = self._source.recorded
        if "#" in key:
            self._taken_ahead = True
        occurrence = below + 1
        slot_key = _numbered(key, occurrence)
        while slot_key in taken:  # a caller's own "k#2", or an occurrence matched early
            occurrence += 1
            slot_key = _numbered(key, occurrence)
        first = recorded.get(slot_key)
        if first is not None and first.input != raw_input:
            later = self._later_with_input(key, occurrence, raw_input)
            if later is not None:
                ahead = _numbered(key, later)
                self._taken_ahead = True
                taken.add(ahead)
                return ahead  # taken out of order: _seen stays
        if occurrence == below + 1:  # the usual case: the next one in order
            below += 1
            while self._taken_ahead and _numbered(key, below + 1) in taken:
                below += 1  # occurrences matched out of order
        else:
            self._taken_ahead = True
        self._seen[key] = below
        taken.add(slot_key)
        return slot_key

    def _later_with_input(self, key: str, occurrence: int, raw_input: msgspec.Raw) -> int | None:
        """The first untaken occurrence of ``key`` after ``occurrence`` (recorded, untaken,
        with another input) recorded with ``raw_input``, among those recorded one after
        another from it; None when there is none.

        Looked up in an index of the run of occurrences recorded one after another that
        holds ``occurrence`` (:class:`_Run`): walking them on every call made a replay whose
        inputs all changed (a loop whose prompt changed, or a crafted bundle) quadratic in its
        decisions. A queue only loses occurrences that are taken, ``occurrence`` never moves
        back (it is the first untaken one), and a run is extended or begun only over
        occurrences no run covered, so every look costs O(1) amortised.
        """
        recorded = self._source.recorded
        run = self._by_input.get(key)
        if run is not None:
            run.extend(recorded, key)  # a resume records as it goes
        if run is None or occurrence > run.last:  # the first look, or one past a gap
            run = self._by_input[key] = _Run(recorded, key, first=occurrence)
        queue = run.queues.get(bytes(raw_input))
        while queue and (queue[0] <= occurrence or _numbered(key, queue[0]) in self._taken):
            queue.popleft()
        return queue.popleft() if queue else None

    def _answer(self, slot: Slot, type: Any) -> Any:
        """The source's answer for ``slot``, decoded, or :data:`_UNANSWERED` (compute it).

        A replay answers every ``decide`` here: an untyped value goes straight to codec's
        one untyped decoder, as :func:`~loom_runtime.codec.decode` would send it. A typed one
        that does not fit its type is :class:`DecisionTypeChangedError` naming the decision:
        the decoder's own error says what is missing, not where.
        """
        decision = self._source.lookup(slot)
        if decision is None:  # compute runs next: refuse a key the log would not store first
            if self._source.redactor is not None:  # (a replay never gets here: nothing to check)
                self._source.redactor.check_identifier(slot.key, path="key")
            return _UNANSWERED
        if decision.error_type is not None:
            raise rebuild_error(decision)
        value = decision.value or _NULL
        if type is Any:
            return codec.decode_untyped(value)
        try:
            return codec.decode(value, type=type)
        except msgspec.ValidationError as exc:  # the code's type changed, or the row did
            name = type.__qualname__ if isinstance(type, builtins.type) else repr(type)
            if decision.origin == "override":  # or the fork was given the wrong value
                raise OverrideTypeError(key=slot.key, type=name, problem=str(exc)) from exc
            changed = DecisionTypeChangedError(key=slot.key, type=name, problem=str(exc))
            self.findings.append(changed)  # reported even if the flow catches it
            raise changed from exc

    def computing_here(self) -> bool:
        """Whether the code running here is one of this flow's decisions computed live (its
        ``compute``, a tool's body) or may be the work of one opened and not yet settled (an
        :class:`OpenDecision` whose value is recorded later: a recorded HTTP call's, whose
        in-process service may run a flow of its own), not the flow's own code alone."""
        return _computing.get() is self or any(not held.settled for held in list(self._open))

    @property
    def redactor(self) -> Redactor | None:
        """The redactor this context's decisions are stored through (None: stored as given)."""
        return self._source.redactor

    def overridden(self, key: str) -> bool:
        """Whether the recorded decision at occurrence ``key`` is a fork's override (ADR
        0027): a value that does not fit it is the value given to the fork, not the log."""
        decision = self._source.recorded.get(key)
        return decision is not None and decision.origin == "override"

    def open_decision(
        self, key: str, *, input: object = None, kind: str | None = None, type: Any = Any
    ) -> OpenDecision:
        """A decision whose value is stored later, once, by the returned :class:`OpenDecision`.

        The key is numbered and looked up now, as ``decide`` does when it is called: a
        recorded value (or recorded failure, raised here) answers at once, a changed input is
        reported now. Otherwise the caller computes the value and hands it to
        :meth:`OpenDecision.record` (or its failure to :meth:`OpenDecision.fail`) when it is
        complete, whatever other decisions were made in between.

        Inside one of the flow's decisions computed live (:func:`computing`) it is a part of
        that decision: unanswered, and storing nothing.
        """
        if _computing.get() is self:
            part = Slot(key, kind, _NULL)
            return OpenDecision(_PART, part, type=type, recorded=False, value=None)
        slot = self._slot(key, input, kind)
        if self._order is not None:  # a caller that cannot wait for its recorded turn
            self._order.handed_out(slot.key)
        try:
            return self._opened(slot, type)
        except RecordedComputeError as recorded:
            if _raised_cancellation(recorded):  # as the call raised it: the flow's except
                raise _cancelled_again(recorded, slot.key) from None
            raise

    def open_decision_in_turn(
        self, key: str, *, input: object = None, kind: str | None = None, type: Any = Any
    ) -> Steps[OpenDecision]:
        """:meth:`open_decision` for a caller that awaits (an async transport's, tool's or
        MCP call): in a replay of an async flow, a recorded answer, or recorded failure, is
        handed out in its recorded turn (:mod:`~loom_runtime.recorded_order`), so calls made
        together finish in the order they finished live. A call recorded as cancelled waits
        unanswered first, for the flow's own timeout to cancel it again
        (:meth:`_recorded_failure`), and raises its recorded cancellation if nothing does."""
        if self._order is None or _computing.get() is self:
            try:
                return self.open_decision(key, input=input, kind=kind, type=type)
            except RecordedComputeError as recorded:
                yield from self._recorded_failure(key, recorded, None)
                raise
        slot = self._slot(key, input, kind)
        try:
            decision = self._opened(slot, type)
        except Exception as answered:
            yield from self._recorded_failure(slot.key, answered, self._order)
            if _raised_cancellation(answered):  # as the call raised it: the flow's except
                raise _cancelled_again(answered, slot.key) from None
            raise
        yield from self._in_turn(slot.key, decision.value if decision.recorded else _UNANSWERED)
        return decision

    def _opened(self, slot: Slot, type: Any) -> OpenDecision:
        value = self._answer(slot, type)
        if value is _UNANSWERED:
            decision = OpenDecision(
                self._source,
                slot,
                type=type,
                recorded=False,
                value=None,
                cancellations=self._cancellations,
                cancel_point=self._cancel_point,
            )
            self._acquire()  # threads of one flow open decisions at once
            try:
                if len(self._open) >= _OPEN_PRUNED_AT:  # keep only those still open
                    self._open = [kept for kept in self._open if not kept.settled]
                self._open.append(decision)
            finally:
                self._release(None)
            return decision
        return OpenDecision(self._source, slot, type=type, recorded=True, value=value)

    def _go_on(self) -> None:
        """Store the calls the flow cancelled so far: it went on after them (it asked another
        decision, or returned, or raised an ``Exception``), so it caught the cancellation
        (a timeout's fallback) and a replay must cancel them again. A run stopped by the
        cancellation itself never comes here: nothing is stored for the call, as for an
        interrupt, and a resume computes it again (ADR 0026). Threads of the flow each store
        them as they ask their next decision: each pending store is taken by one ``pop``
        (atomic), never by a look and then a pop another thread may have emptied the list
        between."""
        pending, spacing = self._cancellations, self._spacing
        while True:
            try:
                store = pending.pop(0)
            except IndexError:
                return
            if spacing is None:
                store()
                continue
            spacing.aside = True  # stored after the fact: no answer the flow was handed now
            try:
                store()
            finally:
                spacing.aside = False

    def end_open_decisions(self) -> None:
        """Store each decision still open as the flow ends, by its :attr:`OpenDecision.at_end`
        (a stream left open: what was read, marked incomplete), so that nothing of the
        execution is stored after its end event (what a later close would have written)."""
        self._go_on()
        self._acquire()
        try:
            open_now, self._open = self._open, []
        finally:
            self._release(None)
        for decision in open_now:
            if not decision.settled and decision.at_end is not None:
                decision.at_end()

    def _decide(
        self,
        slot: Slot,
        compute: Callable[[], Any],
        type: Any,
        retry: Backoff | None = None,
        retry_on: Callable[[Exception], bool] = transient,
    ) -> Steps[Any]:
        """One decision, for either driver: answered from the source, or computed (an
        awaitable result is awaited by the async driver, refused by the sync one) and
        recorded, a failure of ``compute`` included.

        With ``retry``, a failure ``retry_on`` calls transient is paused on (a pending
        :class:`_Pause`: slept by the sync driver, awaited by the async one) and computed
        again, up to ``retry.attempts`` calls; each retried failure is an :class:`Attempt` in
        the decision's ``meta["attempts"]`` and only the last outcome is the decision. Only an
        ``Exception`` is retried or recorded, and an awaited compute the flow cancelled (its
        :func:`cancellation`; a replay waits at it to be cancelled again): an interrupt stops
        the run with nothing stored.
        """
        try:
            value = self._answer(slot, type)
        except Exception as answered:  # a recorded failure (or a replay's finding)
            yield from self._recorded_failure(slot.key, answered, self._order)
            if _raised_cancellation(answered):  # as the compute raised it: the flow's except
                raise _cancelled_again(answered, slot.key) from None
            raise
        if value is not _UNANSWERED:
            if self._order is not None:  # in line: a replay of an async flow passes here
                waiting = self._order.turn(slot.key)  # per decision
                if waiting is not None:
                    try:
                        yield Pending(slot.key, waiting)
                    finally:  # resumed (or cancelled): only now is it handed out
                        self._order.took(slot.key)
            return value
        order = self._order
        if order is None:
            return (yield from self._compute(slot, compute, type, retry, retry_on, self._source))
        # A recorded call computed again live (a replay's ``live=`` kinds, a counterfactual)
        # takes its recorded turn when its answer comes, as it did live; the answers after it
        # wait for it meanwhile. A new key of a resume has no turn.
        order.live(slot.key)
        try:
            value = yield from self._compute(slot, compute, type, retry, retry_on, self._source)
        except Exception as failed:  # a failure is an answer: it takes its turn too
            order.computed(slot.key)
            yield from self._in_turn(slot.key, failed)
            raise
        except asyncio.CancelledError:  # by the flow's timeout: out once the flow has seen it
            order.computed(slot.key)
            order.settle(slot.key)
            raise
        except BaseException:  # interrupted: nothing to hand out
            order.computed(slot.key)
            order.handed_out(slot.key)
            raise
        order.computed(slot.key)
        yield from self._in_turn(slot.key, value)
        return value

    def _in_turn(self, key: str, answer: object) -> Steps[None]:
        """Wait until every answer recorded before ``answer`` (a value or failure, recorded or
        just computed again live) has been handed out
        (:class:`~loom_runtime.recorded_order.RecordedOrder`). An open decision left to its
        caller to compute (``_UNANSWERED``: its answer comes later, through the caller) is
        counted handed out as it is asked, and never waits."""
        assert self._order is not None
        if answer is _UNANSWERED:
            self._order.handed_out(key)
            return
        waiting = self._order.turn(key)
        if waiting is not None:
            try:
                yield Pending(key, waiting)
            finally:
                self._order.took(key)

    def _recorded_failure(
        self, key: str, failure: Exception, order: RecordedOrder | None
    ) -> Steps[None]:
        """Hand out ``failure``, the answer to ``key`` (its caller raises it next), in its
        turn of ``order``.

        A call recorded as cancelled (a timeout around it, ADR 0026) is not answered at once:
        it waits unanswered, for the flow's own timeout to cancel it again as it cancelled the
        live call; if nothing does within :func:`cancelled_wait`'s bound, the replay has taken
        another path, and its caller raises the recorded cancellation. It holds its turn
        meanwhile (:meth:`RecordedOrder.hold`): the answers recorded after its
        cancellation (a sibling that finished after the timeout) wait until the flow has seen
        it cancelled again, as they came after it live."""
        bound = cancelled_wait(failure) if isinstance(failure, RecordedComputeError) else None
        if bound is None:
            if order is not None:
                yield from self._in_turn(key, failure)
            return
        waiting = None if order is None else order.hold(key, bound, until=self.cut_until(key))
        if order is None or waiting is None:  # not on the flow's loop: it cannot hold a turn
            if order is not None:
                order.handed_out(key)
            bounded = _Bounded(bound)
            yield Pending(key, bounded)
            if not bounded.frozen:  # a frozen clock (freezegun) is no change of the code
                self.uncancelled.append((key, bound))
            return
        cancelled = False
        try:
            yield Pending(key, waiting)
            if not waiting.frozen:
                self.uncancelled.append((key, bound))
        except asyncio.CancelledError:
            cancelled = True
            # After the cancellations stored before it whose timers fired with its own live
            seen = order.seen_in_turn(key, functools.partial(self._fired_with, failure))
            if seen is not None:
                yield Pending(key, seen)
            raise
        finally:
            if cancelled:  # again, as live: handed out once the flow has seen it
                order.settle(key)
            else:  # the bound passed (the replay took another path), or an interrupt
                order.handed_out(key)

    def cut_until(self, key: str) -> float | None:
        """Until when (a ``time.perf_counter`` moment) the call or read recorded as cut at
        ``key`` may wait past its own bound for a timer of the loop to cut it again: while
        this run is no further from its start than the live run was at the cut
        (:data:`CUT_AT`), and a second (:func:`~loom_runtime.recorded_order.step_timer`). A
        timeout around several calls fires as long after it began as it did live, and a
        replay answers the calls before at once (ADR 0026, amended "cut at"). None for a
        recording without the field. The meta is untrusted (a bundle's): no finite number
        from 0 is ignored, and the wait never passes :data:`CANCELLED_WAIT_LIMIT`."""
        decision = self._source.recorded.get(key)
        at = None if decision is None else meta_number(decision.meta, CUT_AT)
        if at is None or not 0 <= at < CANCELLED_WAIT_LIMIT:
            return None
        return min(self._began + at + 1.0, time.perf_counter() + CANCELLED_WAIT_LIMIT)

    def _fired_with(self, failure: Exception, key: str) -> bool:
        """Whether the recorded decision at ``key`` is a cancellation whose timer fired with
        ``failure``'s live: both cancelled after as long, within :data:`TOGETHER` (timers set
        in one pass for one timeout, as ``as_completed`` starts its calls)."""
        decision = self._source.recorded.get(key)
        ran = None if decision is None else _ran(decision.error_type, decision.message)
        this = _ran(_CANCELLED, getattr(failure, "message", None))
        return ran is not None and this is not None and abs(ran - this) <= TOGETHER

    def _compute(
        self,
        slot: Slot,
        compute: Callable[[], Any],
        type: Any,
        retry: Backoff | None,
        retry_on: Callable[[Exception], bool],
        source: DecisionSource,
    ) -> Steps[Any]:
        """The unanswered half of :meth:`_decide`: compute, retry, record into ``source``
        (the context's, or :class:`_Unrecorded` for a part of a decision computed live).

        Every way it ends is stored (ADR 0026, "kept failures"): a value, a failure, a value
        that cannot be stored (its ``NotSerialisableError``), a ``retry_on`` that raised (its
        error), and a cancellation during a call or a pause between attempts. An occurrence
        asked and left unstored would hand its number to the next ask of the key.

        The compute runs marked as this flow's (:func:`computing`), an awaitable one while
        the driver awaits it: a step generator runs in its driver's context, so the mark
        holds across the ``yield`` and the driver gets the compute's own awaitable (which
        the sync driver closes when it refuses it)."""
        wrong = _wrong_argument(compute, retry, retry_on)
        if wrong is not None:  # stored as the failure: the occurrence is taken, as any ask's
            source.record_failure(slot, wrong, meta=None)
            raise wrong
        attempts: list[Attempt] = []
        pauses = retry.pauses() if retry is not None else iter(())
        started = time.perf_counter()
        while True:
            try:
                with computing(self, slot.key, attempt=len(attempts) + 1):
                    result = compute()
                    if inspect.isawaitable(result):
                        result = yield Pending(slot.key, result)
            except asyncio.CancelledError as cancelled:  # stored if the flow catches it
                if cancelling():  # by a timeout around the call: a replay waits for it again
                    self._cancelled(slot, started, attempts, source)
                else:  # raised by the compute itself (or in a sync flow): raised again at once
                    self._store_raised(slot, cancelled, self._cut_meta(slot, attempts), source)
                raise
            except Exception as exc:
                try:
                    again = retry is not None and retry_on(exc)
                except Exception as refused:  # the predicate's own failure is the outcome
                    meta = self._meta_or_refusal(slot, attempts, source)
                    source.record_failure(slot, refused, meta=meta)
                    raise
                planned = next(pauses, None) if again else None
                if retry is None or planned is None:
                    meta = self._meta_or_refusal(slot, attempts, source, exc)
                    source.record_failure(slot, exc, meta=meta)
                    raise
                paused = retry.pause(planned, asked=retry_after(exc))
                attempts.append(
                    Attempt(error=error_type_of(exc), message=error_message_of(exc), paused=paused)
                )
            else:
                meta = self._meta_or_refusal(slot, attempts, source)
                return self._stored(slot, result, type, meta, source)
            try:
                yield Pending(slot.key, _Pause(paused))
            except asyncio.CancelledError:  # a timeout while it paused between attempts
                self._cancelled(slot, started, attempts, source)
                raise

    def _part(
        self,
        key: str,
        kind: str | None,
        compute: Callable[[], Any],
        type: Any,
        retry: Backoff | None,
        retry_on: Callable[[Exception], bool],
    ) -> Steps[Any]:
        """A ``decide`` inside one of the flow's decisions computed live: computed, retried
        and handed back as a decision is, with nothing numbered, looked up or stored."""
        return self._compute(Slot(key, kind, _NULL), compute, type, retry, retry_on, _PART)

    def _cancelled(
        self, slot: Slot, started: float, attempts: list[Attempt], source: DecisionSource
    ) -> None:
        """Store ``slot``'s cancellation once the flow goes on (ADR 0026, "cancelled"), with
        how many decisions were stored when it was cancelled (a replay ranks it there:
        :func:`~loom_runtime.recorded_order.completion_order`)."""
        failure = cancellation(time.perf_counter() - started)
        meta = self._cut_meta(slot, attempts, **self._cancel_point())
        self._cancellations.append(
            functools.partial(source.record_failure, slot, failure, meta=meta)
        )

    def _store_raised(
        self,
        slot: Slot,
        cancelled: asyncio.CancelledError,
        meta: msgspec.Raw | None,
        source: DecisionSource,
    ) -> None:
        """Store a ``CancelledError`` that no cancellation of the flow's task raised (a sync
        flow's compute, or an async one raising its own) once the flow goes on, as it was
        raised: its own message, so a replay raises it again at once. The "cancelled after"
        form is for a call the flow's timeout cancelled, which a replay waits on to be
        cancelled again, and nothing would (ADR 0026, "cancelled")."""
        store = functools.partial(source.record_failure, slot, cancelled, meta=meta)
        self._cancellations.append(store)

    def _cancel_point(self) -> dict[str, float]:
        """Where a call cancelled now ranks on replay, as its meta says it: after the
        decisions stored so far (:func:`~loom_runtime.recorded_order.completion_order`), and
        when in the run it was cut (:data:`CUT_AT`, seconds since the flow began: how long
        its replay may wait for the flow's timer to cut it again, :meth:`cut_until`).

        Nothing (its stored place, then) while the flow holds a streamed answer not yet
        stored: a response whose headers it has, stored once its body is read (an open
        decision with an ``at_end``, which the recording transport sets as it hands the
        response over, and which nothing else sets). Such an answer
        came before the cancellation live (a hedge cancels its loser once the winner's headers
        arrive), but is stored after it, and a count of stored decisions cannot rank the
        cancellation after it; ranked before, the loser would hold its turn ahead of the very
        answer that makes the flow cancel it."""
        at = {CUT_AT: round(time.perf_counter() - self._began, 3)}
        if any(not held.settled and held.at_end is not None for held in list(self._open)):
            return at
        return {CANCELLED_AFTER: len(self._source.recorded), **at}

    def _stored(
        self, slot: Slot, result: Any, type: Any, meta: msgspec.Raw | None, source: DecisionSource
    ) -> Any:
        """``result`` recorded as ``slot``'s value; one the log cannot store is recorded as
        the decision's failure (its :data:`REFUSALS` error) and raised."""
        try:
            return source.record(slot, result, type=type, meta=meta)
        except REFUSALS as refused:
            source.record_failure(slot, refused, meta=meta)
            raise

    def _meta_or_refusal(
        self,
        slot: Slot,
        attempts: list[Attempt],
        source: DecisionSource,
        failure: Exception | None = None,
    ) -> msgspec.Raw | None:
        """The outcome's meta (:meth:`_meta_of`). One the log refuses (an attempt's error, or
        a group's, names a secret under ``mode="refuse"``) stores the refusal as the
        decision's failure, with no meta, and raises it, as a refused message does
        (:meth:`Recorder.record_failure`): the flow sees what its replay will."""
        try:
            return self._meta_of(slot, attempts, failure)
        except REFUSALS as refused:
            source.record_failure(slot, refused, meta=None)
            raise

    def _cut_meta(self, slot: Slot, attempts: list[Attempt], **point: float) -> msgspec.Raw | None:
        """A cancellation's meta: the attempts so far and where it was cut. One whose
        attempts the log refuses keeps only where it was cut: a cancellation must stay one
        (asyncio's timeout turns it into ``TimeoutError``), so no refusal is raised in its
        place (ADR 0026, amended "refused failures")."""
        measured = {"attempts": attempts, **point} if attempts else point
        try:
            return encode_meta(measured, key=slot.key, redactor=self._source.redactor)
        except REFUSALS:
            return encode_meta(point, key=slot.key, redactor=self._source.redactor)

    def _meta_of(
        self, slot: Slot, attempts: list[Attempt], failure: Exception | None = None
    ) -> msgspec.Raw | None:
        """The meta of a decision that took ``attempts`` retries (None for none and no
        ``failure`` that is an exception group, whose errors it keeps: :func:`_group_again`)."""
        meta: dict[str, object] = {"attempts": attempts} if attempts else {}
        if isinstance(failure, BaseExceptionGroup) and (kept := group_members(failure)):
            meta[GROUP_META] = kept
        return encode_meta(meta or None, key=slot.key, redactor=self._source.redactor)

    def _decide_now(self, slot: Slot, compute: Callable[[], Any], type: Any) -> Any:
        """:meth:`_decide` driven now, without ``retry``: the clock, uuid and random of either
        context (``decide`` of a sync flow does the same in line). It cannot wait for its
        recorded turn: counted handed out as it is asked."""
        if self._order is not None:
            self._order.handed_out(slot.key)
        value = self._answer(slot, type)
        if value is _UNANSWERED:
            value = self._compute_now(slot, compute, type, None, transient)
        return value

    def _compute_now(
        self,
        slot: Slot,
        compute: Callable[[], Any],
        type: Any,
        retry: Backoff | None,
        retry_on: Callable[[Exception], bool],
    ) -> Any:
        """The unanswered half of :meth:`_decide`, driven now.

        Without ``retry`` (every decision of a plain recording), no generator and no driver:
        with no pause to take, the driver's only work would be to refuse an awaitable, which
        :meth:`_compute` then records as the decision's failure; done here in that order,
        with the same meta (none, or a group's errors), the outcome and what is stored are
        the same."""
        source = self._source
        if retry is not None:
            return drive(self._compute(slot, compute, type, retry, retry_on, source), _settle_now)
        wrong = _wrong_argument(compute, None, retry_on)
        if wrong is not None:  # stored as the failure: the occurrence is taken, as any ask's
            source.record_failure(slot, wrong, meta=None)
            raise wrong
        try:
            with computing(self, slot.key):
                result = compute()
            if inspect.isawaitable(result):
                _refuse_awaitable(Pending(slot.key, result))
        except Exception as exc:
            source.record_failure(slot, exc, meta=self._meta_or_refusal(slot, [], source, exc))
            raise
        except asyncio.CancelledError as cancelled:  # no timeout of a sync flow's: as raised
            self._store_raised(slot, cancelled, None, source)
            raise
        return self._stored(slot, result, type, None, source)

    def now(self) -> datetime:
        """The current UTC time, recorded: a replay sees the time the live run saw."""
        if _computing.get() is self:  # inside a decision computed live: a part of it
            return _utcnow()
        return self._decide_now(self._slot("now", None, "clock"), _utcnow, UtcTimestamp)

    def uuid(self) -> UUID:
        """A fresh uuid4, recorded."""
        if _computing.get() is self:
            return uuid.uuid4()
        return self._decide_now(self._slot("uuid", None, "uuid"), uuid.uuid4, UUID)

    def random(self) -> float:
        """A float in [0, 1), recorded."""
        if _computing.get() is self:
            return random.random()
        return self._decide_now(self._slot("random", None, "random"), random.random, float)


class FlowContext(_Context):
    """The ``ctx`` of a plain ``def`` flow: ``decide`` returns the value."""

    def decide(
        self,
        key: str,
        compute: Callable[[], T],
        *,
        input: object = None,
        type: Any = Any,
        kind: str | None = None,
        retry: Backoff | None = None,
        retry_on: Callable[[Exception], bool] = transient,
    ) -> T:
        """Run ``compute`` once and record its result under ``key``; a replay returns the record.

        ``input`` (the request a model call is made with, a search's parameters) is recorded
        too, so a replay can tell that the same key is now asked differently. ``type`` decodes
        the stored value (e.g. ``datetime`` or a msgspec Struct); ``kind`` labels the decision
        ("retrieval", "model", ...) for audits and counterfactual replays.

        ``retry=Backoff(...)`` computes again after a failure ``retry_on`` calls transient
        (default :func:`~loom_runtime.backoff.transient`: timeouts, dropped connections, HTTP
        408/409/429/5xx), pausing with jitter or as long as a ``retry-after`` asked; every
        retried attempt is in the decision's meta, the last outcome is the decision, and a
        replay neither retries nor pauses (ADR 0026).
        """
        if _computing.get() is self:  # inside a decision computed live: a part of it
            return drive(self._part(key, kind, compute, type, retry, retry_on), _settle_now)
        slot = self._slot(key, input, kind)
        # Answered here, not through _decide_now: a replay answers every decide, and the one
        # call less is a visible share of the little Python each one runs (ADR 0043, amended).
        try:
            value = self._answer(slot, type)
        except RecordedComputeError as recorded:
            if recorded.error_type == _CANCELLED:
                raise _cancelled_again(recorded, key) from None
            raise
        if value is _UNANSWERED:
            value = self._compute_now(slot, compute, type, retry, retry_on)
        return value


class AsyncFlowContext(_Context):
    """The ``ctx`` of an ``async def`` flow: ``await ctx.decide(...)``."""

    def runs_on_this_loop(self) -> None:
        """Called as the flow's coroutine starts: its recorded answers are handed out in
        their recorded order on the running loop (a call from another thread, or another
        loop there, cannot wait its turn)."""
        if self._order is not None:
            self._order.bind()
        if self._spacing is not None:
            self._spacing.bind()

    async def settle_in_flight(self) -> None:
        """Cancel the decisions still being asked or computed by the flow's tasks as its body
        ends (a gather whose first call failed, a race's loser, a prefetch never awaited),
        and wait for them: each stores its cancellation before the execution's end, as when
        ``asyncio.run`` ends the flow's loop under ``loom.run``. Under ``await loom.arun`` the
        loop goes on, and they went on computing: their values could not be stored after the
        end, so the unchanged code's replay found them unrecorded, and a cancelled run's
        prefetch computed beside the resume that computed it again (ADR 0002, amended)."""
        here, loop = asyncio.current_task(), asyncio.get_running_loop()
        # Only this loop's tasks: a task of another loop (a thread running its own) cannot be
        # cancelled from here safely, and goes on as before.
        left = [
            task
            for task in list(self._in_flight)
            if task is not here and not task.done() and task.get_loop() is loop
        ]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)

    @overload
    def decide(
        self,
        key: str,
        compute: Callable[[], Awaitable[T]],
        *,
        input: object = None,
        type: Any = Any,
        kind: str | None = None,
        retry: Backoff | None = None,
        retry_on: Callable[[Exception], bool] = transient,
    ) -> Awaitable[T]: ...

    @overload
    def decide(
        self,
        key: str,
        compute: Callable[[], T],
        *,
        input: object = None,
        type: Any = Any,
        kind: str | None = None,
        retry: Backoff | None = None,
        retry_on: Callable[[Exception], bool] = transient,
    ) -> Awaitable[T]: ...

    def decide(
        self,
        key: str,
        compute: Callable[[], Any],
        *,
        input: object = None,
        type: Any = Any,
        kind: str | None = None,
        retry: Backoff | None = None,
        retry_on: Callable[[Exception], bool] = transient,
    ) -> Awaitable[Any]:
        """As :meth:`FlowContext.decide`; ``compute`` may be sync or async, and a retry's
        pause is ``asyncio.sleep`` (other tasks run meanwhile).

        A plain method returning an awaitable, so the occurrence key is fixed when the call is
        made (program order), not when the awaitable is scheduled.
        """
        if _computing.get() is self:  # inside a decision computed live: a part of it
            return adrive(self._part(key, kind, compute, type, retry, retry_on))
        slot = self._slot(key, input, kind)
        return self._in_its_task(self._decide(slot, compute, type, retry, retry_on))

    async def _in_its_task(self, decision: Steps[T]) -> T:
        """``decision`` driven with the task awaiting it known as asking one of this flow's
        decisions (:meth:`settle_in_flight`). Its steps are driven here, not handed in as a
        coroutine: an awaitable the caller closes unawaited (a helper refusing an async
        flow's ``decide``) leaves no coroutine behind that was never awaited."""
        task = asyncio.current_task()
        if task is None:  # awaited outside a task (a bare coroutine driven by hand)
            return await adrive(decision)
        self._in_flight[task] = None
        try:
            return await adrive(decision)
        finally:
            self._in_flight.pop(task, None)


class OpenDecision:
    """One decision taken when a call was made and stored when its value is complete.

    ``recorded`` says whether the source already answered (``value`` is then the recorded
    value, decoded); otherwise exactly one of :meth:`record` and :meth:`fail` stores the
    outcome, and later calls of either do nothing (``settled``), so a stream that is both read
    to its end and closed is stored once.
    """

    def __init__(
        self,
        source: DecisionSource,
        slot: Slot,
        *,
        type: Any,
        recorded: bool,
        value: Any,
        cancellations: list[Callable[[], object]] | None = None,
        cancel_point: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.key = slot.key
        self._cancellations = cancellations
        self._cancel_point = cancel_point
        self.recorded = recorded
        self.value = value
        self.settled = recorded
        self.at_end: Callable[[], None] | None = None
        """What stores this decision if it is still open when the flow ends (set by whoever
        computes it: a recording transport stores the part of a stream read so far)."""
        self._source = source
        self._slot = slot
        self._type = type

    def record(self, value: object, *, meta: Mapping[str, object] | None = None) -> Any:
        """Store ``value`` (nothing if already settled); returns what a reader will see.

        ``meta`` is what was measured while computing it (a model's name, latency, usage,
        attempts): stored beside the value for audits, never compared by a replay.
        Settled before storing: a value the log refuses is not stored as a failure either.
        """
        if self.settled:
            return self.value
        self.settled = True
        self.value = self._source.record(
            self._slot, value, type=self._type, meta=self.encode_meta(meta)
        )
        return self.value

    def record_or_refuse(self, value: object, *, meta: Mapping[str, object] | None = None) -> Any:
        """:meth:`record`, except that a value the log refuses is stored as the decision's
        failure (its ``NotSerialisableError``) and raised: for a call whose return is the
        decision (a tool's), the refusal happens where the call returns, so a replay raises
        it at the same point, and the occurrence is not left unstored (ADR 0026, "kept
        failures"). A stream's value is refused at its end, after the caller read it, so
        :meth:`record` does not store the refusal."""
        try:
            return self.record(value, meta=meta)
        except REFUSALS as refused:  # the value refused, or its meta: then stored without
            try:
                kept = self.encode_meta(meta)
            except REFUSALS:
                kept = None
            self._source.record_failure(self._slot, refused, meta=kept)
            raise

    def fail(self, error: Exception, *, meta: Mapping[str, object] | None = None) -> None:
        """Store that computing the value raised ``error`` (nothing if already settled). Meta
        the log refuses (a secret in it, or in a group's errors it keeps, under
        ``mode="refuse"``) stores the refusal in its place and raises it, as a compute's
        does (ADR 0026, amended "refused failures")."""
        if not self.settled:
            self.settled = True
            if isinstance(error, BaseExceptionGroup) and (kept := group_members(error)):
                meta = {**(meta or {}), GROUP_META: kept}  # its errors, as a compute's are
            try:
                encoded = self.encode_meta(meta)
            except REFUSALS as refused:
                self._source.record_failure(self._slot, refused, meta=None)
                raise
            self._source.record_failure(self._slot, error, meta=encoded)

    def cancel(self, elapsed: float, *, meta: Mapping[str, object] | None = None) -> None:
        """The flow cancelled the call after ``elapsed`` seconds (a timeout around it): its
        :func:`cancellation` is stored once the flow goes on, and not at all if the
        cancellation stops the run (see ``_Context._go_on``); its meta says how many
        decisions were stored when it was cancelled (a replay ranks it there:
        :func:`~loom_runtime.recorded_order.completion_order`)."""
        store = self._source.record_failure
        point = {} if self._cancel_point is None else self._cancel_point()
        self._store_if_the_flow_goes_on(store, cancellation(elapsed), {**(meta or {}), **point})

    def cut_point(self) -> dict[str, float]:
        """Where in the run a cut now comes, as a cut call's meta says it (the flow's
        context's :meth:`_Context._cancel_point`; nothing outside a run): what a read the flow
        cuts stores with what it read, for its replay's wait (ADR 0026, amended "cut at")."""
        return {} if self._cancel_point is None else self._cancel_point()

    def ended_in(
        self,
        cancelled: asyncio.CancelledError,
        elapsed: float,
        *,
        meta: Mapping[str, object] | None = None,
    ) -> None:
        """The call ended in ``cancelled`` after ``elapsed`` seconds: the flow's cut
        (:meth:`cancel`) when the running task is cancelling (a timeout around it), else
        raised by the call itself (a client saying its stream was closed upstream), stored
        as raised once the flow goes on, so a replay raises it again at once (ADR 0026,
        amended "raised, not cut")."""
        if cancelling():
            self.cancel(elapsed, meta=meta)
        else:
            self._store_if_the_flow_goes_on(self._source.record_failure, cancelled, meta)

    def defer(self, value: object, *, meta: Mapping[str, object] | None = None) -> None:
        """Store ``value`` once the flow goes on, as :meth:`cancel` stores a cancellation: a
        stream the flow cancelled while reading it, what was read and that it was cancelled."""
        store = functools.partial(self._source.record, type=self._type)
        self._store_if_the_flow_goes_on(store, value, meta)

    def _store_if_the_flow_goes_on(
        self, store: Callable[..., object], outcome: object, meta: Mapping[str, object] | None
    ) -> None:
        if self.settled or self._cancellations is None:
            return
        self.settled = True
        try:
            encoded = self.encode_meta(meta)
        except REFUSALS:  # called as the call is cancelled: a cancellation must stay one, so
            # it is kept with where it was cut only, never replaced by the refusal (a timeout
            # reads it; ADR 0026, amended "refused failures, reviewed")
            cut = {name: value for name, value in (meta or {}).items() if name in _CUT_FIELDS}
            encoded = self.encode_meta(cut)
        self._cancellations.append(functools.partial(store, self._slot, outcome, meta=encoded))

    def encode_meta(self, meta: Mapping[str, object] | None) -> msgspec.Raw | None:
        """``meta`` as stored (redacted like an input), or None for none."""
        return encode_meta(meta, key=self.key, redactor=self._source.redactor)

    def stored_message(self, message: str) -> str:
        """An error's ``message`` as this decision's value may hold it: redacted, or withheld
        whole where the redactor refuses it. A read that raised its own cancellation keeps
        that error in its value, stored once the flow goes on: a refusal then would be
        raised from the flow's next decision (ADR 0026, amended "refused failures")."""
        return as_stored(self._source.redactor, message, path=f"message of {self.key!r}")


def encode_meta(
    meta: Mapping[str, object] | None, *, key: str, redactor: Redactor | None
) -> msgspec.Raw | None:
    """A decision's ``meta`` as its JSON bytes, redacted as its input is; None for none/empty.

    A mapping with string keys, so audits can show it as fields and readers can add fields.
    """
    if not meta:
        return None
    return codec.encode(dict(meta), path=f"meta of {key!r}", redactor=redactor)


_current: ContextVar[FlowContext | AsyncFlowContext | None] = ContextVar(
    "loom_current_context", default=None
)


def current_context() -> FlowContext | AsyncFlowContext | None:
    """The context of the flow whose body is running here, or None outside any flow.

    Set only while a flow body runs, in its thread or task: tasks the flow creates inherit it
    (asyncio copies the context), threads it starts do not, and it is gone when the flow ends.
    """
    return _current.get()


_computing: ContextVar[_Context | None] = ContextVar("loom_computing", default=None)
"""The context one of whose decisions is computed live here (its ``compute``, a tool's body,
an MCP call, a request sent): what that code asks of the same flow is a part of the outer
decision, not a decision of its own. Holding the context, not a flag, keeps a flow run inside
a compute (a sub-agent's ``loom.run``) recording into its own execution."""


class _ComputedLive:
    """One attempt at one of a flow's decisions, computed live here: what names the
    sub-agents it starts (:func:`sub_agent`)."""

    __slots__ = ("attempt", "ctx", "found", "key", "lock", "low", "taken")

    def __init__(self, ctx: _Context, key: str, attempt: int) -> None:
        self.ctx, self.key, self.attempt = ctx, key, attempt
        self.taken: dict[str, set[int]] = {}
        """Per flow, the numbers this attempt took above ``low`` (:class:`SubAgents`)."""
        self.low: dict[str, int] = {}
        """Per flow, the lowest number this attempt has not taken."""
        self.found: dict[UUID, Any] = {}
        """What was read at each id this attempt walked (``Loom._sub_agent``): each is read
        once, however many runs walk past it."""
        self.lock = threading.Lock()  # the compute's own threads may start runs at once


_computed_live: ContextVar[_ComputedLive | None] = ContextVar("loom_computed_live", default=None)


@contextmanager
def computing(ctx: _Context, key: str, *, attempt: int = 1) -> Iterator[None]:
    """Mark the ``with`` block as computing ``ctx``'s decision ``key`` (its numbered key)
    live, in its ``attempt``-th call (see :func:`recorder` and :func:`sub_agent`); it follows
    the block into the threads and tasks that copy its context. Inside a decision of ``ctx``
    already computed live (a ``decide`` or a tool inside a compute: a part of it), the outer
    decision stays the one that names sub-agents: the part is not recorded, so only the outer
    one's order of starts is computed again the same way."""
    part = _computing.get() is ctx
    token = _computing.set(ctx)
    live = None if part else _computed_live.set(_ComputedLive(ctx, key, attempt))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # a step closed from another context (collected
            if live is not None:  # with its task): nothing of this context to restore
                _computed_live.reset(live)
            _computing.reset(token)


class SubAgentNaming(NamedTuple):
    """What a recording run names the sub-agents its decisions start by (:func:`sub_agent`)."""

    reopened: Mapping[str, int]
    """Per decision key, how many reopenings (ADR 0026) dropped it to compute it again: a
    decision computed anew after its failure starts its sub-agents anew, one that never
    stored an outcome (its worker died) takes up those it started."""
    seal: Callable[[str], str] | None
    """A decision key as the execution stores it sealed (ADR 0049, "names"); None for one
    whose keys are stored in clear."""
    force: bool
    """The run is a forced resume (``resume(force=True)``): a sub-agent found is taken up
    whoever owns it, as its parent was."""


class SubAgents:
    """The runs of one flow that one attempt at a decision starts (:func:`sub_agent`): each
    is the first of :meth:`ids` that is free or is the same run started before."""

    def __init__(self, live: _ComputedLive, flow: str, naming: SubAgentNaming) -> None:
        self.parent: UUID = live.ctx.execution_id
        self.key = live.key
        self.force = naming.force
        self.lock = live.lock
        """Held while a run picks its id: the compute's threads pick one at a time."""
        self._live = live
        self.found = live.found
        key = live.key if naming.seal is None else naming.seal(live.key)
        generation = naming.reopened.get(live.key, 0)
        self._flow = flow
        self._name = "\n".join((str(generation), key, str(live.attempt), flow))

    def ids(self) -> Iterator[tuple[int, UUID]]:
        """The numbers n = 0, 1, ... of the flow's runs in this attempt that are not taken,
        from the lowest, each with its id: uuid5 in the parent's id, made a version 8 UUID,
        so no execution's (version 4) and no named stream's (version 5) id is ever one, and a
        bundle can be told a sub-agent's (:func:`~loom_runtime.bundle.read_importable`)."""
        taken = self._live.taken.get(self._flow, set())
        for n in itertools.count(self._live.low.get(self._flow, 0)):
            if n not in taken:
                derived = bytearray(uuid.uuid5(self.parent, f"{self._name}\n{n}").bytes)
                derived[6] = (derived[6] & 0x0F) | 0x80  # version 8 (uuid's own stops at 5)
                yield n, UUID(bytes=bytes(derived))

    def take(self, n: int) -> None:
        """Mark the ``n``-th run this attempt's: no other run is given it."""
        taken = self._live.taken.setdefault(self._flow, set())
        taken.add(n)
        low = self._live.low.get(self._flow, 0)
        while low in taken:  # a run of the usual order starts at its own number: O(1)
            taken.discard(low)
            low += 1
        self._live.low[self._flow] = low


def sub_agent(flow: str) -> SubAgents | None:
    """The runs of ``flow`` started here, when here is one of a recording flow's decisions
    computed live (sub-agents); None elsewhere (a fresh id each).

    A sub-agent's id is derived from the decision (the parent execution, the reopenings that
    dropped the decision, its key and attempt) and from what is run (the flow, and its number
    among that attempt's runs of it). A decision computed again after its worker died derives
    the same ids, so a run finds the sub-agent it started the first time and finishes that one
    instead of starting a second (ADR 0040, amended "sub-agents"); which of them is which is
    told by their input and labels (:meth:`Loom._start`), so runs started from threads in
    another order still find their own. An id is stored in clear, so nothing that may be
    sealed goes in as it is: the input is left out (a digest of an erased input would let
    anyone confirm a guess of it) and a sealed execution's key goes in sealed. In a replay (no
    ``naming``) a decision computed live starts a new execution, as it always did."""
    live = _computed_live.get()
    ctx = _current.get()
    if live is None or live.ctx is not ctx or ctx is None or ctx.naming is None:
        return None
    return SubAgents(live, flow, ctx.naming)


def recorder(call: str) -> FlowContext | AsyncFlowContext | None:
    """The context a recorded kind of call made here (``call`` names it) is recorded in, or
    None when it must run unrecorded: outside any flow (noted, see
    :func:`note_unattributed`), or inside one of the flow's decisions computed live, whose
    record it is a part of (a tool's request, a tool called by a tool)."""
    ctx = _current.get()
    if ctx is None:
        note_unattributed(call)
        return None
    return None if _computing.get() is ctx else ctx


@contextmanager
def running(ctx: FlowContext | AsyncFlowContext) -> Iterator[None]:
    """Make ``ctx`` the :func:`current_context` for the ``with`` block (a flow body's run),
    and the body one that :func:`note_unattributed` tells of calls made without a context."""
    token = _current.set(ctx)
    with _bodies_lock:
        _bodies.append(ctx)
    try:
        yield
    finally:
        _current.reset(token)
        with _bodies_lock:
            _bodies.remove(ctx)


_bodies: list[FlowContext | AsyncFlowContext] = []
"""The flow bodies running in this process (:func:`running`)."""
_bodies_lock = threading.Lock()
NAMED_IN_A_WARNING = 5
"""How many calls or keys a warning (or a divergence) names; the rest are counted."""


def note_finding(finding: ReadPastRecordingError) -> ReadPastRecordingError:
    """``finding``, raised next into the flow whose body runs here by a recorded response
    read past what the recording holds, noted so a replay reports it even if the flow
    catches it; returned for the ``raise``. Once per decision: a body read past again (an
    SDK draining it after the flow caught the first) raises the same finding again, so it
    is reported once, and told by identity if the flow lets it through."""
    ctx = _current.get()
    if ctx is None:
        return finding
    for noted in ctx.findings:
        if isinstance(noted, ReadPastRecordingError) and noted.key == finding.key:
            return noted
    ctx.findings.append(finding)
    return finding


def note_unattributed(call: str) -> None:
    """Tell every flow body running in this process that ``call``, of a kind loom records,
    was made with no flow context (a thread the flow started without copying its context):
    a recording warns that it is not recorded, a replay counts it as a divergence.

    Called where such a call finds no context; free when no flow runs (one list test)."""
    if not _bodies:
        return
    with _bodies_lock:
        for ctx in _bodies:
            ctx.unattributed_count += 1
            if len(ctx.unattributed) < NAMED_IN_A_WARNING:
                ctx.unattributed.append(_named(call, ctx.redactor))


WITHHELD_NAME: Final = "[withheld: its name holds a secret]"
"""What an unattributed call's name is said as when it holds a secret (:func:`_named`)."""


def _named(call: str, redactor: Redactor | None) -> str:
    """``call`` as a warning or a replay's divergence may say it: withheld when it holds a
    secret the log's redactor would refuse as an identifier (a key in a URL's path), as the
    same call made inside the flow is refused; a warning reaches a terminal unasked."""
    if redactor is not None and redactor.secret_in(call) is not None:
        return WITHHELD_NAME
    return call


CUT_AT: Final = "cancelled_at_run_seconds"
"""The meta field of a call the flow cut: seconds from the flow's start to the cut."""


_CUT_FIELDS: Final = frozenset({CUT_AT, CANCELLED_AFTER})
"""The fields of a cut call's meta that say where it was cut: what a cancellation keeps when
the rest of its meta is refused."""

_CANCELLED = "asyncio.exceptions:CancelledError"
_CANCELLED_AFTER = re.compile(r"cancelled after (\d{1,6}(?:\.\d{1,6})?) s")
CANCELLED_WAIT_LIMIT: Final = 300.0
"""The longest a replay waits for a call recorded as cancelled to be cancelled again."""


def cancelling() -> bool:
    """Whether a ``CancelledError`` caught now comes from a cancellation of the running task
    (a timeout, a ``TaskGroup``, ``wait_for``'s inner task, the flow's end): the task is then
    cancelling until it uncancels. A compute raising one of its own, or a sync flow's (no
    running loop), leaves nothing cancelling."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop here
        return False
    return task is not None and task.cancelling() > 0


def cancellation(elapsed: float) -> asyncio.CancelledError:
    """How an async call the flow cancelled (a timeout around it) is recorded: as a failure
    of class ``CancelledError``, saying how long it had run. Not recording it left its
    occurrence of the key taken and empty, so a replay of the unchanged flow failed."""
    return asyncio.CancelledError(f"cancelled after {elapsed:.3f} s")


def cancelled_wait(error: RecordedComputeError) -> float | None:
    """How long a replay leaves a call recorded as cancelled unanswered (:func:`replay_wait`),
    or None when ``error`` is no recorded cancellation."""
    ran = _ran(error.error_type, error.message)
    return None if ran is None else replay_wait(ran)


def _ran(error_type: str | None, message: str | None) -> float | None:
    """How long a call recorded as cancelled had run (its :func:`cancellation` message), or
    None for any other failure."""
    if error_type != _CANCELLED or message is None:
        return None
    ran = _CANCELLED_AFTER.fullmatch(message)
    return None if ran is None else float(ran[1])


TOGETHER: Final = 0.005
"""How close, in seconds, two calls' recorded times to their cancellation are for their timers
to have fired together live (:meth:`_Context._fired_with`): the calls of one ``as_completed``
start within a pass of each other; a timeout another length apart is a different moment."""


def _raised_cancellation(error: Exception) -> TypeGuard[RecordedComputeError]:
    """Whether ``error``, a replay's answer, is a recorded ``CancelledError`` that a compute
    raised itself (stored with its own message), not the cancellation of a call the flow's
    timeout cut (the "cancelled after" form, which the replay waits on to be cut again)."""
    return (
        isinstance(error, RecordedComputeError)
        and error.error_type == _CANCELLED
        and _ran(error.error_type, error.message) is None
    )


def raised_again(error: Exception, key: str) -> BaseException:
    """``error``, a recorded failure rebuilt for ``key``, as the flow gets it on replay: a
    ``CancelledError`` the call raised itself is that class again (:func:`_cancelled_again`),
    anything else as it is."""
    return _cancelled_again(error, key) if _raised_cancellation(error) else error


def _cancelled_again(recorded: RecordedComputeError, key: str) -> asyncio.CancelledError:
    """``recorded``, a recorded cancellation no timeout of the flow made (a sync flow's, or
    one an async compute raised itself), as its ``decide`` raises it on replay.

    Its compute ended in ``asyncio.CancelledError`` and the flow caught it and went on: it is
    raised as that class again, so the flow's ``except`` takes it as it did live. Nothing
    cancelled the call, so nothing waits for a timeout to cancel it again, as an async
    flow's replay does for one its timeout cut (:meth:`_Context._recorded_failure`)."""
    # A cancellation without a message has no args (task.cancel()): CancelledError("") has one
    again = asyncio.CancelledError(*((recorded.message,) if recorded.message else ()))
    again.add_note(f"loom: replayed from the log (decision {key!r})")
    return again


def replay_wait(ran: float) -> float:
    """How long a replay leaves a call or read that was cancelled after ``ran`` seconds live
    unanswered, for the flow's own timeout to cancel it again: twice that plus a second, at
    most :data:`CANCELLED_WAIT_LIMIT`. Past it, the replay has taken another path."""
    return min(2 * ran + 1.0, CANCELLED_WAIT_LIMIT)


_REBUILDERS: dict[str, Callable[[Decision], Exception | None]] = {}
"""How loom's integrations rebuild a recorded failure whose class needs more than a message,
by its recorded ``module:qualname`` (:func:`rebuild_with`)."""


def rebuild_with(error_type: str, rebuild: Callable[[Decision], Exception | None]) -> None:
    """Register how a recorded failure of ``error_type`` is rebuilt from its decision (its
    message and meta): for an SDK error that carries more than a message (MCP's ``MCPError``
    and its code), which an integration records in the failure's meta. The recorded name only
    selects among what loom's own modules registered; ``rebuild`` reads untrusted data and
    returns None for anything it cannot rebuild (the usual rules then apply)."""
    _REBUILDERS[error_type] = rebuild


def _wrong_argument(
    compute: object, retry: object, retry_on: object
) -> DecisionArgumentError | None:
    """The refusal of a ``decide`` argument of the wrong kind, or None: checked only where a
    decision is computed live (a replay never calls them), before the first attempt."""
    if not callable(compute):
        return DecisionArgumentError(
            f"compute must be a function taking no arguments (a lambda), not {compute!r}",
            parameter="compute",
        )
    if retry is not None and not isinstance(retry, Backoff):
        return DecisionArgumentError(
            f"retry must be a loom_runtime.Backoff (or None), not {retry!r}", parameter="retry"
        )
    if not callable(retry_on):
        return DecisionArgumentError(
            f"retry_on must be a function of the exception, not {retry_on!r}",
            parameter="retry_on",
        )
    return None


REFUSALS: Final = (NotSerialisableError, SecretRefusedError, DecisionArgumentError)
"""How the log refuses a decision's value: one it cannot encode, one its redactor refuses
(a secret in ``refuse`` mode, keys that redact alike), and one asked as no type
(``type=5``). Stored as the decision's failure, so a flow that catches it replays, and
resumes, as it ran (ADR 0026, amended "refusals")."""


GROUP_META: Final = "exceptions"
"""The meta member that keeps an exception group's errors (:func:`group_members`)."""

MCP_ERROR_META: Final = "mcp_error"
"""The meta member that keeps an MCP client-side error's code, message and data."""

FAILURE_META: Final = (GROUP_META, MCP_ERROR_META)
"""The meta members a recorded failure is rebuilt from, besides its type and message: what
the flow's ``except`` sees on replay, so ``loom diff`` compares them as part of the failure."""


def _group_again(decision: Decision) -> Exception | None:
    """A recorded exception group rebuilt with the errors its meta keeps (``except*`` and
    ``except ExceptionGroup`` then take the path they took live), each rebuilt as any
    recorded failure is (:func:`rebuild_error`, never importing), nested groups likewise, as
    its own class: ``ExceptionGroup`` or an application's subclass of it, when loaded
    (:func:`_group_class`); None (the usual rules) for a recording without them or not in
    loom's shape."""
    if decision.meta is None:
        return None
    try:
        meta = msgspec.json.decode(decision.meta)
    except (msgspec.DecodeError, RecursionError):
        return None
    entry = meta.get(GROUP_META) if isinstance(meta, dict) else None
    budget = [GROUP_KEPT]  # the meta is untrusted (a bundle): no more than loom keeps
    if not isinstance(entry, dict):
        return None
    return _group_of(entry | {"type": decision.error_type}, decision, 0, budget)


def _group_class(error_type: str | None) -> type[ExceptionGroup[Exception]] | None:
    """The exception group class named ``error_type``: ``ExceptionGroup``, or a subclass of it
    already loaded (:func:`loaded_exception_class`); None for anything else."""
    cls = loaded_exception_class(error_type or "")
    return cls if cls is not None and issubclass(cls, ExceptionGroup) else None


def _group_of(
    entry: dict[str, Any], decision: Decision, depth: int, budget: list[int]
) -> ExceptionGroup[Exception] | None:
    cls = _group_class(entry.get("type"))
    message, members = entry.get("message"), entry.get("exceptions")
    if cls is None or not isinstance(message, str) or not isinstance(members, list) or not members:
        return None
    if depth >= GROUP_DEPTH or len(members) > budget[0]:
        return None
    budget[0] -= len(members)
    errors: list[Exception] = []
    for member in members:
        if not isinstance(member, dict):
            return None
        error_type, text = member.get("type"), member.get("message")
        if not isinstance(error_type, str) or not isinstance(text, str):
            return None
        if "exceptions" in member:
            nested = _group_of(member, decision, depth + 1, budget)
            if nested is None:
                return None
            errors.append(nested)
        else:
            part = msgspec.structs.replace(decision, error_type=error_type, message=text, meta=None)
            errors.append(rebuild_error(part))
    try:
        return cls(message, errors)
    except Exception:  # a subclass whose constructor takes other arguments: the usual rules
        return None


rebuild_with("builtins:ExceptionGroup", _group_again)


def _refusal_class(error_type: str) -> type[SecretRefusedError] | None:
    """The loaded refusal class of loom's that ``error_type`` names (``SecretRefusedError``,
    the colliding keys', an identifier's of any of loom's packages: a tool writing a document
    raises ``CorpusIdentifierSecretError``), or None. Loom's own classes are otherwise never
    rebuilt (a recorded failure must not pass for a finding or a verdict); a refusal is
    neither, and each one is rebuilt from its message (ADR 0026, amended "identifier
    refusals")."""
    cls = loaded_exception_class(error_type)
    if cls is None or not issubclass(cls, SecretRefusedError):
        return None
    # loom's own: an application's subclass may need its own __new__ or attributes, which
    # `replayed` does not give it (the usual rules then apply: RecordedComputeError).
    return cls if str(cls.__module__).partition(".")[0] in _LOOM_PACKAGES else None


def _refusal_again(cls: type[SecretRefusedError]) -> Callable[[Decision], Exception]:
    """How a recorded refusal of ``cls`` is rebuilt: its constructor takes the pattern and
    path, not the message, which names both (:meth:`SecretRefusedError.replayed`)."""
    return lambda decision: cls.replayed(decision.message or "")


rebuild_with(
    f"{DecisionArgumentError.__module__}:{DecisionArgumentError.__qualname__}",
    lambda decision: DecisionArgumentError.replayed(decision.message or ""),
)


def rebuild_error(decision: Decision) -> Exception:
    """Re-create a recorded ``compute`` failure so the flow takes the path it took live.

    The original class is rebuilt from its recorded ``module:qualname`` when that class is
    already loaded (:func:`loaded_exception_class`): from the message when it takes one
    argument, else made without its constructor (:func:`_without_constructor`), so
    ``except ValueError`` and ``except RateLimited`` behave the same on replay; otherwise a
    :class:`RecordedComputeError` carries the recorded type and message. The recorded name
    is untrusted input (a log row, a bundle), so it never imports anything.
    """
    error_type = decision.error_type or "builtins:Exception"
    message = decision.message or ""
    rebuild = _REBUILDERS.get(error_type)
    if rebuild is None and (refusal := _refusal_class(error_type)) is not None:
        rebuild = _refusal_again(refusal)
    try:  # a rebuilder reads untrusted data: one that fails rebuilds nothing
        rebuilt = None if rebuild is None else rebuild(decision)
    except Exception:
        rebuilt = None
    if rebuild is None and decision.meta is not None:  # an application's group, kept so
        rebuilt = _group_again(decision)
    if rebuilt is not None:
        noted = _noted(rebuilt, f"loom: replayed from the log (decision {decision.key!r})")
        if noted is not None:
            return noted
    cls = loaded_exception_class(error_type)
    if cls is not None:
        for argument in _arguments(cls, message):
            try:
                error = cls(argument)
            except Exception:  # a class that needs other arguments: made without them below
                continue
            if printed(error) == message:
                noted = _noted(error, f"loom: replayed from the log (decision {decision.key!r})")
                if noted is not None:
                    return noted
                break
        else:
            made = _without_constructor(cls, message)
            noted = (
                None
                if made is None
                else _noted(
                    made,
                    f"loom: replayed from the log (decision {decision.key!r}), made without its "
                    "constructor: the attributes it would set are not there",
                )
            )
            if noted is not None:
                return noted
    return RecordedComputeError(key=decision.key, error_type=error_type, message=message)


def _noted(error: Exception, note: str) -> Exception | None:
    """``error`` with ``note`` added, or None if it takes no note (a frozen dataclass's
    instance refuses ``__notes__``): loom's own failure must not replace the recorded one."""
    try:
        error.add_note(note)
    except Exception:
        return None
    return error


def _without_constructor(cls: type[Exception], message: str) -> Exception | None:
    """``cls`` holding ``message`` with its ``__init__`` not run (``BaseException.__new__``
    sets ``args``), when its text is then the message: an ``except`` of the class takes the
    path it took live, for a class whose constructor needs more than a message (an HTTP
    status error, an application's ``RateLimited(message, retry_after=...)``). When its
    ``__str__`` reads what ``__init__`` sets, a subclass printing the message (and named as
    the class) stands in, if making one runs no code of the class (ADR 0002, amended
    "unprintable"). Never one of loom's own classes: a recorded failure must not pass for a
    replay's finding or a test's verdict (ADR 0018)."""
    if issubclass(cls, LoomError) or _defined_in(cls, _LOOM_PACKAGES):
        return None
    try:
        error = cls.__new__(cls, message)
        if isinstance(error, cls) and printed(error) == message:
            return error
        if not _plain_to_subclass(cls):
            return None
        # A __str__ reading what __init__ sets (``"HTTP status %d" % self.status``) prints
        # the message only from a subclass that prints it: named as the class, caught as it.
        printing: type[Exception] = type(
            cls.__name__,
            (cls,),
            {
                "__str__": lambda _: message,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
            },
        )
        error = printing.__new__(printing, message)
    except Exception:  # a __new__ of its own, a class that takes no subclass
        return None
    return error if isinstance(error, cls) and str(error) == message else None


def _plain_to_subclass(cls: type[Exception]) -> bool:
    """Whether ``cls`` prints by a ``__str__`` of its own (Python code, which may read what
    ``__init__`` sets; a built-in's text is its arguments') and making a subclass of it runs
    none of its code: no metaclass of its own and no ``__init_subclass__`` (a registry of
    subclasses would get one a recording chose)."""
    if getattr(cls.__str__, "__code__", None) is None or type(cls) is not type:
        return False
    hooked = (k for k in cls.__mro__ if k is not object and "__init_subclass__" in vars(k))
    return next(hooked, None) is None


_KEY_REPR_LIMIT: Final = 10_000
"""The longest recorded ``KeyError`` message read back as its key. ``ast.literal_eval`` builds a
syntax tree of some 500 times the text's size: a 5 MB message in a 10 MB bundle took 2.5 GB."""

_RUNNER_PACKAGES: Final = frozenset(
    {"unittest", "_pytest", "pytest", "pluggy", "bdb", "pdb", "doctest"}
)
"""Packages whose exceptions steer a test runner or debugger (``unittest.SkipTest`` skips the
test, pytest's ``Exit`` ends the session, ``bdb.BdbQuit`` quits): never rebuilt from a
recording, or a re-sealed bundle could turn the test that replays it into a skip."""


def _arguments(cls: type[Exception], message: str) -> Iterator[object]:
    """The single arguments that may rebuild a ``cls`` whose ``str`` was ``message``: the
    message itself, and for a ``KeyError`` (whose ``str`` is its key's ``repr``) the key that
    ``repr`` reads back as, by ``ast.literal_eval`` (literals only: nothing is run), when the
    message is no longer than :data:`_KEY_REPR_LIMIT`."""
    yield message
    if issubclass(cls, KeyError) and len(message) <= _KEY_REPR_LIMIT:
        try:
            yield ast.literal_eval(message)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return


_LOOM_PACKAGES: Final = frozenset({"loom_runtime", "loom_memory", "loom_knowledge"})
"""loom's own packages: no class of theirs is made without its constructor."""


def _defined_in(cls: type, packages: frozenset[str]) -> bool:
    """Whether ``cls`` or a class it derives from says it is defined in one of ``packages``
    (top-level names), whatever name a recording gave it."""
    return any(
        str(getattr(ancestor, "__module__", "")).partition(".")[0] in packages
        for ancestor in cls.__mro__
    )


def loaded_exception_class(error_type: str) -> type[Exception] | None:
    """The ``Exception`` subclass named ``module:qualname`` if its module is already loaded.

    Looked up in ``sys.modules`` and then in each namespace's own ``vars()``, so neither an
    import nor a module's ``__getattr__`` (which may import lazily) nor a descriptor runs.
    A class defined in a test runner's or debugger's package (:data:`_RUNNER_PACKAGES`, by
    the module the class says it is from, whatever name the recording gave it) is None, and
    so is one of loom's command line and test tools (``loom_runtime.tools``: the pytest
    plugin's verdicts are ``AssertionError``s a forged recording must not raise).
    """
    module_name, _, qualname = error_type.partition(":")
    found: object = builtins if module_name == "builtins" else sys.modules.get(module_name)
    for part in qualname.split("."):
        if not isinstance(found, ModuleType | type):
            return None
        found = vars(found).get(part)
    if not isinstance(found, type) or not issubclass(found, Exception):
        return None
    verdict = any(
        str(getattr(ancestor, "__module__", "")).startswith(_TOOLS) for ancestor in found.__mro__
    )
    return None if verdict or _defined_in(found, _RUNNER_PACKAGES) else found


_TOOLS: Final = "loom_runtime.tools."
"""The package of loom's CLI and pytest plugin, whose exceptions are verdicts."""


class _Run:
    """The occurrences of a key recorded one after another from ``first`` up to ``last``, as
    queues of their numbers by input (see :meth:`_Context._later_with_input`)."""

    __slots__ = ("last", "queues")

    def __init__(self, recorded: Mapping[str, Decision], key: str, *, first: int) -> None:
        self.queues: dict[bytes, deque[int]] = {}
        self.last = first - 1
        self.extend(recorded, key)

    def extend(self, recorded: Mapping[str, Decision], key: str) -> None:
        """Add the occurrences recorded after ``last`` since, up to the next one missing."""
        while (decision := recorded.get(_numbered(key, self.last + 1))) is not None:
            self.last += 1
            self.queues.setdefault(bytes(decision.input), deque()).append(self.last)


def _numbered(key: str, occurrence: int) -> str:
    """The ``occurrence``-th use of ``key``: ``key`` itself, then ``key#2``, ``key#3``..."""
    return key if occurrence == 1 else f"{key}#{occurrence}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _Pause:
    """A retry's pause, as a pending value: awaited (``asyncio.sleep``) by the async driver,
    slept (``time.sleep``) by the sync one, so the retry loop is written once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __await__(self) -> Generator[Any, None, None]:
        return asyncio.sleep(self.seconds).__await__()


class _Bounded(_Pause):
    """A recorded cancellation's wait for the flow's timeout (ADR 0026): ``seconds`` at most,
    ended early, when awaited, once the loop's clock is seen frozen
    (:func:`~loom_runtime.recorded_order.bounded_wait`); slept by the sync driver."""

    frozen = False
    """Whether the wait ended because the loop's clock stood still (set once awaited)."""

    def __await__(self) -> Generator[Any, None, None]:
        waiting = bounded_wait(asyncio.get_running_loop(), self.seconds)
        yield from waiting.__await__()
        self.frozen = waiting.frozen


def _settle_now(pending: Pending) -> Any:
    """A sync flow's pending value: a retry's pause is slept, anything else refused."""
    if isinstance(pending.awaitable, _Pause):
        time.sleep(pending.awaitable.seconds)
        return None
    return _refuse_awaitable(pending)


def _refuse_awaitable(pending: Pending) -> Any:
    """A sync flow cannot await: close what ``compute`` returned and refuse it."""
    close = getattr(pending.awaitable, "close", None)
    if close is not None:
        close()
    raise TypeError(
        f"compute for {pending.what!r} returned an awaitable in a sync flow: make the "
        "flow `async def` and `await ctx.decide(...)`"
    )
