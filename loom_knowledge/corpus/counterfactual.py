"""Counterfactual replay: would this execution go the same way against today's corpus?

The execution is replayed with its retrievals run LIVE against the corpus as it is now, while
everything else (the model's answer, the clock) stays as recorded. Nothing is written, except
the vectors a vector or hybrid retrieval embeds for today's passages that have none yet,
recorded as any live retrieval records them (ADR 0038). A retrieval that raises when run live
(its embedder down) is reported as failed, every recorded passage removed. The
report says, per retrieval, which passages today's corpus would add or no longer return; how
the model request would differ (the unified diff the replay produced); and which of the
recorded answer's citations would now point at documents the model would not be shown. That
is the regression test for a corpus change: replay yesterday's incidents against it.
"""

from __future__ import annotations

from uuid import UUID

import msgspec

from loom_knowledge.domain.grounding import GroundedRequest
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import TaintedSystemContentError
from loom_knowledge.models.model import Answer
from loom_runtime import DecisionInputChangedError, Loom, codec


class PassageRef(msgspec.Struct, frozen=True, order=True):
    """A passage by identity: document, index, revision."""

    doc_id: str
    index: int
    revision: int


class RetrievalChange(msgspec.Struct, frozen=True, kw_only=True):
    """How one retrieval's results differ today from what was recorded."""

    key: str
    added: tuple[PassageRef, ...]
    removed: tuple[PassageRef, ...]
    kept: tuple[PassageRef, ...]
    failed: str | None = None
    """What the retrieval raised when run live (type and message), if it did: today it returns
    nothing, so every recorded passage is removed."""


class Counterfactual(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to "would this incident happen again with today's corpus?"."""

    execution_id: UUID
    unchanged: bool
    retrievals: tuple[RetrievalChange, ...]
    request_diffs: tuple[str, ...]
    now_ungrounded: tuple[str, ...]
    divergences: tuple[str, ...]
    uncompared: tuple[str, ...] = ()
    """The keys of ``kind="retrieval"`` decisions whose values are not loom's passages (an
    application's own search): run live as every retrieval is, so a change in what they
    return still reaches ``divergences`` and the verdict, but not compared passage by
    passage."""


def counterfactual(loom: Loom, execution_id: UUID | str) -> Counterfactual:
    """Replay with live retrievals and compare them, the request and the citations."""
    execution = loom.execution(execution_id)
    result = loom.replay(execution.id, live={"retrieval"})
    changes: list[RetrievalChange] = []
    uncompared: list[str] = []
    live_docs: dict[str | None, set[str]] = {}
    """Per scope (None: a retrieval whose input names none), the documents returned today."""
    for decision in execution.decisions.values():
        if decision.kind != "retrieval" or decision.value is None:
            continue
        outcome = result.live_values.get(decision.key, [])
        # A retrieval that raised live (its embedder down) is kept as what it raised.
        failed = (
            f"{type(outcome).__name__}: {outcome}" if isinstance(outcome, BaseException) else None
        )
        recorded_passages: list[Passage] | None
        try:
            recorded_passages = codec.decode(decision.value, type=list[Passage])
        except msgspec.ValidationError:  # an application's own retrieval, of its own shape
            recorded_passages = None
        if recorded_passages is None or not (failed is not None or _passages(outcome)):
            uncompared.append(decision.key)
            continue
        live_passages: list[Passage] = [] if failed is not None else outcome
        recorded = {_ref(p) for p in recorded_passages}
        live = {_ref(p) for p in live_passages}
        live_docs.setdefault(_scope_of(decision.input), set()).update(r.doc_id for r in live)
        changes.append(
            RetrievalChange(
                key=decision.key,
                added=tuple(sorted(live - recorded)),
                removed=tuple(sorted(recorded - live)),
                kept=tuple(sorted(recorded & live)),
                failed=failed,
            )
        )
    ungrounded = [
        doc_id
        for decision in execution.decisions.values()
        if decision.kind == "model" and decision.value is not None
        for doc_id in _citations(decision.value)
        if not _still_shown(doc_id, _shown_from(decision.input, doc_id), live_docs)
    ]
    diffs = tuple(d.diff for d in result.divergences if isinstance(d, DecisionInputChangedError))
    return Counterfactual(
        execution_id=execution.id,
        unchanged=result.identical and all(not (c.added or c.removed or c.failed) for c in changes),
        retrievals=tuple(changes),
        request_diffs=diffs,
        now_ungrounded=tuple(dict.fromkeys(ungrounded)),
        divergences=tuple(f"{type(d).__name__}: {d}" for d in result.divergences),
        uncompared=tuple(uncompared),
    )


def _passages(value: object) -> bool:
    """Whether a retrieval's live value is loom's passages, to compare with the recorded."""
    return isinstance(value, list) and all(isinstance(item, Passage) for item in value)


def render_counterfactual(report: Counterfactual) -> str:
    """The report as text (:func:`counterfactual_lines`, one per line)."""
    return "\n".join(counterfactual_lines(report))


def counterfactual_lines(report: Counterfactual) -> list[str]:
    """The report as lines, one per fact, a request diff one per diff line.

    Not made inert: a doc id or a citation comes from the log or the model and may hold a line
    break, so whoever prints these to a terminal makes each line inert on its own (one line),
    and a line break in an id cannot forge a verdict or a retrieval line.
    """
    verdict = (
        "would go the same way with today's corpus"
        if report.unchanged
        else "would NOT go the same way with today's corpus"
    )
    lines = [f"execution {report.execution_id} {verdict}"]
    for change in report.retrievals:
        lines.append(f"retrieval {change.key}")
        if change.failed is not None:
            lines.append(f"  ! failed live: {change.failed}")
        lines += [f"  + {_label(ref)}" for ref in change.added]
        lines += [f"  - {_label(ref)}" for ref in change.removed]
        lines.append(f"  = {len(change.kept)} passage(s) unchanged")
    lines += [f"retrieval {key}: not loom's passages, not compared" for key in report.uncompared]
    for diff in report.request_diffs:
        lines.append("model request would change:")
        lines += diff.rstrip().split("\n")
    if report.now_ungrounded:
        lines.append(f"citations now UNGROUNDED: {', '.join(report.now_ungrounded)}")
    return lines


def _ref(passage: Passage) -> PassageRef:
    return PassageRef(passage.doc_id, passage.index, passage.revision)


def _label(ref: PassageRef) -> str:
    return f"{ref.doc_id}#{ref.index} r{ref.revision}"


def _scope_of(raw_input: msgspec.Raw) -> str | None:
    """The scope a retrieval's recorded input names (:func:`retrieval_input`), if any."""
    try:
        recorded: object = codec.decode(raw_input)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    scope = recorded.get("scope") if isinstance(recorded, dict) else None
    return scope if isinstance(scope, str) else None


def _shown_from(raw_input: msgspec.Raw, doc_id: str) -> set[str]:
    """The scopes a model call's recorded request showed ``doc_id`` from, by its passages'
    provenance; empty for a request of the flow's own making, which records none."""
    try:
        request: GroundedRequest = codec.decode(raw_input, type=GroundedRequest)
    except (msgspec.ValidationError, TaintedSystemContentError):
        return set()
    return {
        message.provenance.scope
        for message in request.messages
        if message.provenance is not None and message.provenance.doc_id == doc_id
    }


def _still_shown(doc_id: str, scopes: set[str], live_docs: dict[str | None, set[str]]) -> bool:
    """Whether a citation of ``doc_id`` would still point at a document the model is shown:
    one a retrieval of a scope its passage came from returns today. Documents of two scopes
    can share an id, so another scope's document of that id does not count. Where the
    request records no provenance, any retrieval of the execution returning it does."""
    if scopes:
        return any(doc_id in live_docs.get(scope, ()) for scope in scopes)
    return any(doc_id in docs for docs in live_docs.values())


def _citations(raw: msgspec.Raw) -> tuple[str, ...]:
    try:
        return codec.decode(raw, type=Answer).cited_doc_ids
    except msgspec.ValidationError:
        return ()
