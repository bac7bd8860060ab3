"""Replay: re-run the current code of a flow with every decision answered from the log.

A replay never calls ``compute`` for a recorded decision and never appends to the log, so it
can run anywhere the execution's events are (a copy of the database, later a bundle) with
every live dependency unreachable. What it proves is reported, not assumed: each way the
current code departs from the recording is one :class:`~loom_runtime.errors.ReplayDivergence`
in :attr:`ReplayResult.divergences`.

Decision inputs are redacted as they were when recorded (the built-in patterns unless the
caller passes the log's redactor), so a secret the flow adds to a prompt compares equal to
its ``[REDACTED:...]`` marker in the recording instead of diverging (ADR 0012).

``live`` names decision *kinds* ("retrieval", ...) that run live instead of from the log while
the rest stay recorded: a counterfactual replay ("would this still happen today?"). Their
fresh values are reported in :attr:`ReplayResult.live_values`; nothing is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Final
from uuid import UUID

import msgspec

from loom_runtime import codec
from loom_runtime.context import Slot
from loom_runtime.diff import diff
from loom_runtime.errors import (
    DecisionInputChangedError,
    DecisionKindChangedError,
    OutcomeChangedError,
    OutputChangedError,
    RecordedComputeError,
    ReplayDivergence,
    UnrecordedDecisionError,
    UnusedDecisionsError,
)
from loom_runtime.execution import (
    Decision,
    Execution,
    error_message_of,
    error_type_of,
    printed,
    stored_message,
)
from loom_runtime.redaction import Redactor, RedactorOption, as_stored, resolve_redactor


class Replayer:
    """A decision source that answers from the recording and collects divergences."""

    def __init__(
        self,
        decisions: dict[str, Decision],
        *,
        live: frozenset[str],
        redactor: RedactorOption = "builtin",
    ) -> None:
        self.recorded: Mapping[str, Decision] = decisions
        """An attribute, not a property: the context reads it on every ``decide``."""
        self._live = live
        self.redactor = resolve_redactor(redactor)
        self._asked: set[str] = set()
        """The keys looked up that numbering had not matched (see ``_answered``)."""
        self._answered: list[str] = []
        """The keys answered by numbering's match: every key of a faithful replay. Listed,
        and made a set once by :meth:`unused`: a set growing by every key as the flow runs
        cost several times what one pass over the list costs at the end."""
        self.divergences: list[ReplayDivergence] = []
        self.live_values: dict[str, Any] = {}

    def lookup(self, slot: Slot) -> Decision | None:
        matched = slot.matched  # found by numbering in this very mapping, same input
        if matched is not None and (slot.kind is None or slot.kind not in self._live):
            if matched.kind != slot.kind:
                self._kind_changed(matched, slot)
            self._answered.append(slot.key)
            return matched
        self._asked.add(slot.key)
        live = slot.kind is not None and slot.kind in self._live
        decision = self.recorded.get(slot.key)
        if decision is None:
            nearest = difflib.get_close_matches(slot.key, list(self.recorded), n=3, cutoff=0.4)
            divergence = UnrecordedDecisionError(key=slot.key, nearest=nearest)
            self.divergences.append(divergence)
            if live:  # computed live all the same: a counterfactual runs on
                return None
            raise divergence
        if decision.kind != slot.kind:
            self._kind_changed(decision, slot)  # for a live kind: computed as what it was not
        # Asked as ==, not !=: msgspec's Raw answers != several times slower (53 ns against
        # 13), and every decision of a replay asks this once. A live kind is compared too: a
        # changed query is a change whatever today's data returns for it.
        if decision.input == slot.input:
            return None if live else decision
        self.divergences.append(
            DecisionInputChangedError(
                key=slot.key,
                diff=diff(decision.input, slot.input, label=f"input of {slot.key!r}"),
            )
        )
        return None if live else decision

    def _kind_changed(self, decision: Decision, slot: Slot) -> None:
        """Note that ``slot`` asks ``decision`` as another kind: audits and a counterfactual's
        ``live=`` read the kind, so a changed one is a change (answered as recorded all the
        same, as a changed input is)."""
        self.divergences.append(
            DecisionKindChangedError(key=slot.key, recorded=decision.kind, asked=slot.kind)
        )

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        _, decoded = codec.round_trip(
            value, path=f"decision {slot.key!r}", type=type, redactor=self.redactor
        )
        self.live_values[slot.key] = decoded
        return decoded

    def record_failure(
        self, slot: Slot, error: BaseException, *, meta: msgspec.Raw | None = None
    ) -> None:
        self.live_values[slot.key] = error

    def unused(self) -> list[str]:
        """Recorded decisions the replay never asked for (of a live kind too: a call gone).

        A fork's inherited decisions are excluded too (ADR 0027, amended "paths"): they are
        copied with its start, and an override before the fork point may send the flow down a
        branch that never asks one; whether the fork's own run asked it is not recorded."""
        # A faithful replay of sequential code answered every recorded key, in recorded order,
        # by numbering's match: the two lists being equal proves none unused, for half what
        # the sets below cost. Any other replay (keys asked in another order, a key missed,
        # looked up or of a live kind) takes the sets.
        if not self._asked and self._answered == list(self.recorded):
            return []
        asked = self._asked.union(self._answered)
        if asked.issuperset(self.recorded):  # every one asked (a faithful replay): none
            return []
        return [
            key
            for key, decision in self.recorded.items()
            if key not in asked and decision.origin != "inherited"
        ]


DESCRIBED: Final = 50
"""How many divergences :meth:`ReplayResult.describe` spells out before it counts the rest."""


class ReplayResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a replay found. ``identical`` is true only when there is no divergence at all."""

    execution_id: UUID
    flow: str
    recorded_code_version: str
    code_version: str
    divergences: tuple[ReplayDivergence, ...]
    output: Any = None
    live_values: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not self.divergences

    def raise_for_divergence(self) -> None:
        """Raise the first divergence (each is a typed error), if any."""
        if self.divergences:
            raise self.divergences[0]

    def describe(self) -> str:
        """A readable account: 'identical', or the divergences in order, the first
        :data:`DESCRIBED` of them and then how many more (what ``loom replay`` and a failing
        bundle test print: a loop whose prompt changed gives one per decision, each with its
        diff; :attr:`divergences` holds them all)."""
        # The name is recorded text (an old log's, a bundle's): a line break in it would print
        # a verdict line of its own, and what does not print would print raw in a test's
        # failure; each is shown as its code point, as the CLI shows them.
        flow = "".join(c if c.isprintable() else f"<U+{ord(c):04X}>" for c in self.flow)
        if self.identical:
            return f"execution {self.execution_id} ({flow}) replayed identically"
        lines = [f"execution {self.execution_id} ({flow}) diverged:"]
        lines += [f"- {type(d).__name__}: {d}" for d in self.divergences[:DESCRIBED]]
        if (more := len(self.divergences) - DESCRIBED) > 0:
            lines.append(
                f"... and {more:,} more divergences (all in ReplayResult.divergences, or "
                "loom replay ID --json)"
            )
        return "\n".join(lines)


def compare_outcome(
    execution: Execution,
    replayer: Replayer,
    *,
    output: msgspec.Raw | None,
    error: BaseException | None,
) -> list[ReplayDivergence]:
    """Divergences found after the flow returned or raised: outcome, output, unused decisions."""
    found: list[ReplayDivergence] = []
    if any(error is finding for finding in replayer.divergences):
        # The replay's own finding, already collected: the flow could not run to its end.
        # Told by identity, never by class: a recording can name ReplayDivergence (or any
        # class) as a failure's type, and a rebuilt one must not pass for a finding.
        return found
    recorded = _describe_recorded(execution)
    if error is not None:
        replayed = _describe_error(error, replayer.redactor)
        if recorded != replayed and recorded != _group_as_recorded_before(error, replayer):
            found.append(OutcomeChangedError(recorded=recorded, replayed=replayed))
    elif execution.output is None:
        found.append(OutcomeChangedError(recorded=recorded, replayed="returned"))
    elif not codec.same_json(execution.output, output or b"null"):
        found.append(OutputChangedError(diff=diff(execution.output, output, label="output")))
    unused = replayer.unused()
    if unused:
        found.append(UnusedDecisionsError(keys=unused))
    return found


def _describe_error(error: BaseException, redactor: Redactor | None) -> str:
    """What the flow raised on replay, as its failure would have been stored: the message
    through the log's redactor (the recorded one was), so a secret the code puts in it (a
    DSN from configuration) neither makes a faithful replay diverge nor reaches the verdict.
    A redactor that refuses rather than rewrites withholds it (:func:`as_stored`)."""
    if isinstance(error, RecordedComputeError):  # the recorded failure, re-raised unchanged
        return f"raised {error.error_type}: {error.message}"
    message = as_stored(redactor, error_message_of(error), path="the replayed error")
    return f"raised {error_type_of(error)}: {message}"


def _group_as_recorded_before(error: BaseException, replayer: Replayer) -> str | None:
    """An exception group as releases before its errors were stored recorded it (its own
    message only): such a recording cannot tell what its tasks raised, and the same code
    replays it identical rather than diverging on every old incident (ADR 0002, amended)."""
    if not isinstance(error, BaseExceptionGroup) or isinstance(error, RecordedComputeError):
        return None
    stored = as_stored(replayer.redactor, stored_message(printed(error)), path="the replayed error")
    return f"raised {error_type_of(error)}: {stored}"


def _describe_recorded(execution: Execution) -> str:
    if execution.error is not None:
        error_type, message = execution.error
        return f"raised {error_type}: {message}"
    if execution.output is not None:
        return "returned"
    return "did not finish"
