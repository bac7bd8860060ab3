"""Audit: what did the agent know, what did it send, what did it answer?

An audit is read from two places that the log keeps consistent: the execution's recorded
decisions (the passages each retrieval returned, by content; the request each model call was
made with; the answer) and the corpus's revision history (is the revision a passage came from
still current, or was it superseded or removed since, and when?). Nothing is recomputed: an
audit of an execution is the same tomorrow, whatever happens to the corpus.

:func:`audit` returns a typed :class:`Audit`; ``msgspec.json.encode`` and the renderers in
:mod:`loom_knowledge.tools.audit_render` (text, one self-contained HTML page) present it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

from loom_knowledge.corpus.corpus_index import CorpusIndex
from loom_knowledge.corpus.erased_documents import DecisionErasures, Erasures, erased_messages
from loom_knowledge.domain.citations import CitationCheck, citations_against
from loom_knowledge.domain.grounding import UNTRUSTED_CONTENT_NOTE, GroundedRequest
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import TaintedSystemContentError
from loom_knowledge.models.model import Answer
from loom_runtime import (
    Decision,
    Execution,
    Labels,
    LogCorruptError,
    Loom,
    UtcTimestamp,
    codec,
)

Status = Literal["current", "superseded", "removed", "erased", "unknown"]
"""What became of a passage's revision; "erased": its document was erased (ADR 0055), and the
audit shows where (the forget event's position), never the text."""


class AuditedPassage(msgspec.Struct, frozen=True, kw_only=True):
    """One passage the agent was shown, and what has become of its revision since."""

    doc_id: str
    index: int
    revision: int
    text: str
    status: Status
    ended_at: UtcTimestamp | None = None
    ended_position: int | None = None


class AuditedRetrieval(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded retrieval: the query and the passages it returned.

    ``origin`` and ``meta`` are the decision's (see :class:`AuditedDecision`): in a fork, an
    ``"override"`` retrieval holds the passages the engineer asked "what if" with."""

    key: str
    scope: str
    query: str
    limit: int
    passages: tuple[AuditedPassage, ...]
    origin: str | None = None
    meta: Any = None
    imported: bool = False
    """Made in another log (by an imported execution, or inherited from one): its passages
    were that log's documents, their fate here ``unknown``."""


class AuditedModelCall(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded model call: the exact request, the answer, and its citation check."""

    key: str
    request: GroundedRequest | None
    answer: Answer | None
    citations: CitationCheck | None
    raw_input: str
    raw_output: str
    origin: str | None = None
    meta: Any = None
    """What was measured while calling (model, latency_ms, usage, attempts), as recorded."""
    error: str | None = None
    """What the call raised, when its last attempt failed."""
    erased: dict[int, int] = msgspec.field(default_factory=dict)
    """The request's messages whose document was erased since (ADR 0055): each one's index,
    and the position of the forget event. Their content is blank here, as in ``raw_input``."""


class AuditedDecision(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded decision the audit does not interpret, shown as recorded: the clock, a
    user's own kinds, or a user's decision labelled ``kind="retrieval"`` that is not in the
    shape :meth:`KnowledgeBase.retrieve` records (the label is the user's to choose too)."""

    key: str
    kind: str | None
    input: Any
    value: Any = None
    error: str | None = None
    origin: str | None = None
    """In a fork: ``"inherited"`` from the parent or ``"override"``; None if computed."""
    meta: Any = None
    """What was measured while deciding, as recorded (None if nothing was)."""


class AuditedReopening(msgspec.Struct, frozen=True, kw_only=True):
    """A failure of the execution that was reopened: what it raised, the failed decisions
    computed again, and the worker that reopened it."""

    error: str
    dropped: tuple[str, ...]
    worker: str


class _RetrievalRequest(msgspec.Struct, frozen=True):
    """The input :meth:`KnowledgeBase.retrieve` records; anything else is not loom's retrieval."""

    scope: str
    query: str
    limit: int


class Audit(msgspec.Struct, frozen=True, kw_only=True):
    """The whole account of one execution."""

    execution_id: UUID
    flow: str
    code_version: str
    log_position: int
    status: Literal["completed", "failed", "unfinished"]
    input: Any
    retrievals: tuple[AuditedRetrieval, ...]
    model_calls: tuple[AuditedModelCall, ...]
    output: Any = None
    error: str | None = None
    decisions: tuple[AuditedDecision, ...] = ()
    parent_id: UUID | None = None
    """The execution this one was forked from (its lineage), if it is a fork."""
    forked_at: int | None = None
    """How many of the parent's decisions the fork took."""
    reopenings: tuple[AuditedReopening, ...] = ()
    labels: Labels = Labels()
    """Who and what the execution ran for (tenant, user, session, tags), as given at start."""
    imported: bool = False
    """Whether it came from a bundle: its ``log_position`` is then the exporting log's, and
    its passages' fates are not this log's to tell (``unknown``; ADR 0013, amended
    "imported"). A fork made here of one is not: its inherited retrievals say so."""


def audit(loom: Loom, execution_id: UUID | str) -> Audit:
    """Build the audit of ``execution_id`` from its decisions and the corpus history."""
    execution = loom.execution(execution_id)
    erasures = DecisionErasures(loom, execution)
    index = erasures.index
    retrievals: list[AuditedRetrieval] = []
    others = []
    model_calls = []
    # In the order recorded: a model call can have been shown only what was retrieved before
    # it, never a document a later retrieval returned.
    retrieved: list[str] = []
    for decision in execution.decisions.values():
        if decision.kind == "model":
            model_calls.append(_model_call(decision, tuple(retrieved), erasures.of(decision.key)))
            continue
        found = _as_retrieval(decision) if decision.kind == "retrieval" else None
        if found is None:
            others.append(_generic(decision))
            continue
        imported = erasures.elsewhere(decision.key)
        retrievals.append(_retrieval(loom, index, decision, *found, imported=imported))
        retrieved.extend(passage.doc_id for passage in retrievals[-1].passages)
    return Audit(
        execution_id=execution.id,
        flow=execution.flow,
        code_version=execution.code_version,
        log_position=execution.log_position,
        status=_status(execution),
        input=_decoded(execution.input, "the execution's input"),
        retrievals=tuple(retrievals),
        model_calls=tuple(model_calls),
        output=None if execution.output is None else _decoded(execution.output, "its output"),
        error=None if execution.error is None else ": ".join(execution.error),
        decisions=tuple(others),
        parent_id=execution.parent_id,
        forked_at=execution.forked_at,
        reopenings=tuple(
            AuditedReopening(
                error=f"{r.error_type}: {r.message}", dropped=r.dropped, worker=r.worker
            )
            for r in execution.reopenings
        ),
        labels=execution.labels,
        imported=erasures.imported,
    )


def _status(execution: Execution) -> Literal["completed", "failed", "unfinished"]:
    if execution.output is not None:
        return "completed"
    return "failed" if execution.error is not None else "unfinished"


def _as_retrieval(decision: Decision) -> tuple[_RetrievalRequest, list[Passage]] | None:
    """The request and passages of a retrieval loom recorded, or None for any other shape."""
    request = _try_decode(decision.input, _RetrievalRequest)
    passages = _try_decode(decision.value, list[Passage])
    return None if request is None or passages is None else (request, passages)


def _generic(decision: Decision) -> AuditedDecision:
    failed = decision.error_type is not None
    return AuditedDecision(
        key=decision.key,
        kind=decision.kind,
        input=_decoded(decision.input, f"decision {decision.key!r}'s input"),
        value=None
        if failed or decision.value is None
        else _decoded(decision.value, f"decision {decision.key!r}'s value"),
        error=_error(decision),
        origin=decision.origin,
        meta=_meta(decision),
    )


def _meta(decision: Decision) -> Any:
    return (
        None
        if decision.meta is None
        else _decoded(decision.meta, f"decision {decision.key!r}'s meta")
    )


def _decoded(raw: msgspec.Raw, where: str) -> Any:
    """A recorded JSON value, decoded; one loom never writes (``1e400``, past a float's range;
    nesting past the decoder's depth: an edited row) is :class:`LogCorruptError`, naming it."""
    try:
        return codec.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise LogCorruptError(
            f"{where} holds a value loom never writes ({exc}); run `loom verify`: the row "
            "may have been edited"
        ) from exc


def _error(decision: Decision) -> str | None:
    failed = decision.error_type is not None
    return f"{decision.error_type}: {decision.message}" if failed else None


def _retrieval(
    loom: Loom,
    index: CorpusIndex,
    decision: Decision,
    request: _RetrievalRequest,
    passages: list[Passage],
    *,
    imported: bool,
) -> AuditedRetrieval:
    scope = request.scope
    if imported:  # another log's documents: their fate is not this log's to tell
        history: dict[tuple[str, int], tuple[int | None, str | None]] = {}
        erasures: dict[str, int] = {}
    else:
        history = index.revision_history(scope, {(p.doc_id, p.revision) for p in passages})
        erasures = index.erasures(scope)
    audited = []
    for passage in passages:
        ended = history.get((passage.doc_id, passage.revision))
        if passage.doc_id in erasures:  # every revision of it, superseded ones too
            status: Status = "erased"
            ended_position = erasures[passage.doc_id]
        elif ended is None:
            status = "unknown"
            ended_position = None
        else:
            ended_position, ended_by = ended
            status = "current" if ended_position is None else ended_by  # type: ignore[assignment]
        audited.append(
            AuditedPassage(
                doc_id=passage.doc_id,
                index=passage.index,
                revision=passage.revision,
                text="" if status == "erased" else passage.text,
                status=status,
                ended_position=ended_position,
                ended_at=None if ended_position is None else _time_at(loom, ended_position),
            )
        )
    return AuditedRetrieval(
        key=decision.key,
        scope=scope,
        query=request.query,
        limit=request.limit,
        passages=tuple(audited),
        origin=decision.origin,
        meta=_meta(decision),
        imported=imported,
    )


def _model_call(
    decision: Decision, retrieved: Sequence[str], erasures: Erasures
) -> AuditedModelCall:
    """One model call, its citations checked against the documents ITS request carried (by
    their provenance): a citation of a document another call of the execution was shown, or
    one of another scope with the same id, is ungrounded here, as the live check found it.
    A request of the flow's own making (:func:`_shown`) is checked against ``retrieved``, the
    documents the execution retrieved before the call.

    A passage of a document erased since shows no text (the retrieval rows show none either):
    its message is blanked, in the request and in ``raw_input`` rebuilt from it."""
    raw_input, raw_value = decision.input, decision.value
    request = _try_decode(raw_input, GroundedRequest)
    answer = _try_decode(raw_value, Answer)
    erased = erased_messages(request, erasures)
    if erased:
        assert request is not None
        messages = tuple(
            msgspec.structs.replace(message, content="") if number in erased else message
            for number, message in enumerate(request.messages)
        )
        request = msgspec.structs.replace(request, messages=messages)
        raw_input = msgspec.Raw(msgspec.json.encode(request))
    citations = None
    if answer is not None:
        citations = citations_against(answer.cited_doc_ids, _shown(request, retrieved))
    return AuditedModelCall(
        key=decision.key,
        request=request,
        answer=answer,
        citations=citations,
        raw_input=codec.pretty(raw_input),
        raw_output=codec.pretty(raw_value),
        origin=decision.origin,
        meta=_meta(decision),
        error=_error(decision),
        erased=erased,
    )


def _shown(request: GroundedRequest | None, retrieved: Sequence[str]) -> Sequence[str]:
    """The documents a model call was shown: those its request's fenced passages came from.

    A request of the flow's own making records none: one that is no :class:`GroundedRequest`,
    or one that decodes as one (a chat ``{"messages": [...]}`` it pasted retrieved text into)
    holding no passage and not built by ``grounded_request`` (whose system message ends in
    :data:`UNTRUSTED_CONTENT_NOTE`). ``retrieved`` is the only record of what it could show.
    A request ``grounded_request`` built without passages (its retrieval found nothing)
    showed no document, as the live check found."""
    if request is None:
        return retrieved
    carried = [m.provenance.doc_id for m in request.messages if m.provenance is not None]
    built_by_grounded_request = any(
        m.role == "system" and m.content.endswith(UNTRUSTED_CONTENT_NOTE) for m in request.messages
    )
    return carried if carried or built_by_grounded_request else retrieved


def _try_decode(raw: Any, into: type[Any]) -> Any:
    if raw is None:
        return None
    try:
        return codec.decode(raw, type=into)
    # A GroundedRequest refuses tainted system content even when decoded: a request of the
    # flow's own making may hold some (its prompt quoting a fence tag), and is then not one.
    except (msgspec.ValidationError, TaintedSystemContentError):
        return None


def _time_at(loom: Loom, position: int) -> datetime | None:
    stamped = loom.log.event_at(position)
    return stamped.timestamp if stamped is not None and stamped.position == position else None
