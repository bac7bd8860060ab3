"""Table prefixes the validator accepts open on PostgreSQL too, or are refused where it does
(ADR 0015, amended 2026-12-05 "prefixes").

PostgreSQL folds unquoted names to lower case and cuts names at 63 bytes. A prefix with
capitals made tables SQLAlchemy quotes (``"Mem_entries"``) and triggers written unquoted
(``Mem_entries`` is ``mem_entries``): "relation does not exist" at open. And the longest
prefix allowed (40 characters) with encryption on named an index of 66 characters:
``IdentifierError`` at open.
"""

from __future__ import annotations

import pytest

from loom_memory import (
    HashingEmbedder,
    MemoryEntry,
    PostgresMemoryStore,
    PostgresVectorStore,
    StoreConfigurationError,
)
from loom_runtime import Loom, MasterKey

pytestmark = pytest.mark.postgres


def test_a_prefix_with_capitals_is_refused_on_postgresql_saying_why(pg_url: str) -> None:
    with pytest.raises(StoreConfigurationError, match="lower case"):
        PostgresMemoryStore(pg_url, table_prefix="Mem_")
    store = PostgresMemoryStore(pg_url, table_prefix="mem_")  # the control
    try:
        store.append("k", [MemoryEntry(content="restart the worker", id="a")])
        assert [e.id for e in store.search("k", "worker")] == ["a"]
    finally:
        store.close()


def test_the_longest_prefix_opens_a_sealed_vector_store(pg_url: str) -> None:
    with Loom(pg_url, encryption=MasterKey(b"d" * 32)) as loom:
        store = PostgresVectorStore(
            loom.log.engine, embedder=HashingEmbedder(), min_score=0.1, table_prefix="p" * 40
        )
        store.append("k", [MemoryEntry(content="restart the worker", id="a")])
        assert [e.id for e in store.search("k", "worker")] == ["a"]
