"""One search of a knowledge base on behalf of a framework retriever: recorded in a flow.

Both bridges answer through here, so the rule lives once: inside a flow the search is the
flow's ``retrieval`` decision (:meth:`KnowledgeBase.retrieve`, replayed from the log with the
corpus gone); outside any flow it is :meth:`KnowledgeBase.search`, which records nothing
because there is no execution to record it in. It never searches unrecorded inside a flow.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import cast

from loom_knowledge.corpus.knowledge_base import KnowledgeBase
from loom_knowledge.corpus.retrieval import MetaFilter, Mode
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import (
    InvalidArgumentError,
    InvalidOptionError,
    UnrecordedRetrievalError,
)
from loom_runtime import AsyncFlowContext, recorder


def search(
    knowledge_base: KnowledgeBase,
    query: str,
    *,
    limit: int,
    mode: Mode = "lexical",
    filter: MetaFilter | None = None,
) -> list[Passage]:
    """The passages for ``query`` (in ``mode``, with ``filter``, as the knowledge base's own
    :meth:`~KnowledgeBase.retrieve` takes them): recorded when a flow is running here."""
    _check(query, limit)
    ctx = recorder(f"retrieval:{knowledge_base.scope}")
    if ctx is None:  # outside a flow, or a part of a decision computed live
        return knowledge_base.search(query, limit=limit, mode=mode, filter=filter)
    if isinstance(ctx, AsyncFlowContext):
        raise UnrecordedRetrievalError(
            f"a retrieval from knowledge scope {knowledge_base.scope!r} was called "
            "synchronously inside the async flow "
            f"{ctx.flow!r}: it cannot be recorded there, so it was not run. Call the async "
            "method instead (retriever.ainvoke(...) in LangChain, retriever.aretrieve(...) in "
            "LlamaIndex)"
        )
    return knowledge_base.retrieve(query, decide=ctx.decide, limit=limit, mode=mode, filter=filter)


async def asearch(
    knowledge_base: KnowledgeBase,
    query: str,
    *,
    limit: int,
    mode: Mode = "lexical",
    filter: MetaFilter | None = None,
) -> list[Passage]:
    """The passages for ``query``, from async code: recorded when a flow is running here."""
    _check(query, limit)
    ctx = recorder(f"retrieval:{knowledge_base.scope}")
    if ctx is None:  # outside a flow, or a part of a decision computed live
        return knowledge_base.search(query, limit=limit, mode=mode, filter=filter)
    if isinstance(ctx, AsyncFlowContext):
        recorded = knowledge_base.retrieve(
            query, decide=ctx.decide, limit=limit, mode=mode, filter=filter
        )
        return await cast(Awaitable[list[Passage]], recorded)
    return knowledge_base.retrieve(query, decide=ctx.decide, limit=limit, mode=mode, filter=filter)


def check_knowledge_base(value: object) -> None:
    """Refuse, when a retriever is built, a ``knowledge_base`` that is not one: it failed at
    the first query with an untyped ``AttributeError`` (named by type only: an arbitrary
    object's ``repr`` can be anything)."""
    if not isinstance(value, KnowledgeBase):
        raise InvalidArgumentError(
            "knowledge_base must be a KnowledgeBase (open_knowledge_base(loom, scope)), not "
            f"a {type(value).__name__}"
        )


def _check(query: object, limit: object) -> None:
    """Refuse what a framework might pass through unchecked, before anything is read."""
    if not isinstance(query, str):
        raise InvalidOptionError(f"a retrieval query must be a string, not {query!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidOptionError(f"the number of passages to return must be >= 1, not {limit!r}")
