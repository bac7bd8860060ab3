"""Document corpora for grounded answers: documents, passages, reconciles, prompts, citations.

A corpus is edited in DOCUMENTS and searched in PASSAGES; this package owns the mapping between
the two and the rules around it, and nothing else (ranking belongs to the memory store, order
and replay to the log). The pieces here are pure and need no database:

* :class:`Doc`, :class:`Passage`, :class:`DocRecord`, :class:`SyncResult`: the values.
* :func:`fingerprint`: has a document changed (title, text and meta, canonically hashed)?
* :func:`pack_paragraphs` / :class:`Chunker`: how a document becomes passages.
* :func:`format_passage_id` / :func:`parse_passage_id` / :func:`passage_content`: how a passage
  is stored, and what of it is searchable (ADR 0007).
* :func:`reconcile`: the classification ``sync`` and ``plan_sync`` share, with the
  one-writer-per-document rule (ADR 0005) and the mass-delete guard (ADR 0006).
* :func:`grounded_request`, :func:`check_citations`, :func:`assert_grounded`: the prompt
  boundary, where passages and tool results stay untrusted and citations are checked against
  what was shown; :class:`ToolCall` / :class:`ToolSpec` for tool-using conversations.
* :class:`Model` / :class:`ExtractiveModel`: the model seam and an offline deterministic model.
* :func:`load_docs` / :func:`scan_docs` / :func:`load_runbooks`: documents from a directory
  (links out of it not followed; ``scan_docs`` also lists them); the demo corpus.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom_runtime import lazy_exports

if TYPE_CHECKING:
    from loom_knowledge.corpus.corpus_files import DocScan, load_docs, scan_docs
    from loom_knowledge.corpus.events import (
        CorpusReconciled,
        DocumentRemoved,
        DocumentWritten,
        TokenizerChosen,
    )
    from loom_knowledge.corpus.hybrid import HybridRetriever
    from loom_knowledge.corpus.knowledge_base import (
        RECORDED_STEMMER,
        KnowledgeBase,
        open_knowledge_base,
    )
    from loom_knowledge.domain.chunking import (
        Chunker,
        ParagraphPacker,
        pack_paragraphs,
        to_passages,
    )
    from loom_knowledge.domain.citations import CitationCheck, assert_grounded, check_citations
    from loom_knowledge.domain.fingerprint import (
        DEFAULT_FINGERPRINTER,
        FINGERPRINT_ALGORITHM,
        Fingerprinter,
        fingerprint,
    )
    from loom_knowledge.domain.grounding import (
        UNTRUSTED_CONTENT_NOTE,
        GroundedRequest,
        Message,
        Provenance,
        ToolCall,
        ToolSpec,
        encode_request,
        grounded_request,
        guard_messages,
        to_anthropic_messages,
        to_openai_messages,
        to_openai_tools,
    )
    from loom_knowledge.domain.passage_entry import (
        PassageContent,
        format_passage_id,
        parse_passage_id,
        passage_content,
        passage_from_entry,
    )
    from loom_knowledge.domain.reconcile import (
        DEFAULT_MAX_REMOVAL_FRACTION,
        ensure_writable,
        reconcile,
    )
    from loom_knowledge.domain.types import (
        Doc,
        DocRecord,
        Passage,
        PlannedWrite,
        SyncPlan,
        SyncResult,
    )
    from loom_knowledge.errors import (
        CorpusIdentifierSecretError,
        DuplicateDocumentError,
        EmbedderRequiredError,
        ImportedExecutionError,
        InvalidArgumentError,
        InvalidDocumentError,
        InvalidOptionError,
        InvalidPassageIdError,
        KnowledgeBaseOptionsError,
        KnowledgeError,
        MassDeleteRefusedError,
        ModelResponseError,
        ModelUnavailableError,
        SourceConflictError,
        TaintedSystemContentError,
        UngroundedCitationError,
        UnrecordedRetrievalError,
    )
    from loom_knowledge.models.answering import answer_from_corpus
    from loom_knowledge.models.model import Answer, ExtractiveModel, Model, Usage
    from loom_knowledge.models.openai_compatible import OpenAICompatibleModel
    from loom_knowledge.tools.demo import load_runbooks

__all__ = [
    "DEFAULT_FINGERPRINTER",
    "DEFAULT_MAX_REMOVAL_FRACTION",
    "FINGERPRINT_ALGORITHM",
    "RECORDED_STEMMER",
    "UNTRUSTED_CONTENT_NOTE",
    "Answer",
    "Chunker",
    "CitationCheck",
    "CorpusIdentifierSecretError",
    "CorpusReconciled",
    "Doc",
    "DocRecord",
    "DocScan",
    "DocumentRemoved",
    "DocumentWritten",
    "DuplicateDocumentError",
    "EmbedderRequiredError",
    "ExtractiveModel",
    "Fingerprinter",
    "GroundedRequest",
    "HybridRetriever",
    "ImportedExecutionError",
    "InvalidArgumentError",
    "InvalidDocumentError",
    "InvalidOptionError",
    "InvalidPassageIdError",
    "KnowledgeBase",
    "KnowledgeBaseOptionsError",
    "KnowledgeError",
    "MassDeleteRefusedError",
    "Message",
    "Model",
    "ModelResponseError",
    "ModelUnavailableError",
    "OpenAICompatibleModel",
    "ParagraphPacker",
    "Passage",
    "PassageContent",
    "PlannedWrite",
    "Provenance",
    "SourceConflictError",
    "SyncPlan",
    "SyncResult",
    "TaintedSystemContentError",
    "TokenizerChosen",
    "ToolCall",
    "ToolSpec",
    "UngroundedCitationError",
    "UnrecordedRetrievalError",
    "Usage",
    "answer_from_corpus",
    "assert_grounded",
    "check_citations",
    "encode_request",
    "ensure_writable",
    "fingerprint",
    "format_passage_id",
    "grounded_request",
    "guard_messages",
    "load_docs",
    "load_runbooks",
    "open_knowledge_base",
    "pack_paragraphs",
    "parse_passage_id",
    "passage_content",
    "passage_from_entry",
    "reconcile",
    "scan_docs",
    "to_anthropic_messages",
    "to_openai_messages",
    "to_openai_tools",
    "to_passages",
]

# Where each public name lives, imported on first use (PEP 562) so that importing the
# package costs nothing until a name is used.
_EXPORTS = {
    "answer_from_corpus": "loom_knowledge.models.answering",
    "reconcile": "loom_knowledge.domain.reconcile",
    "fingerprint": "loom_knowledge.domain.fingerprint",
    "Answer": "loom_knowledge.models.model",
    "Chunker": "loom_knowledge.domain.chunking",
    "CitationCheck": "loom_knowledge.domain.citations",
    "CorpusIdentifierSecretError": "loom_knowledge.errors",
    "CorpusReconciled": "loom_knowledge.corpus.events",
    "DEFAULT_FINGERPRINTER": "loom_knowledge.domain.fingerprint",
    "DEFAULT_MAX_REMOVAL_FRACTION": "loom_knowledge.domain.reconcile",
    "Doc": "loom_knowledge.domain.types",
    "DocRecord": "loom_knowledge.domain.types",
    "DocScan": "loom_knowledge.corpus.corpus_files",
    "DocumentRemoved": "loom_knowledge.corpus.events",
    "DocumentWritten": "loom_knowledge.corpus.events",
    "DuplicateDocumentError": "loom_knowledge.errors",
    "EmbedderRequiredError": "loom_knowledge.errors",
    "ExtractiveModel": "loom_knowledge.models.model",
    "FINGERPRINT_ALGORITHM": "loom_knowledge.domain.fingerprint",
    "Fingerprinter": "loom_knowledge.domain.fingerprint",
    "GroundedRequest": "loom_knowledge.domain.grounding",
    "InvalidArgumentError": "loom_knowledge.errors",
    "InvalidDocumentError": "loom_knowledge.errors",
    "InvalidOptionError": "loom_knowledge.errors",
    "ImportedExecutionError": "loom_knowledge.errors",
    "InvalidPassageIdError": "loom_knowledge.errors",
    "KnowledgeBase": "loom_knowledge.corpus.knowledge_base",
    "RECORDED_STEMMER": "loom_knowledge.corpus.knowledge_base",
    "TokenizerChosen": "loom_knowledge.corpus.events",
    "HybridRetriever": "loom_knowledge.corpus.hybrid",
    "KnowledgeBaseOptionsError": "loom_knowledge.errors",
    "KnowledgeError": "loom_knowledge.errors",
    "MassDeleteRefusedError": "loom_knowledge.errors",
    "Message": "loom_knowledge.domain.grounding",
    "Model": "loom_knowledge.models.model",
    "ModelResponseError": "loom_knowledge.errors",
    "ModelUnavailableError": "loom_knowledge.errors",
    "OpenAICompatibleModel": "loom_knowledge.models.openai_compatible",
    "ParagraphPacker": "loom_knowledge.domain.chunking",
    "Passage": "loom_knowledge.domain.types",
    "PassageContent": "loom_knowledge.domain.passage_entry",
    "PlannedWrite": "loom_knowledge.domain.types",
    "Provenance": "loom_knowledge.domain.grounding",
    "SourceConflictError": "loom_knowledge.errors",
    "SyncPlan": "loom_knowledge.domain.types",
    "SyncResult": "loom_knowledge.domain.types",
    "TaintedSystemContentError": "loom_knowledge.errors",
    "UNTRUSTED_CONTENT_NOTE": "loom_knowledge.domain.grounding",
    "UngroundedCitationError": "loom_knowledge.errors",
    "UnrecordedRetrievalError": "loom_knowledge.errors",
    "assert_grounded": "loom_knowledge.domain.citations",
    "check_citations": "loom_knowledge.domain.citations",
    "encode_request": "loom_knowledge.domain.grounding",
    "ensure_writable": "loom_knowledge.domain.reconcile",
    "format_passage_id": "loom_knowledge.domain.passage_entry",
    "grounded_request": "loom_knowledge.domain.grounding",
    "guard_messages": "loom_knowledge.domain.grounding",
    "load_docs": "loom_knowledge.corpus.corpus_files",
    "load_runbooks": "loom_knowledge.tools.demo",
    "open_knowledge_base": "loom_knowledge.corpus.knowledge_base",
    "pack_paragraphs": "loom_knowledge.domain.chunking",
    "parse_passage_id": "loom_knowledge.domain.passage_entry",
    "passage_content": "loom_knowledge.domain.passage_entry",
    "passage_from_entry": "loom_knowledge.domain.passage_entry",
    "scan_docs": "loom_knowledge.corpus.corpus_files",
    "to_anthropic_messages": "loom_knowledge.domain.grounding",
    "to_openai_messages": "loom_knowledge.domain.grounding",
    "to_openai_tools": "loom_knowledge.domain.grounding",
    "ToolCall": "loom_knowledge.domain.grounding",
    "ToolSpec": "loom_knowledge.domain.grounding",
    "Usage": "loom_knowledge.models.model",
    "to_passages": "loom_knowledge.domain.chunking",
}

if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all __getattr__
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
