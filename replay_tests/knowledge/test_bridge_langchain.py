"""The LangChain bridge: LangChain's own retriever contract, and every retrieval recorded.

``RetrieversIntegrationTests`` is LangChain's standard test kit (``langchain-tests``), run
unmodified against :class:`KnowledgeBaseRetriever`. The rest proves what only loom promises:
inside a flow a chain's retrievals are decisions, so the flow replays to the same documents
after the corpus is deleted, and a retrieval that cannot be recorded is not run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from langchain_tests.integration_tests import RetrieversIntegrationTests
from langchain_text_splitters import RecursiveCharacterTextSplitter

from loom_knowledge import Doc, UnrecordedRetrievalError, format_passage_id, open_knowledge_base
from loom_knowledge.bridges.langchain import KnowledgeBaseRetriever, to_doc, to_document
from loom_knowledge.bridges.splitter_chunker import SplitterChunker
from loom_knowledge.errors import InvalidArgumentError, InvalidDocumentError, InvalidOptionError
from loom_runtime import Loom, tool

RUNBOOKS = [
    Doc(id="pool", text="Restart the connection pool when the pool is exhausted."),
    Doc(id="queue", text="Drain the queue before you restart the pool workers."),
    Doc(id="disk", text="When the disk is full, rotate the logs, then restart the pool."),
    Doc(id="dns", text="A DNS failure looks like a pool timeout: check the resolver first."),
    Doc(id="tls", text="Renew the certificate; nothing to do with the pool.", title="TLS"),
]


def _knowledge_base(directory: Path, scope: str = "runbooks") -> Any:
    loom = Loom(f"sqlite:///{directory / 'loom.db'}")
    kb = open_knowledge_base(loom, scope)
    kb.sync(RUNBOOKS)
    return kb


def _empty(kb: Any) -> None:
    """Remove every document: a live search finds nothing, so only the log can answer."""
    for doc in RUNBOOKS:
        kb.remove_doc(doc.id)
    assert kb.search("pool", limit=5) == []


# The kit's one async test relies on pytest-asyncio (which it installs); its other tests are
# sync, and the class-wide mark warns about each of them.
@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:.*marked with '@pytest.mark.asyncio' but it is not an async")
class TestLangChainRetrieverContract(RetrieversIntegrationTests):
    kit_kb: Any = None
    """The kit's corpus: it builds its retriever from a property, and its tests only read it."""

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _kit_corpus(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        """Made once for the class in the session's temporary folder: a folder made when the
        module was imported (at collection, even when none of its tests ran) was left behind
        in the system's temporary folder on every run."""
        cls.kit_kb = _knowledge_base(tmp_path_factory.mktemp("langchain-kit"))
        yield
        cls.kit_kb.loom.close()

    @property
    def retriever_constructor(self) -> type[KnowledgeBaseRetriever]:
        return KnowledgeBaseRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"knowledge_base": self.kit_kb, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "restart the pool"


def test_a_flow_records_the_chain_s_retrievals_and_replays_them_without_the_corpus(
    tmp_path: Path,
) -> None:
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    retriever = KnowledgeBaseRetriever(knowledge_base=kb, k=3)
    chain = retriever | RunnableLambda(lambda docs: [doc.id for doc in docs])

    @loom.flow("chain")
    def answer(ctx: Any, question: str) -> list[str]:
        return chain.invoke(question) + chain.invoke("rotate the logs", config={})

    recorded = loom.run("chain", question="restart the pool")
    searched = kb.search("restart the pool", limit=3)
    assert recorded.output[:3] == [format_passage_id(p.doc_id, p.index) for p in searched]
    decisions = loom.execution(recorded.execution_id).decisions.values()
    assert [d.kind for d in decisions] == ["retrieval", "retrieval"]

    _empty(kb)  # a search now would find nothing: only the log can answer the replay
    replay = loom.replay(recorded.execution_id)
    assert replay.identical, replay.describe()


def test_an_async_flow_records_through_ainvoke(tmp_path: Path) -> None:
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    retriever = KnowledgeBaseRetriever(knowledge_base=kb, k=2)

    @loom.flow("async-chain")
    async def answer(ctx: Any, question: str) -> list[str | None]:
        return [doc.id for doc in await retriever.ainvoke(question)]

    recorded = asyncio.run(loom.arun("async-chain", question="drain the queue"))
    assert recorded.output[0] == "queue#0"
    decisions = loom.execution(recorded.execution_id).decisions.values()
    assert [d.kind for d in decisions] == ["retrieval"]
    _empty(kb)
    replay = asyncio.run(loom.areplay(recorded.execution_id))
    assert replay.identical, replay.describe()


def test_a_retrieval_inside_a_tool_is_a_part_of_the_tool_s_decision(tmp_path: Path) -> None:
    """ADR 0002 "inside a decision": the tool is the record; a replay answers it and never
    searches, so a retrieval decision of its own would be one no replay asks for."""
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    retriever = KnowledgeBaseRetriever(knowledge_base=kb, k=2)

    @tool
    def search_runbooks(question: str) -> list[str | None]:
        return [doc.id for doc in retriever.invoke(question)]

    @loom.flow("tool-search")
    def answer(ctx: Any, question: str) -> list[str | None]:
        return search_runbooks(question)

    recorded = loom.run("tool-search", question="drain the queue")
    assert recorded.output[0] == "queue#0"
    decisions = loom.execution(recorded.execution_id).decisions
    assert [(key, d.kind) for key, d in decisions.items()] == [("tool:search_runbooks", "tool")]
    _empty(kb)
    replay = loom.replay(recorded.execution_id)
    assert replay.identical, replay.describe()
    assert replay.output == recorded.output


def test_a_sync_call_inside_an_async_flow_is_refused_not_run_unrecorded(tmp_path: Path) -> None:
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    retriever = KnowledgeBaseRetriever(knowledge_base=kb)

    @loom.flow("wrong-call")
    async def answer(ctx: Any) -> int:
        return len(retriever.invoke("pool"))

    with pytest.raises(UnrecordedRetrievalError, match="ainvoke"):
        asyncio.run(loom.arun("wrong-call"))


def test_outside_a_flow_it_searches_the_current_corpus(tmp_path: Path) -> None:
    kb = _knowledge_base(tmp_path)
    position = kb.loom.log.position
    found = KnowledgeBaseRetriever(knowledge_base=kb, k=1).invoke("certificate")
    assert [doc.id for doc in found] == ["tls#0"]
    assert found[0].metadata == {"doc_id": "tls", "index": 0, "revision": 1, "title": "TLS"}
    assert kb.loom.log.position == position  # nothing recorded


@pytest.mark.parametrize("k", [0, -1, True, "3"])
def test_a_bad_k_is_refused_before_searching(tmp_path: Path, k: object) -> None:
    kb = _knowledge_base(tmp_path)
    with pytest.raises(ValueError, match=">= 1"):
        KnowledgeBaseRetriever(knowledge_base=kb).invoke("pool", k=k)


@pytest.mark.parametrize("filter", [{}, {"team": []}, {"": "x"}, {"n": float("nan")}])
def test_a_bad_filter_or_k_is_refused_when_the_retriever_is_built(
    tmp_path: Path, filter: object
) -> None:
    """As the LlamaIndex retriever refuses them: pydantic checked the filter's shape only, so
    a filter no search accepts was taken, and refused at the first query of a chain."""
    kb = _knowledge_base(tmp_path)
    with pytest.raises(ValueError, match="filter"):
        KnowledgeBaseRetriever(knowledge_base=kb, filter=filter)
    with pytest.raises(ValueError, match="limit"):
        KnowledgeBaseRetriever(knowledge_base=kb, k=0)
    assert KnowledgeBaseRetriever(knowledge_base=kb, filter={"team": "db"}).filter  # control


@pytest.mark.parametrize(
    "options",
    [
        {"k": True},
        {"k": "3"},
        {"k": 2.0},
        {"k": None},
        {"filter": {"team": {"sre", "db"}}},
        {"filter": {"team": "sre", "n": float("nan")}},
        {"mode": "dense"},
    ],
)
def test_options_are_refused_on_their_raw_values_with_the_knowledge_base_s_error(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    """Pydantic coerced before the check ran: ``k=True`` became 1 and ``"3"`` 3, and a set
    inside a filter became a list in hash order, recorded so (a replay under another
    PYTHONHASHSEED diverged); what it refused was its own ValidationError. The raw values
    are checked now, as the LlamaIndex retriever and ``kb.retrieve`` check them."""
    kb = _knowledge_base(tmp_path)
    with pytest.raises(InvalidOptionError):
        KnowledgeBaseRetriever(knowledge_base=kb, **options)
    with pytest.raises(ValueError, match=r"limit|filter|mode"):  # pydantic's own entry too
        KnowledgeBaseRetriever.model_validate({"knowledge_base": kb, **options})
    built = KnowledgeBaseRetriever(knowledge_base=kb, k=3, filter={"team": ("sre", "db")})
    assert (built.k, built.filter) == (3, {"team": ("sre", "db")})  # the control


@pytest.mark.parametrize("knowledge_base", [None, "runbooks"])
def test_a_knowledge_base_that_is_not_one_is_refused_when_built(knowledge_base: object) -> None:
    """Refused with the same typed error as the LlamaIndex retriever, not pydantic's."""
    with pytest.raises(InvalidArgumentError, match="KnowledgeBase"):
        KnowledgeBaseRetriever(knowledge_base=knowledge_base)  # type: ignore[arg-type]


def test_a_title_that_is_not_text_stays_in_the_meta() -> None:
    """A loader's ``title`` that is not a string was dropped: lost on ingest. It stays in the
    meta."""
    loaded = Document(page_content="x", metadata={"source": "a.md", "title": 2024})
    assert to_doc(loaded, id_key="source").meta == {"title": 2024}
    titled = Document(page_content="x", metadata={"source": "b.md", "title": "B"})
    assert to_doc(titled, id_key="source").title == "B"  # the control


def test_documents_convert_both_ways(tmp_path: Path) -> None:
    loaded = Document(
        page_content="Fail over to the replica.",
        metadata={"source": "runbooks/failover.md", "title": "Failover", "team": "db"},
    )
    doc = to_doc(loaded, id_key="source")
    assert doc == Doc(
        id="runbooks/failover.md",
        text="Fail over to the replica.",
        title="Failover",
        meta={"team": "db"},
    )
    with pytest.raises(InvalidDocumentError, match="id_key"):
        to_doc(Document(page_content="no id here"))
    kb = _knowledge_base(tmp_path)
    kb.put_doc(doc)
    (passage,) = kb.search("replica", limit=1)
    assert to_document(passage).metadata["team"] == "db"
    assert to_document(passage).id == "runbooks/failover.md#0"


def test_a_langchain_splitter_cuts_the_corpus(tmp_path: Path) -> None:
    splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0)
    loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")
    kb = open_knowledge_base(loom, "split", chunker=SplitterChunker(splitter))
    kb.sync([RUNBOOKS[2]])
    texts = [p.text for p in kb.passages()]
    assert texts == splitter.split_text(RUNBOOKS[2].text) and len(texts) > 1
    assert open_knowledge_base(loom, "split", chunker=SplitterChunker(splitter)) is kb
