"""A loom knowledge base as a LlamaIndex retriever, and LlamaIndex's documents and node
parsers as loom's.

``KnowledgeBaseRetriever(knowledge_base=kb, similarity_top_k=4)`` is a LlamaIndex
``BaseRetriever``: ``RetrieverQueryEngine.from_args(retriever, llm=...)`` and friends call
``retrieve``/``aretrieve`` as on any retriever. Inside a loom flow every call is recorded as
the flow's ``retrieval`` decision, so the query engine replays to the same nodes with the
corpus deleted; outside a flow it searches the current corpus and records nothing (see
:mod:`loom_knowledge.bridges.recorded_search`).

Needs ``llama-index-core`` (the ``llamaindex`` extra).
"""

from __future__ import annotations

from typing import Any

from loom_knowledge.bridges import recorded_search
from loom_knowledge.bridges.splitter_chunker import SplitterChunker
from loom_knowledge.corpus.knowledge_base import DEFAULT_RETRIEVE_LIMIT, KnowledgeBase
from loom_knowledge.corpus.retrieval import MetaFilter, Mode, check_arguments, check_filter
from loom_knowledge.domain.passage_entry import format_passage_id
from loom_knowledge.domain.types import Doc, Passage
from loom_knowledge.errors import InvalidDocumentError
from loom_runtime import MissingExtraError

try:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import (
        Document,
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError as exc:  # the llamaindex extra is not installed
    raise MissingExtraError(
        extra="llamaindex",
        missing=exc.name or "llama-index-core",
        needed_by="the LlamaIndex bridge (loom_knowledge.bridges.llamaindex)",
    ) from exc

__all__ = ["KnowledgeBaseRetriever", "SplitterChunker", "to_doc", "to_node"]


class KnowledgeBaseRetriever(BaseRetriever):
    """The ``similarity_top_k`` best passages of a knowledge base, as LlamaIndex nodes
    (retrieved in ``mode`` with ``filter``, as :meth:`KnowledgeBase.retrieve` takes them).

    A node's score is None: loom returns passages in rank order and records that order, not
    a score (BM25 scores are not comparable across queries, so none is invented here).
    """

    def __init__(
        self,
        *,
        knowledge_base: KnowledgeBase,
        similarity_top_k: int = DEFAULT_RETRIEVE_LIMIT,
        mode: Mode = "lexical",
        filter: MetaFilter | None = None,
        **kwargs: Any,
    ) -> None:
        recorded_search.check_knowledge_base(knowledge_base)  # as the LangChain retriever's
        check_arguments("", mode, similarity_top_k)  # refused here, not at the first query
        check_filter(filter)
        super().__init__(**kwargs)
        self.knowledge_base = knowledge_base
        self.similarity_top_k = similarity_top_k
        self.mode: Mode = mode
        self.filter = filter

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        passages = recorded_search.search(
            self.knowledge_base,
            query_bundle.query_str,
            limit=self.similarity_top_k,
            mode=self.mode,
            filter=self.filter,
        )
        return [NodeWithScore(node=to_node(passage), score=None) for passage in passages]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        passages = await recorded_search.asearch(
            self.knowledge_base,
            query_bundle.query_str,
            limit=self.similarity_top_k,
            mode=self.mode,
            filter=self.filter,
        )
        return [NodeWithScore(node=to_node(passage), score=None) for passage in passages]


def to_node(passage: Passage) -> TextNode:
    """A retrieved passage as a LlamaIndex ``TextNode``: its id is the passage's entry id
    (``doc#index``), its ``ref_doc_id`` the document's; metadata as in the LangChain bridge
    (the doc's meta, then ``doc_id``, ``index``, ``revision`` and ``title``)."""
    metadata: dict[str, Any] = dict(passage.meta or {})
    metadata.update(doc_id=passage.doc_id, index=passage.index, revision=passage.revision)
    if passage.title is not None:
        metadata["title"] = passage.title
    return TextNode(
        id_=format_passage_id(passage.doc_id, passage.index),
        text=passage.text,
        metadata=metadata,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=passage.doc_id)},
    )


def to_doc(document: Document, *, id_key: str | None = None) -> Doc:
    """A LlamaIndex ``Document`` (from a reader) as a loom :class:`Doc` to ingest.

    The id is ``metadata[id_key]`` when ``id_key`` is given (``SimpleDirectoryReader`` puts
    the path under ``file_path``), else the document's ``doc_id`` when it was set: by the
    reader (``filename_as_id=True``), by you, or read back from a docstore. A document whose
    id LlamaIndex made up at random (a reader that sets none) is refused, as ADR 0041 says: a
    made-up id would make every sync see new documents.
    """
    metadata: dict[str, Any] = dict(document.metadata or {})
    if id_key is None:
        if "id_" not in document.model_fields_set:
            raise InvalidDocumentError(
                doc_id=document.doc_id,
                field="id",
                reason=(
                    "was made up at random by LlamaIndex (the reader set none), so every "
                    "read would be a new document to sync: pass filename_as_id=True to the "
                    "reader, set the Document's id_, or name an id_key such as 'file_path'"
                ),
            )
        doc_id: object = document.doc_id
    else:
        doc_id = metadata.get(id_key)
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise InvalidDocumentError(
            doc_id=doc_id,
            field="id",
            reason=f"is missing: the LlamaIndex Document has no metadata[{id_key!r}]",
        )
    title = metadata.get("title")
    titled = isinstance(title, str)  # any other title stays in the meta: nothing is dropped
    if titled:
        del metadata["title"]
    if id_key is not None:
        metadata.pop(id_key, None)
    return Doc(
        id=doc_id, text=document.text, title=title if titled else None, meta=metadata or None
    )
