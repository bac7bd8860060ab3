"""The ``Loom`` behind the pytest plugin's ``loom`` fixture for a test marked with a bundle.

A marked test calls ``loom.run(...)`` the same way whether it records or replays (ADR 0029):
this subclass decides which by the record mode, inside the one method both ``run`` and
``arun`` go through. Recording runs the flow live into the test's temporary log and leaves
the execution for the fixture to export; replaying answers the run from the bundle, with the
current code, and fails the test with the replay's readable divergences. A run recorded as
raising raises again when replayed (the error the current code raised, matching the
recorded one), so a test expecting it with ``pytest.raises`` passes in both modes. Under
``--loom-update`` a replay whose only divergences are changed decision inputs or a changed
output is re-sealed instead: the recorded events with those inputs and that output put in,
everything else (ids, timestamps, values, code version) kept, so the bundle's git diff is
exactly what was accepted.

Imported only when a marked test requests the fixture (the plugin module imports only pytest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec

from loom_runtime.bundle import Bundle, BundleEvent, read_bundle
from loom_runtime.context import (
    AsyncFlowContext,
    DecisionSource,
    FlowContext,
    Slot,
    SubAgentNaming,
    SubAgents,
)
from loom_runtime.diff import diff
from loom_runtime.driver import Steps
from loom_runtime.errors import (
    DecisionInputChangedError,
    DecisionTypeChangedError,
    OutcomeChangedError,
    OutputChangedError,
    ReadPastRecordingError,
    ReplayDivergence,
)
from loom_runtime.execution import Decision, Execution
from loom_runtime.flow import Flow, FlowRegistry
from loom_runtime.labels import Labels
from loom_runtime.loom import Loom, Run
from loom_runtime.recorded_order import AnswerSpacing
from loom_runtime.redaction import RedactorOption
from loom_runtime.replay import Replayer, ReplayResult
from loom_runtime.tools.display import visible
from loom_runtime.tools.pytest_plugin import (
    BundleNotReplayed,
    BundleVerdict,
    ReplayDiverged,
    not_replayed_step,
)

ACCEPTED: tuple[type[ReplayDivergence], ...] = (DecisionInputChangedError, OutputChangedError)
"""The divergences ``--loom-update`` accepts: what the code now asks and returns. Anything
else (an unrecorded key, an unused decision, another outcome) changes what was recorded, and
only recording afresh (``--loom-record=rewrite``) can say what the new answer is."""


class BundleMismatch(BundleVerdict):
    """The test runs the flow differently from the bundle (another flow, other arguments, a
    second run): not a replay divergence but a test that no longer matches its recording."""


def next_step(
    result: ReplayResult, *, marked: bool, rerun: str, raised: BaseException | None = None
) -> str:
    """What to run when ``result``'s divergences are an intended change, said where the test
    fails: ``--loom-update`` when it can accept them all (changed inputs and output), else
    recording afresh, which a marked test can do and a collected bundle cannot. ``rerun`` is
    what selects this test alone (recording afresh calls the model and tools of every test it
    runs); ``raised`` is what the current code raised on replay, shown as the cause."""
    step = ""
    if raised is not None:
        step = f"The current code raised {type(raised).__name__} on replay (its traceback is "
        step += "above, as the cause). "
    if all(isinstance(d, ACCEPTED) for d in result.divergences):
        step += f"If the change is intended, accept it with pytest --loom-update {rerun} (it "
        step += "keeps the recorded answers"
        if marked:
            step += f"; pytest --loom-record=rewrite {rerun} records afresh, calling the model "
            step += "and tools again"
        return f"{step})."
    step += "If the change is intended, "
    if marked:
        step += f"record afresh with pytest --loom-record=rewrite {rerun}"
    else:
        step += "record the execution again and export it over this bundle (loom export ID -o FILE)"
    return f"{step}: --loom-update accepts only changed decision inputs and output."


class BundleLoom(Loom):
    """A ``Loom`` on the test's temporary log whose one run records to or replays ``bundle``."""

    def __init__(
        self,
        url: str | None,
        *,
        flows: FlowRegistry,
        bundle: Path,
        record: bool,
        update: bool,
        rerun: str,
        redactor: RedactorOption = "builtin",
    ) -> None:
        super().__init__(url, flows=flows, redactor=redactor)
        self._no_database = url is None  # Loom's default URL is a file this one never opens
        self.bundle = bundle
        self.recording = record
        self.update = update
        self.rerun = rerun
        """The pytest arguments that run this test alone, for a failure's next step."""
        self.recorded: UUID | None = None
        """The execution recorded live, for the fixture to export to :attr:`bundle`."""
        self.resealed: Bundle | None = None
        """The bundle re-sealed under ``--loom-update``, for the fixture to write."""
        self.accepted: tuple[ReplayDivergence, ...] = ()
        self.ran = False
        """Whether the test ran its flow: a marked test that never does checks nothing."""
        self.verdict: BundleVerdict | None = None
        """The verdict its run raised, if any: the plugin fails the test with it even when
        the test caught it (``pytest.raises(Exception)`` around a recorded failure)."""
        self._seen: _InputsSeen | None = None
        self._output: msgspec.Raw | None = None
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        mode = "recording" if self.recording else "replaying"
        if self._no_database:  # an update of a bundle: replayed without a log
            return f"{type(self).__name__}(no database, {mode} {self.bundle})"
        return f"{super().__repr__()[:-1]}, {mode} {self.bundle})"

    def get_flow(self, name: str, *, recorded_by: UUID | None = None) -> Flow:
        """As ``Loom.get_flow``; replaying, a flow not registered (renamed since the bundle
        was recorded) is a :class:`BundleNotReplayed` verdict, kept as the run's wherever
        ``Loom`` looks it up (``run`` does before ``_run``): a ``FlowNotFoundError`` is a
        ``KeyError``, which the test expecting its recorded failure caught."""
        try:
            return super().get_flow(name, recorded_by=recorded_by)
        except Exception as exc:
            # Live, nothing is replayed; and :meth:`replay_file` (no database: a collected
            # bundle, ``loom_replay``) leaves what was raised to its caller to report.
            if self.recording or self._no_database:
                raise
            verdict = BundleNotReplayed(
                self.bundle, exc, not_replayed_step(self.rerun, marked=True)
            )
            self.verdict = self.verdict or verdict
            raise verdict from exc

    def _run(self, flow: str, labels: Labels, arguments: dict[str, Any]) -> Steps[Run]:
        try:
            if self.ran:
                raise BundleMismatch(
                    f"this test already ran a flow; a bundle ({self.bundle.name}) holds one "
                    "execution: split the test, or run the other flows with a Loom of your own"
                )
            self.ran = True
            if self.recording:
                return (yield from super()._run(flow, labels, arguments))
            return (yield from self._answer(flow, arguments))
        except BundleVerdict as verdict:
            self.verdict = self.verdict or verdict  # the first: what the rest follows from
            raise

    def _start(
        self, flow: str, labels: Labels, arguments: dict[str, Any]
    ) -> tuple[Flow, Execution, dict[str, Any], SubAgents | None]:
        started = super()._start(flow, labels, arguments)
        self.recorded = started[1].id  # exported even if the flow then fails: that is recorded
        return started

    def _answer(self, flow: str, arguments: dict[str, Any]) -> Steps[Run]:
        """The run answered from the bundle by a replay of the current code.

        Anything raised before the recorded outcome is raised again (the bundle unreadable,
        the flow renamed, a new required argument) is a :class:`BundleNotReplayed` verdict:
        raised as it was, a ``FlowNotFoundError`` (a ``KeyError``) or a ``BundleError``, the
        test expecting the recorded failure (``pytest.raises(Exception)``) caught it and
        passed with nothing replayed."""
        try:
            bundle, execution, result = yield from self._replayed(flow, arguments)
            if not result.identical:
                self._settle(bundle, result, marked=True)
        except BundleVerdict:
            raise
        except Exception as exc:
            raise BundleNotReplayed(
                self.bundle, exc, not_replayed_step(self.rerun, marked=True)
            ) from exc
        if self._error is not None:  # recorded as raising, and so it did again: as run() did
            # Its message is the bundle's text (untrusted), and pytest prints it raw: shown
            # inert, as the verdicts are. The flow saw it unchanged; only the test's report is.
            self._error.args = tuple(
                visible(arg) if isinstance(arg, str) else arg for arg in self._error.args
            )
            self._error.add_note(
                f"loom: replayed from {self.bundle}, which recorded this failure; if the test "
                "does not expect it, record it again with --loom-record=rewrite"
            )
            raise self._error
        return Run(
            execution_id=execution.id,
            flow=execution.flow,
            output=result.output,
            log_position=execution.log_position,
        )

    def _replayed(
        self, flow: str, arguments: dict[str, Any]
    ) -> Steps[tuple[Bundle, Execution, ReplayResult]]:
        """The bundle, its execution, and the replay of the current code run as the test runs
        it (``flow`` with ``arguments``); a :class:`BundleMismatch` if it runs another."""
        bundle = read_bundle(self.bundle)
        execution = bundle.execution()
        definition = self.get_flow(flow)
        raw_input, _ = definition.bind(arguments, redactor=self.settings.redactor)
        if definition.name != execution.flow:
            raise BundleMismatch(
                f"{self.bundle} recorded flow {execution.flow!r}, this test runs "
                f"{definition.name!r}: point the marker at its bundle, or record it again "
                "with --loom-record=rewrite"
            )
        if raw_input != execution.input:
            raise BundleMismatch(
                f"{self.bundle} recorded {execution.flow!r} with other arguments than this "
                "test runs it with; record it again with --loom-record=rewrite:\n"
                + diff(execution.input, raw_input, label=f"arguments of {execution.flow}")
            )
        self.import_bundle(self.bundle)  # the test can look the execution up as after a run
        result = yield from self._replay(execution, frozenset())
        return bundle, execution, result

    def replay_file(self) -> ReplayResult:
        """Replay :attr:`bundle` as it is (a collected bundle, or one ``loom_replay`` names,
        has no run of the test's to answer): under :attr:`update` re-seal it into
        :attr:`resealed` if only accepted divergences, else raise them, with what the code
        raised as the cause. Opens no database."""
        result = self.replay_bundle(self.bundle)
        if not result.identical:
            self._settle(read_bundle(self.bundle), result, marked=False)
        return result

    def _settle(self, bundle: Bundle, result: ReplayResult, *, marked: bool) -> None:
        """Re-seal the bundle if updating and every divergence is accepted; else fail."""
        if not self.update or not all(isinstance(d, ACCEPTED) for d in result.divergences):
            raised = self._error if _outcome_changed(result, self._error) else None
            step = next_step(result, marked=marked, rerun=self.rerun, raised=raised)
            raise ReplayDiverged(result, step) from raised
        seen = self._seen.inputs if self._seen is not None else {}
        changed = [d for d in result.divergences if isinstance(d, DecisionInputChangedError)]
        output_changed = any(isinstance(d, OutputChangedError) for d in result.divergences)
        self.resealed = reseal(
            bundle,
            inputs={d.key: seen[d.key] for d in changed},
            output=self._output if output_changed else None,
        )
        self.accepted = result.divergences

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
        if isinstance(source, Replayer):  # a replay's: note what the current code asks
            self._seen = source = _InputsSeen(source)
        return super()._context(
            definition, execution, source, naming=naming, replaying=replaying, spacing=spacing
        )

    def _replay_result(
        self,
        execution: Execution,
        definition: Flow,
        replayer: Replayer,
        output: msgspec.Raw | None,
        value: object,
        error: BaseException | None,
    ) -> ReplayResult:
        self._output, self._error = output, error
        return super()._replay_result(execution, definition, replayer, output, value, error)


def _outcome_changed(result: ReplayResult, raised: BaseException | None) -> bool:
    """Whether the replay ended in ``raised``, the current code's error: a changed outcome,
    or what the recording could not answer, let through by the flow (reported as itself
    since ADR 0002's "caught findings", and shown with its traceback as before)."""
    return any(
        isinstance(d, OutcomeChangedError)
        or (d is raised and isinstance(d, DecisionTypeChangedError | ReadPastRecordingError))
        for d in result.divergences
    )


class _InputsSeen:
    """A replay's decision source, noting the input each key is asked with now: what a
    re-seal puts in place of the recorded input."""

    def __init__(self, inner: Replayer) -> None:
        self.inner = inner
        self.redactor = inner.redactor
        self.inputs: dict[str, msgspec.Raw] = {}

    @property
    def recorded(self) -> Mapping[str, Decision]:
        return self.inner.recorded

    def lookup(self, slot: Slot) -> Decision | None:
        self.inputs[slot.key] = slot.input
        return self.inner.lookup(slot)

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        return self.inner.record(slot, value, type=type, meta=meta)

    def record_failure(
        self, slot: Slot, error: BaseException, *, meta: msgspec.Raw | None = None
    ) -> None:
        self.inner.record_failure(slot, error, meta=meta)


def reseal(
    bundle: Bundle, *, inputs: Mapping[str, msgspec.Raw], output: msgspec.Raw | None
) -> Bundle:
    """``bundle`` with the input of each decision in ``inputs`` replaced, and the recorded
    output by ``output`` if given; every other event kept byte for byte, and sealed again."""
    events = [_resealed_event(event, inputs, output) for event in bundle.events]
    return bundle.resealed(events)


def _resealed_event(
    event: BundleEvent, inputs: Mapping[str, msgspec.Raw], output: msgspec.Raw | None
) -> BundleEvent:
    if event.topic in (Execution.DecisionRecorded.TOPIC, Execution.DecisionFailed.TOPIC):
        field = "input"
    elif event.topic == Execution.Completed.TOPIC:
        field = "output"
    else:
        return event
    # Each field kept as its recorded bytes: decoded to Python and encoded again, the value
    # beside a changed input would come back in msgspec's spelling (or not at all: 1e400).
    state = msgspec.json.decode(event.state, type=dict[str, msgspec.Raw])
    key = msgspec.json.decode(state["key"]) if "key" in state else ""
    new = inputs.get(key) if field == "input" else output
    if new is None:
        return event
    state[field] = new
    return msgspec.structs.replace(event, state=msgspec.json.encode(state).decode())
