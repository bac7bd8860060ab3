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

from loom_memory.entry import Content, MemoryEntry
from loom_memory.errors import (
    BackendError,
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
from loom_memory.inmemory import InMemoryMemoryStore
from loom_memory.postgres import PostgresMemoryStore
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
    entry_terms,
    query_terms,
    searchable_text,
    tokenize,
)
from loom_memory.tiers import DEFAULT_TIERS, Tier, TieredMemory
from loom_memory.validity import PostgresTemporalStore, SqliteTemporalStore

__all__ = [
    "DEFAULT_SEARCH_LIMIT",
    "DEFAULT_TIERS",
    "MAX_QUERY_TERMS",
    "MAX_SEARCH_LIMIT",
    "BackendError",
    "Content",
    "EntryNotSerialisableError",
    "EventSourcedMemory",
    "InMemoryMemoryStore",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidLimitError",
    "MemoryEntry",
    "MemoryIdentifierSecretError",
    "MemoryStore",
    "MemoryStoreError",
    "PostgresMemoryStore",
    "PostgresTemporalStore",
    "ProjectionFailedError",
    "SearchNotSupportedError",
    "SqliteMemoryStore",
    "SqliteTemporalStore",
    "StoreConfigurationError",
    "StoreNotOnLogDatabaseError",
    "SupportsClose",
    "SupportsRemove",
    "SupportsReplace",
    "SupportsSearch",
    "SupportsValidity",
    "Tier",
    "TieredMemory",
    "UnknownTierError",
    "entry_terms",
    "query_terms",
    "remove_entries",
    "searchable_text",
    "tokenize",
]
