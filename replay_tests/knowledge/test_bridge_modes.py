"""Both framework bridges retrieve in any mode the knowledge base answers, with a meta filter,
recorded like the knowledge base's own retrieval (ADR 0041, ADR 0045).

A retriever built with ``mode="hybrid"`` and ``filter=`` answers what ``kb.search`` answers
with the same options; inside a flow the answer is one ``retrieval`` decision whose input
carries the mode and the filter, and it replays identically with the corpus emptied.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.bridges.langchain import KnowledgeBaseRetriever as LangChainRetriever
from loom_knowledge.errors import InvalidArgumentError
from loom_memory import HashingEmbedder
from loom_runtime import Loom, codec
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    from loom_knowledge.bridges import llamaindex
else:  # imported by the tests that use it, on the llamaindex-sdk worker (ADR 0031)
    llamaindex = deferred("loom_knowledge.bridges.llamaindex")

pytest.importorskip("numpy")

RUNBOOKS = [
    Doc(id="pool", text="Restart the connection pool when it is exhausted.", meta={"team": "db"}),
    Doc(id="queue", text="Drain the queue, then restart the pool workers.", meta={"team": "sre"}),
    Doc(id="disk", text="When the disk is full, rotate logs and restart.", meta={"team": "sre"}),
    Doc(id="tls", text="Renew the certificate before it expires.", meta={"team": "sec"}),
]
QUESTION = "restart the pool"
SRE = {"team": "sre"}


def _knowledge_base(directory: Path) -> Any:
    loom = Loom(f"sqlite:///{directory / 'loom.db'}")
    kb = open_knowledge_base(loom, "runbooks", embedder=HashingEmbedder(), min_score=0.0)
    kb.sync(RUNBOOKS)
    return kb


def _langchain(kb: Any) -> list[str]:
    retriever = LangChainRetriever(knowledge_base=kb, k=3, mode="hybrid", filter=SRE)
    return [str(document.id) for document in retriever.invoke(QUESTION)]


def _llamaindex(kb: Any) -> list[str]:
    retriever = llamaindex.KnowledgeBaseRetriever(
        knowledge_base=kb, similarity_top_k=3, mode="hybrid", filter=SRE
    )
    return [node.node.node_id for node in retriever.retrieve(QUESTION)]


@pytest.mark.parametrize(
    "ask",
    [_langchain, pytest.param(_llamaindex, marks=pytest.mark.xdist_group("llamaindex-sdk"))],
    ids=["langchain", "llamaindex"],
)
def test_a_bridge_retrieves_hybrid_and_filtered_recorded_and_replayable(
    tmp_path: Path, ask: Any
) -> None:
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    expected = [f"{p.doc_id}#{p.index}" for p in kb.search(QUESTION, limit=3, mode="hybrid",
                                                            filter=SRE)]  # fmt: skip
    assert expected and {entry.split("#")[0] for entry in expected} <= {"queue", "disk"}
    assert ask(kb) == expected  # outside a flow: a plain search

    @loom.flow("bridge")
    def answer(ctx: Any) -> list[str]:
        return ask(kb)

    recorded = loom.run("bridge")
    assert recorded.output == expected
    [retrieval] = [
        decision
        for decision in loom.execution(recorded.execution_id).decisions.values()
        if decision.kind == "retrieval"
    ]
    recorded_input = codec.decode(retrieval.input)
    assert recorded_input["mode"] == "hybrid" and recorded_input["filter"] == {"team": ["sre"]}

    for doc in RUNBOOKS:
        kb.remove_doc(doc.id)
    replay = loom.replay(recorded.execution_id)
    assert replay.identical, replay.describe()


@pytest.mark.xdist_group("llamaindex-sdk")
def test_a_bridge_refuses_a_mode_or_filter_the_knowledge_base_does_not_know_when_built(
    tmp_path: Path,
) -> None:
    """Refused at construction, not at the first query of a chain (LangChain's with the
    knowledge base's own typed error, checked before pydantic coerces anything)."""
    kb = _knowledge_base(tmp_path)
    with pytest.raises(ValueError, match="mode"):
        LangChainRetriever(knowledge_base=kb, mode="semantic")
    with pytest.raises(ValueError, match="mode"):
        llamaindex.KnowledgeBaseRetriever(knowledge_base=kb, mode="semantic")
    with pytest.raises(ValueError, match="filter"):
        llamaindex.KnowledgeBaseRetriever(knowledge_base=kb, filter={"team": {"$in": ["sre"]}})


async def _langchain_async(kb: Any, mode: str) -> list[str]:
    retriever = LangChainRetriever(knowledge_base=kb, k=3, mode=mode)  # type: ignore[arg-type]
    return [str(document.id) for document in await retriever.ainvoke(QUESTION)]


async def _llamaindex_async(kb: Any, mode: str) -> list[str]:
    retriever = llamaindex.KnowledgeBaseRetriever(knowledge_base=kb, mode=mode)  # type: ignore[arg-type]
    return [node.node.node_id for node in await retriever.aretrieve(QUESTION)]


@pytest.mark.parametrize(
    "ask",
    [
        _langchain_async,
        pytest.param(_llamaindex_async, marks=pytest.mark.xdist_group("llamaindex-sdk")),
    ],
    ids=["langchain", "llamaindex"],
)
def test_an_async_flow_retrieves_lexically_and_is_told_a_vector_mode_needs_a_def_flow(
    tmp_path: Path, ask: Any
) -> None:
    """What both guides say: ``ainvoke``/``aretrieve`` record a lexical retrieval in an
    async flow; a hybrid one records two decisions in turn and raises InvalidArgumentError
    there, before anything is recorded."""
    kb = _knowledge_base(tmp_path)
    loom = kb.loom

    @loom.flow("async-bridge")
    async def answer(ctx: Any, mode: str) -> list[str]:
        return await ask(kb, mode)

    assert asyncio.run(loom.arun("async-bridge", mode="lexical")).output
    with pytest.raises(InvalidArgumentError, match="plain def flow"):
        asyncio.run(loom.arun("async-bridge", mode="hybrid"))
