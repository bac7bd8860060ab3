"""Answering a question from a corpus, with every nondeterministic step recorded.

This is the flow step loom exists for: retrieve (recorded by content), build the grounded
request (deterministic), ask the model (recorded WITH the request as its input), and check the
citations against what the model was shown. Because the request is the model decision's
recorded input, a replay that would send a different request, byte for byte, reports a
``DecisionInputChangedError`` with the diff; and because the passages are recorded by content,
it reproduces the request with the corpus gone.

A tool-using agent asks again with the conversation so far (``conversation``: the model's
assistant turns and the tool turns answering them, ``answer.to_message()`` and
``Message(role="tool", ...)``) and the ``tools`` it may call: both are part of the request, so
a tool that returns something else on replay shows up as that model decision's input diff.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from loom_knowledge.corpus.knowledge_base import DEFAULT_RETRIEVE_LIMIT, KnowledgeBase
from loom_knowledge.corpus.retrieval import MetaFilter, Mode
from loom_knowledge.domain.citations import CitationCheck, check_citations
from loom_knowledge.domain.grounding import (
    DEFAULT_INSTRUCTIONS,
    GroundedRequest,
    Message,
    ToolSpec,
    grounded_request,
)
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import InvalidArgumentError
from loom_knowledge.models.model import Answer, Model
from loom_runtime import AsyncFlowContext


class GroundedAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent saw, what it sent, what it answered, and whether its citations hold."""

    question: str
    passages: tuple[Passage, ...]
    request: GroundedRequest
    answer: Answer
    citations: CitationCheck


def answer_from_corpus(
    kb: KnowledgeBase,
    question: str,
    *,
    decide: Callable[..., Any],
    model: Model,
    instructions: str = DEFAULT_INSTRUCTIONS,
    limit: int = DEFAULT_RETRIEVE_LIMIT,
    conversation: Sequence[Message] = (),
    tools: Sequence[ToolSpec] = (),
    mode: Mode = "lexical",
    filter: MetaFilter | None = None,
) -> GroundedAnswer:
    """Retrieve, ground, ask and check, inside a (sync) flow; ``decide`` is ``ctx.decide``.

    ``conversation`` and ``tools`` are passed to
    :func:`~loom_knowledge.domain.grounding.grounded_request` (the turns after the question,
    the tools the model may call); the taint rules hold for them as for the passages.
    ``mode`` and ``filter`` are :meth:`KnowledgeBase.retrieve`'s.

    Raises :class:`InvalidArgumentError` inside an ``async def`` flow (its ``ctx.decide``
    returns awaitables): there, ``await kb.retrieve(...)``, build the request with
    :func:`~loom_knowledge.domain.grounding.grounded_request` and ``await ctx.decide`` the
    model call.
    """
    if isinstance(getattr(decide, "__self__", None), AsyncFlowContext):
        raise _needs_a_plain_flow()
    passages: list[Passage] = kb.retrieve(
        question, decide=decide, limit=limit, mode=mode, filter=filter
    )
    if inspect.isawaitable(passages):  # an async ctx.decide passed through a wrapper
        close = getattr(passages, "close", None)
        if close is not None:
            close()  # never awaited: nothing was retrieved or recorded
        raise _needs_a_plain_flow()
    request = grounded_request(
        instructions, question, passages, scope=kb.scope, conversation=conversation, tools=tools
    )
    answer: Answer = decide(
        "model",
        lambda: model.answer(request),
        input=request,
        type=Answer,
        kind="model",
    )
    return GroundedAnswer(
        question=question,
        passages=tuple(passages),
        request=request,
        answer=answer,
        citations=check_citations(answer.cited_doc_ids, passages),
    )


def _needs_a_plain_flow() -> InvalidArgumentError:
    return InvalidArgumentError(
        "answer_from_corpus needs a plain def flow (its decide returns values, an async def "
        "flow's ctx.decide awaitables); in an async def flow, await kb.retrieve(...), build "
        "the request with grounded_request(...) and await ctx.decide the model call"
    )
