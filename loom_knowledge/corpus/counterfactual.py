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

A document erased since (ADR 0055) is gone from today's corpus, so a request that carried its
passages differs; its text is withheld from the diff, as the audit blanks it (``[erased
(position P)]`` in place of the message's content), in ``request_diffs`` and ``divergences``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from uuid import UUID

import msgspec

from loom_knowledge.corpus.erased_documents import DecisionErasures, erased_messages
from loom_knowledge.domain.grounding import GroundedRequest
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import TaintedSystemContentError
from loom_knowledge.models.model import Answer
from loom_memory import MAX_QUERY_TERMS, tokenize
from loom_runtime import Decision, DecisionInputChangedError, Loom, codec


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
    query_terms: int | None = None
    """The recorded query's distinct terms, when more than a search reads today
    (:data:`~loom_memory.MAX_QUERY_TERMS`, 64 since ADR 0016's amendment "terms"; 1,000
    before): a difference may then be the search's, not the corpus's."""


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
                query_terms=_terms_past_the_bound(decision.input),
            )
        )
    ungrounded = [
        doc_id
        for decision in execution.decisions.values()
        if decision.kind == "model" and decision.value is not None
        for doc_id in _citations(decision.value)
        if not _still_shown(doc_id, _shown_from(decision.input, doc_id), live_docs)
    ]
    erasures = functools.cache(lambda: DecisionErasures(loom, execution))  # read if needed
    diffs: list[str] = []
    divergences: list[str] = []
    for divergence in result.divergences:
        told = f"{type(divergence).__name__}: {divergence}"
        if isinstance(divergence, DecisionInputChangedError):
            recorded = execution.decisions.get(divergence.key)
            shown = _withheld(divergence.diff, recorded, erasures)
            diffs.append(shown)
            told = told.replace(divergence.diff, shown)  # the error's text quotes the diff
        divergences.append(told)
    return Counterfactual(
        execution_id=execution.id,
        unchanged=result.identical and all(not (c.added or c.removed or c.failed) for c in changes),
        retrievals=tuple(changes),
        request_diffs=tuple(diffs),
        now_ungrounded=tuple(dict.fromkeys(ungrounded)),
        divergences=tuple(divergences),
        uncompared=tuple(uncompared),
    )


def _withheld(
    diff: str, recorded: Decision | None, erasures: Callable[[], DecisionErasures]
) -> str:
    """``diff`` (a decision's recorded input against the replayed one) with the text of the
    recorded request's messages of erased documents withheld: each such line of the recorded
    side shows ``[erased (position P)]`` as its content, as the audit says. The lines are found
    by where they are in the recorded input, never by their text, so a line the diff cut
    short is withheld too; a diff too large to show lines gives no excerpt of the recorded
    input. The replayed side is today's corpus, shown as it is."""
    request = None if recorded is None else _request(recorded.input)
    if recorded is None or request is None or not any(m.provenance for m in request.messages):
        return diff
    if not (erased := erased_messages(request, erasures().of(recorded.key))):
        return diff
    lines = diff.split("\n")
    hunks = [at for at, line in enumerate(lines) if _HUNK.match(line)]
    if not hunks:  # summarised, not diffed: each side's size, digest and an excerpt
        return "\n".join(
            f"{line.split(', sha256 ', 1)[0]}, {_withheld_note(erased)}"
            if line.startswith("recorded ") and ", sha256 " in line
            else line
            for line in lines
        )
    # Rendered as the diff rendered it: keys sorted, unless only their order differed (a
    # note before the file headers says so, and the diff shows them as built).
    replaced = _erased_lines(recorded.input, erased, sort_keys=lines[0].startswith("---"))
    if replaced is None:  # never expected: the whole diff rather than a guess at its lines
        return f"{_withheld_note(erased)}\n"
    shown = lines[: hunks[0]]
    old = 0  # the line of the recorded input the diff's next "-" or " " line is
    for line in lines[hunks[0] :]:
        if found := _HUNK.match(line):
            start, count = int(found[1]), found[2]
            old = start + 1 if count == "0" else start
        elif line[:1] in ("-", " "):
            if old in replaced:
                shown.append(f"{line[0]}{replaced[old]}")
                old += 1
                continue
            old += 1
        shown.append(line)
    return "\n".join(shown)


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def _erased_lines(
    raw_input: msgspec.Raw, erased: Mapping[int, int], *, sort_keys: bool
) -> dict[int, str] | None:
    """The lines (numbered from 1) of the recorded input, rendered as a diff renders it, that
    hold the text of the messages ``erased`` names, each with what is shown in its place; None
    if the input does not render line for line with its messages' content replaced."""
    value = json.loads(bytes(raw_input))
    before = codec.pretty(raw_input, sort_keys=sort_keys).split("\n")
    try:
        for number, position in erased.items():
            value["messages"][number]["content"] = f"[erased (position {position})]"
    except (KeyError, IndexError, TypeError):
        return None
    after = codec.pretty(msgspec.json.encode(value), sort_keys=sort_keys).split("\n")
    if len(before) != len(after):
        return None
    return {
        at: new
        for at, (old, new) in enumerate(zip(before, after, strict=True), start=1)
        if old != new
    }


def _withheld_note(erased: Mapping[int, int]) -> str:
    positions = ", ".join(str(p) for p in sorted(set(erased.values())))
    return f"excerpt withheld: it holds the text of documents erased at position {positions}"


def _request(raw_input: msgspec.Raw) -> GroundedRequest | None:
    """The recorded input as a grounded request, or None for one of another shape."""
    try:
        return codec.decode(raw_input, type=GroundedRequest)
    except (msgspec.ValidationError, TaintedSystemContentError):
        return None


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
        if change.query_terms is not None:
            lines.append(
                f"  note: its query has {change.query_terms:,} distinct terms and a search reads "
                f"the first {MAX_QUERY_TERMS} today (ADR 0016): a difference may be the "
                "search's, not the corpus's"
            )
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


def _terms_past_the_bound(raw_input: msgspec.Raw) -> int | None:
    """How many distinct terms a retrieval's recorded query has, if more than a search reads
    today (a recording made while the bound was 1,000 searched them all)."""
    try:
        recorded: object = codec.decode(raw_input)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    query = recorded.get("query") if isinstance(recorded, dict) else None
    if not isinstance(query, str):
        return None
    terms = len(dict.fromkeys(tokenize(query)))
    return terms if terms > MAX_QUERY_TERMS else None


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
    request = _request(raw_input)
    if request is None:
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
