"""A loom knowledge base as a LangChain retriever, and LangChain's documents and splitters
as loom's.

``KnowledgeBaseRetriever(knowledge_base=kb, k=4)`` is a ``BaseRetriever``: a chain (LCEL,
``create_retrieval_chain``, a LangGraph node) calls ``invoke``/``ainvoke`` as it would on any
retriever. Inside a loom flow every call is recorded as the flow's ``retrieval`` decision, so
the chain replays to the same documents with the corpus deleted; outside a flow it searches
the current corpus and records nothing (see :mod:`loom_knowledge.bridges.recorded_search`).

Needs ``langchain-core`` (the ``langchain`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping
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
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, model_validator
except ImportError as exc:  # the langchain extra is not installed
    raise MissingExtraError(
        extra="langchain",
        missing=exc.name or "langchain-core",
        needed_by="the LangChain bridge (loom_knowledge.bridges.langchain)",
    ) from exc

__all__ = ["KnowledgeBaseRetriever", "SplitterChunker", "to_doc", "to_document"]

PASSAGE_KEYS = ("doc_id", "index", "revision", "title")
"""The metadata keys a retrieved document carries about its passage, besides the doc's meta."""


class KnowledgeBaseRetriever(BaseRetriever):
    """The ``k`` best passages of a knowledge base for a query, as LangChain ``Document``\\ s.

    ``invoke(query, k=2)`` overrides ``k`` for one call (LangChain's retriever convention).
    ``mode`` and ``filter`` choose the retrieval as :meth:`KnowledgeBase.retrieve` does.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    knowledge_base: KnowledgeBase
    k: int = DEFAULT_RETRIEVE_LIMIT
    mode: Mode = "lexical"
    """``"lexical"``, ``"vector"`` or ``"hybrid"``: as :meth:`KnowledgeBase.retrieve` takes it."""
    filter: MetaFilter | None = None
    """A filter on the documents' meta, as :meth:`KnowledgeBase.retrieve` takes it."""

    def __init__(self, **data: Any) -> None:
        """Checked before pydantic sees the options, so a refusal is the knowledge base's own
        typed error (pydantic wraps a ``ValueError`` raised in a validator in its
        ``ValidationError``); the validator below then checks the same values again."""
        _check_options(data)
        super().__init__(**data)

    @model_validator(mode="before")
    @classmethod
    def _refuse_what_no_search_takes(cls, data: Any) -> Any:
        """The raw options, checked as the LlamaIndex retriever and ``kb.retrieve`` check them,
        before pydantic's lax mode coerces them: it made ``k=True`` 1 and ``"3"`` 3, and a set
        inside ``filter`` a list in hash order, which a replay under another PYTHONHASHSEED
        saw as another input. Also the path ``model_validate`` takes, which skips
        ``__init__``."""
        if isinstance(data, Mapping):
            _check_options(data)
        return data

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        limit = self.k if k is None else k
        passages = recorded_search.search(
            self.knowledge_base, query, limit=limit, mode=self.mode, filter=self.filter
        )
        return [to_document(passage) for passage in passages]

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        limit = self.k if k is None else k
        passages = await recorded_search.asearch(
            self.knowledge_base, query, limit=limit, mode=self.mode, filter=self.filter
        )
        return [to_document(passage) for passage in passages]


def _check_options(data: Mapping[str, Any]) -> None:
    """Refuse a retriever's raw options that no search takes: a ``knowledge_base`` that is not
    one (:class:`InvalidArgumentError`, as the LlamaIndex retriever), a ``k``, ``mode`` or
    ``filter`` outside what :meth:`KnowledgeBase.retrieve` takes (:class:`InvalidOptionError`,
    with its own checks)."""
    recorded_search.check_knowledge_base(data.get("knowledge_base"))
    fields = KnowledgeBaseRetriever.model_fields
    check_arguments(
        "", data.get("mode", fields["mode"].default), data.get("k", fields["k"].default)
    )
    check_filter(data.get("filter"))


def to_document(passage: Passage) -> Document:
    """A retrieved passage as a LangChain ``Document``.

    ``id`` is the passage's entry id (``doc#index``); ``metadata`` holds the document's own
    meta and, over it, ``doc_id``, ``index``, ``revision`` and (when set) ``title``, so a
    citation can name the exact revision an answer came from.
    """
    metadata: dict[str, Any] = dict(passage.meta or {})
    metadata.update(doc_id=passage.doc_id, index=passage.index, revision=passage.revision)
    if passage.title is not None:
        metadata["title"] = passage.title
    return Document(
        page_content=passage.text,
        metadata=metadata,
        id=format_passage_id(passage.doc_id, passage.index),
    )


def to_doc(document: Document, *, id_key: str = "id") -> Doc:
    """A LangChain ``Document`` (from a LangChain loader) as a loom :class:`Doc` to ingest.

    The id is ``document.id``, else ``metadata[id_key]`` (loaders put the path under
    ``source``: pass ``id_key="source"``). A document with neither is refused: a corpus syncs
    by id, and an id made up here would make every sync see a new document. ``title`` comes
    from ``metadata["title"]`` when it is a string; the rest of the metadata (any other
    title included) becomes the doc's meta, checked as any meta is: JSON values only.
    """
    metadata: Mapping[str, Any] = document.metadata or {}
    doc_id = document.id if document.id is not None else metadata.get(id_key)
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise InvalidDocumentError(
            doc_id=doc_id,
            field="id",
            reason=(
                f"is missing: the LangChain Document has no .id and no metadata[{id_key!r}] "
                "(a corpus syncs by a stable id; pass id_key= naming the metadata key that "
                "holds one, such as 'source')"
            ),
        )
    title = metadata.get("title")
    titled = isinstance(title, str)  # any other title stays in the meta: nothing is dropped
    meta = {
        key: value
        for key, value in metadata.items()
        if key != id_key and not (titled and key == "title")
    }
    return Doc(
        id=doc_id, text=document.page_content, title=title if titled else None, meta=meta or None
    )
