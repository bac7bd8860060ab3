"""The LlamaIndex bridge: a query engine over a knowledge base, every retrieval recorded.

LlamaIndex has no standard test kit for retrievers; its contract is what its own query
engines call: ``retrieve``/``aretrieve`` with a string or ``QueryBundle``, nodes with scores
back. ``RetrieverQueryEngine`` with LlamaIndex's ``MockLLM`` drives it here, as an app would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from loom_knowledge import Doc, UnrecordedRetrievalError, open_knowledge_base
from loom_knowledge.bridges.splitter_chunker import SplitterChunker
from loom_knowledge.errors import InvalidArgumentError, InvalidDocumentError
from loom_runtime import Loom
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    from llama_index.core import llms, node_parser, query_engine, readers, schema

    from loom_knowledge.bridges import llamaindex as bridge
else:
    llms = deferred("llama_index.core.llms")
    node_parser = deferred("llama_index.core.node_parser")
    query_engine = deferred("llama_index.core.query_engine")
    readers = deferred("llama_index.core.readers")
    schema = deferred("llama_index.core.schema")
    bridge = deferred("loom_knowledge.bridges.llamaindex")

pytestmark = pytest.mark.xdist_group("llamaindex-sdk")  # one worker imports the SDK

RUNBOOKS = [
    Doc(id="pool", text="Restart the connection pool when the pool is exhausted."),
    Doc(id="queue", text="Drain the queue before you restart the pool workers."),
    Doc(id="tls", text="Renew the certificate; nothing to do with the pool.", title="TLS"),
]


def _knowledge_base(directory: Path) -> Any:
    kb = open_knowledge_base(Loom(f"sqlite:///{directory / 'loom.db'}"), "runbooks")
    kb.sync(RUNBOOKS)
    return kb


def _empty(kb: Any) -> None:
    """Remove every document: a live search finds nothing, so only the log can answer."""
    for doc in RUNBOOKS:
        kb.remove_doc(doc.id)
    assert kb.search("pool", limit=5) == []


def test_the_retriever_answers_like_any_llamaindex_retriever(tmp_path: Path) -> None:
    retriever = bridge.KnowledgeBaseRetriever(
        knowledge_base=_knowledge_base(tmp_path), similarity_top_k=2
    )
    by_string = retriever.retrieve("restart the pool")
    by_bundle = retriever.retrieve(schema.QueryBundle(query_str="restart the pool"))
    assert len(by_string) == 2 and all(isinstance(n, schema.NodeWithScore) for n in by_string)
    assert [n.node.node_id for n in by_string] == [n.node.node_id for n in by_bundle]
    assert by_string[0].node.node_id == "pool#0"
    assert asyncio.run(retriever.aretrieve("restart the pool"))[0].node.node_id == "pool#0"


def test_a_query_engine_in_a_flow_replays_without_the_corpus(tmp_path: Path) -> None:
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    engine = query_engine.RetrieverQueryEngine.from_args(
        bridge.KnowledgeBaseRetriever(knowledge_base=kb, similarity_top_k=2), llm=llms.MockLLM()
    )

    @loom.flow("query-engine")
    def answer(ctx: Any, question: str) -> list[str]:
        response = engine.query(question)
        return [n.node.node_id for n in response.source_nodes]

    recorded = loom.run("query-engine", question="drain the queue")
    assert recorded.output[0] == "queue#0"
    decisions = loom.execution(recorded.execution_id).decisions.values()
    assert [d.kind for d in decisions] == ["retrieval"]
    _empty(kb)
    replay = loom.replay(recorded.execution_id)
    assert replay.identical, replay.describe()


def test_an_async_flow_records_through_aretrieve_and_refuses_retrieve(tmp_path: Path) -> None:
    kb = _knowledge_base(tmp_path)
    loom = kb.loom
    retriever = bridge.KnowledgeBaseRetriever(knowledge_base=kb, similarity_top_k=1)

    @loom.flow("async-retrieve")
    async def good(ctx: Any) -> str:
        return (await retriever.aretrieve("certificate"))[0].node.node_id

    @loom.flow("sync-in-async")
    async def bad(ctx: Any) -> int:
        return len(retriever.retrieve("certificate"))

    recorded = asyncio.run(loom.arun("async-retrieve"))
    assert recorded.output == "tls#0"
    _empty(kb)
    assert asyncio.run(loom.areplay(recorded.execution_id)).identical
    with pytest.raises(UnrecordedRetrievalError, match="aretrieve"):
        asyncio.run(loom.arun("sync-in-async"))


def test_documents_and_nodes_convert(tmp_path: Path) -> None:
    read = schema.Document(
        text="Fail over.", metadata={"file_path": "ops/failover.md", "team": "db"}
    )
    assert bridge.to_doc(read, id_key="file_path") == Doc(
        id="ops/failover.md", text="Fail over.", meta={"team": "db"}
    )
    assert bridge.to_doc(schema.Document(text="x", doc_id="given")).id == "given"
    with pytest.raises(InvalidDocumentError, match="file_path"):
        bridge.to_doc(schema.Document(text="x"), id_key="file_path")
    (passage,) = _knowledge_base(tmp_path).search("certificate", limit=1)
    node = bridge.to_node(passage)
    assert isinstance(node, schema.TextNode) and node.node_id == "tls#0"
    assert node.metadata == {"doc_id": "tls", "index": 0, "revision": 1, "title": "TLS"}
    assert node.ref_doc_id == "tls"  # as the docstring says: its source is the document


def test_a_document_with_the_id_llamaindex_made_up_is_refused(tmp_path: Path) -> None:
    """A reader without ``filename_as_id`` leaves LlamaIndex's random uuid as the id, which
    was taken: every read of the same file was a new document to sync (ADR 0041 promised
    the refusal). An id a reader or the caller set, or one read back from a docstore, is
    taken."""
    made_up = schema.Document(text="Rotate the logs.", metadata={"file_path": "logs.md"})
    with pytest.raises(InvalidDocumentError, match="filename_as_id"):
        bridge.to_doc(made_up)
    assert bridge.to_doc(made_up, id_key="file_path").id == "logs.md"
    assert bridge.to_doc(schema.Document(text="x", id_="given")).id == "given"
    reloaded = schema.Document.from_dict(schema.Document(text="x", doc_id="kept").to_dict())
    assert bridge.to_doc(reloaded).id == "kept"
    (tmp_path / "logs.md").write_text("Rotate the logs weekly.")
    reader = readers.SimpleDirectoryReader(input_files=[tmp_path / "logs.md"], filename_as_id=True)
    assert [bridge.to_doc(doc).id for doc in reader.load_data()] == [str(tmp_path / "logs.md")]


@pytest.mark.parametrize("knowledge_base", [None, "runbooks"])
def test_a_knowledge_base_that_is_not_one_is_refused_when_built(knowledge_base: object) -> None:
    """It was taken, and the first query failed with an AttributeError; refused with the
    LangChain retriever's typed error now."""
    with pytest.raises(InvalidArgumentError, match="KnowledgeBase"):
        bridge.KnowledgeBaseRetriever(knowledge_base=knowledge_base)


def test_a_title_that_is_not_text_stays_in_the_meta() -> None:
    """A reader's ``title`` that is not a string (a year, a list) was popped from the metadata
    and then dropped for not being a title: lost on ingest. It stays in the meta."""
    read = schema.Document(text="x", metadata={"file_path": "a.md", "title": 2024, "team": "sre"})
    assert bridge.to_doc(read, id_key="file_path").meta == {"title": 2024, "team": "sre"}
    titled = schema.Document(text="x", metadata={"file_path": "b.md", "title": "B"})
    assert bridge.to_doc(titled, id_key="file_path").title == "B"  # the control


def test_a_llamaindex_parser_cuts_the_corpus(tmp_path: Path) -> None:
    parser = node_parser.SentenceSplitter(chunk_size=12, chunk_overlap=0)
    kb = open_knowledge_base(
        Loom(f"sqlite:///{tmp_path / 'loom.db'}"), "split", chunker=SplitterChunker(parser)
    )
    long_doc = Doc(id="long", text=" ".join(doc.text for doc in RUNBOOKS))
    kb.sync([long_doc])
    texts = [p.text for p in kb.passages()]
    assert texts == parser.split_text(long_doc.text) and len(texts) > 1


def test_a_parser_s_settings_are_the_chunker_s_identity(tmp_path: Path) -> None:
    """A node parser's fields are its settings: a scope reopened with another ``chunk_size``
    is cut again at its next sync (it reported every document unchanged, cut the old way)."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    long_doc = Doc(id="long", text=" ".join(doc.text for doc in RUNBOOKS))

    def cut(chunk_size: int) -> list[str]:
        parser = node_parser.SentenceSplitter(chunk_size=chunk_size, chunk_overlap=0)
        with Loom(url) as loom:
            kb = open_knowledge_base(loom, "split", chunker=SplitterChunker(parser))
            kb.sync([long_doc])
            return [p.text for p in kb.passages()]

    assert len(cut(1000)) == 1
    assert cut(12) == node_parser.SentenceSplitter(chunk_size=12, chunk_overlap=0).split_text(
        long_doc.text
    )

    def identity(chunk_size: int) -> str:
        parser = node_parser.SentenceSplitter(chunk_size=chunk_size, chunk_overlap=0)
        return SplitterChunker(parser).identity

    assert identity(12) == identity(12) != identity(13)
