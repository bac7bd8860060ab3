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
  boundary, where passages stay untrusted and citations are checked against what was shown.
* :class:`Model` / :class:`ExtractiveModel`: the model seam and an offline deterministic model.
* :func:`load_docs` / :func:`scan_docs` / :func:`load_runbooks`: documents from a directory
  (links out of it not followed; ``scan_docs`` also lists them); the demo corpus.
"""

from loom_knowledge.chunking import Chunker, ParagraphPacker, pack_paragraphs, to_passages
from loom_knowledge.citations import CitationCheck, assert_grounded, check_citations
from loom_knowledge.corpus_files import DocScan, load_docs, load_runbooks, scan_docs
from loom_knowledge.errors import (
    CorpusIdentifierSecretError,
    DuplicateDocumentError,
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
)
from loom_knowledge.events import CorpusReconciled, DocumentRemoved, DocumentWritten
from loom_knowledge.fingerprint import (
    DEFAULT_FINGERPRINTER,
    FINGERPRINT_ALGORITHM,
    Fingerprinter,
    fingerprint,
)
from loom_knowledge.grounding import (
    UNTRUSTED_CONTENT_NOTE,
    GroundedRequest,
    Message,
    Provenance,
    encode_request,
    grounded_request,
    guard_messages,
    to_anthropic_messages,
    to_openai_messages,
)
from loom_knowledge.knowledge_base import KnowledgeBase, open_knowledge_base
from loom_knowledge.model import Answer, ExtractiveModel, Model
from loom_knowledge.openai_compatible import OpenAICompatibleModel
from loom_knowledge.passage_entry import (
    PassageContent,
    format_passage_id,
    parse_passage_id,
    passage_content,
    passage_from_entry,
)
from loom_knowledge.reconcile import DEFAULT_MAX_REMOVAL_FRACTION, ensure_writable, reconcile
from loom_knowledge.types import Doc, DocRecord, Passage, PlannedWrite, SyncPlan, SyncResult

__all__ = [
    "DEFAULT_FINGERPRINTER",
    "DEFAULT_MAX_REMOVAL_FRACTION",
    "FINGERPRINT_ALGORITHM",
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
    "ExtractiveModel",
    "Fingerprinter",
    "GroundedRequest",
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
    "UngroundedCitationError",
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
    "to_passages",
]
