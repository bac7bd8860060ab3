"""loom_memory: the memory seam - ordered lists of entries under string keys, optionally searched.

A :class:`MemoryStore` appends, reads and clears; ``replace``, ``remove``, ``search`` and
``close`` are optional and declared as separate protocols, because presence is the feature flag
(see :mod:`loom_memory.store`). What a backend indexes and what counts as a term is first-party
(:func:`searchable_text`, :func:`tokenize`); only ranking is the backend's.

Backends: :class:`InMemoryMemoryStore` (reference), :class:`SqliteMemoryStore` (FTS5, BM25),
:class:`PostgresMemoryStore` (tsvector, BM25 with b = 0). The SQL backends take ``conn=`` on
every verb to write inside a caller's transaction. Every backend passes the conformance kit,
``loom_memory.conformance.MemoryStoreContract`` (imported from there: it needs pytest).

:class:`EventSourcedMemory` is the store an application writes to: every write is an event in
the loom log, projected exactly once into one of those backends, which can therefore be deleted
and rebuilt from the log (whole, or as of a position). :class:`TieredMemory` layers named tiers
with TTL and size limits, recency recall and (recorded) relevance recall over any store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom_runtime import lazy_exports

if TYPE_CHECKING:
    from loom_memory.embedder import (
        Embedder,
        FastEmbedEmbedder,
        HashingEmbedder,
        OpenAIEmbedder,
        SentenceTransformersEmbedder,
        checked_vectors,
    )
    from loom_memory.embedding_projections import embedding_projections
    from loom_memory.embedding_table import EmbeddingTable, text_digest, unit_vector
    from loom_memory.entry import MAX_KEY_BYTES, Content, MemoryEntry
    from loom_memory.erasure import memory_key_subjects, memory_subject
    from loom_memory.errors import (
        BackendError,
        EmbedderError,
        EmbeddingModelChangedError,
        EmbeddingNotRecordedError,
        EntryNotSerialisableError,
        InvalidArgumentError,
        InvalidKeyError,
        InvalidLimitError,
        MemoryIdentifierSecretError,
        MemoryStoreError,
        ProjectionFailedError,
        SearchNotSupportedError,
        StoreConfigurationError,
        StoreNotOnLogDatabaseError,
        UnknownTierError,
    )
    from loom_memory.event_sourced import EventSourcedMemory
    from loom_memory.fusion import RRF_K, reciprocal_rank_fusion
    from loom_memory.inmemory import InMemoryMemoryStore
    from loom_memory.postgres import PostgresMemoryStore
    from loom_memory.postings import idf_weight
    from loom_memory.recorded_embedding import embed_query, embedding_key
    from loom_memory.similarity import SupportsSimilarity
    from loom_memory.sqlite import SqliteMemoryStore
    from loom_memory.store import (
        DEFAULT_SEARCH_LIMIT,
        MAX_SEARCH_LIMIT,
        MemoryStore,
        SupportsClose,
        SupportsRemove,
        SupportsReplace,
        SupportsSearch,
        SupportsValidity,
        remove_entries,
    )
    from loom_memory.text import (
        MAX_QUERY_TERMS,
        Tokenizer,
        check_term_bytes,
        entry_terms,
        query_terms,
        searchable_text,
        tokenize,
    )
    from loom_memory.tiers import DEFAULT_TIERS, Tier, TieredMemory
    from loom_memory.validity import PostgresTemporalStore, SqliteTemporalStore
    from loom_memory.vector import PostgresVectorStore, SqliteVectorStore, top_positions
    from loom_memory.vector_memory import (
        EmbeddingProjection,
        EventSourcedVectorMemory,
        record_embeddings,
    )

__all__ = [
    "DEFAULT_SEARCH_LIMIT",
    "DEFAULT_TIERS",
    "MAX_KEY_BYTES",
    "MAX_QUERY_TERMS",
    "MAX_SEARCH_LIMIT",
    "RRF_K",
    "BackendError",
    "Content",
    "Embedder",
    "EmbedderError",
    "EmbeddingModelChangedError",
    "EmbeddingNotRecordedError",
    "EmbeddingProjection",
    "EmbeddingTable",
    "EntryNotSerialisableError",
    "EventSourcedMemory",
    "EventSourcedVectorMemory",
    "FastEmbedEmbedder",
    "HashingEmbedder",
    "InMemoryMemoryStore",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidLimitError",
    "MemoryEntry",
    "MemoryIdentifierSecretError",
    "MemoryStore",
    "MemoryStoreError",
    "OpenAIEmbedder",
    "PostgresMemoryStore",
    "PostgresTemporalStore",
    "PostgresVectorStore",
    "ProjectionFailedError",
    "SearchNotSupportedError",
    "SentenceTransformersEmbedder",
    "SqliteMemoryStore",
    "SqliteTemporalStore",
    "SqliteVectorStore",
    "StoreConfigurationError",
    "StoreNotOnLogDatabaseError",
    "SupportsClose",
    "SupportsRemove",
    "SupportsReplace",
    "SupportsSearch",
    "SupportsSimilarity",
    "SupportsValidity",
    "Tier",
    "TieredMemory",
    "Tokenizer",
    "UnknownTierError",
    "check_term_bytes",
    "checked_vectors",
    "embed_query",
    "embedding_key",
    "embedding_projections",
    "entry_terms",
    "idf_weight",
    "memory_key_subjects",
    "memory_subject",
    "query_terms",
    "reciprocal_rank_fusion",
    "record_embeddings",
    "remove_entries",
    "searchable_text",
    "text_digest",
    "tokenize",
    "top_positions",
    "unit_vector",
]

# Where each public name lives, imported on first use (PEP 562) so that importing the
# package costs nothing until a name is used.
_EXPORTS = {
    "BackendError": "loom_memory.errors",
    "Content": "loom_memory.entry",
    "DEFAULT_SEARCH_LIMIT": "loom_memory.store",
    "DEFAULT_TIERS": "loom_memory.tiers",
    "EntryNotSerialisableError": "loom_memory.errors",
    "EventSourcedMemory": "loom_memory.event_sourced",
    "InMemoryMemoryStore": "loom_memory.inmemory",
    "InvalidArgumentError": "loom_memory.errors",
    "InvalidKeyError": "loom_memory.errors",
    "InvalidLimitError": "loom_memory.errors",
    "MAX_KEY_BYTES": "loom_memory.entry",
    "MAX_QUERY_TERMS": "loom_memory.text",
    "MAX_SEARCH_LIMIT": "loom_memory.store",
    "MemoryEntry": "loom_memory.entry",
    "memory_key_subjects": "loom_memory.erasure",
    "memory_subject": "loom_memory.erasure",
    "MemoryIdentifierSecretError": "loom_memory.errors",
    "MemoryStore": "loom_memory.store",
    "MemoryStoreError": "loom_memory.errors",
    "PostgresMemoryStore": "loom_memory.postgres",
    "ProjectionFailedError": "loom_memory.errors",
    "SearchNotSupportedError": "loom_memory.errors",
    "SqliteMemoryStore": "loom_memory.sqlite",
    "StoreConfigurationError": "loom_memory.errors",
    "StoreNotOnLogDatabaseError": "loom_memory.errors",
    "SupportsClose": "loom_memory.store",
    "SupportsRemove": "loom_memory.store",
    "SupportsReplace": "loom_memory.store",
    "SupportsSearch": "loom_memory.store",
    "SupportsValidity": "loom_memory.store",
    "PostgresTemporalStore": "loom_memory.validity",
    "SqliteTemporalStore": "loom_memory.validity",
    "Tier": "loom_memory.tiers",
    "TieredMemory": "loom_memory.tiers",
    "Tokenizer": "loom_memory.text",
    "UnknownTierError": "loom_memory.errors",
    "check_term_bytes": "loom_memory.text",
    "entry_terms": "loom_memory.text",
    "idf_weight": "loom_memory.postings",
    "query_terms": "loom_memory.text",
    "remove_entries": "loom_memory.store",
    "searchable_text": "loom_memory.text",
    "tokenize": "loom_memory.text",
    "PostgresVectorStore": "loom_memory.vector",
    "SqliteVectorStore": "loom_memory.vector",
    "top_positions": "loom_memory.vector",
    "SupportsSimilarity": "loom_memory.similarity",
    "EventSourcedVectorMemory": "loom_memory.vector_memory",
    "checked_vectors": "loom_memory.embedder",
    "EmbeddingProjection": "loom_memory.vector_memory",
    "EmbeddingTable": "loom_memory.embedding_table",
    "embedding_projections": "loom_memory.embedding_projections",
    "record_embeddings": "loom_memory.vector_memory",
    "text_digest": "loom_memory.embedding_table",
    "unit_vector": "loom_memory.embedding_table",
    "RRF_K": "loom_memory.fusion",
    "embed_query": "loom_memory.recorded_embedding",
    "embedding_key": "loom_memory.recorded_embedding",
    "reciprocal_rank_fusion": "loom_memory.fusion",
    "EmbedderError": "loom_memory.errors",
    "EmbeddingModelChangedError": "loom_memory.errors",
    "EmbeddingNotRecordedError": "loom_memory.errors",
    "Embedder": "loom_memory.embedder",
    "FastEmbedEmbedder": "loom_memory.embedder",
    "HashingEmbedder": "loom_memory.embedder",
    "OpenAIEmbedder": "loom_memory.embedder",
    "SentenceTransformersEmbedder": "loom_memory.embedder",
}

if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all __getattr__
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
