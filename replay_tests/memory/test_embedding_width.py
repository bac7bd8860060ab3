"""A model whose output width changed under the same name (ADR 0038, amended 2026-12-05
"width").

Recorded vectors are addressed by (model, text digest): the width is not part of the address,
so an embedder of the same name and a new width found the old vectors "already recorded" and
the search stacked vectors of two widths: a bare numpy ``ValueError`` in the corpus, a reshape
error in a vector memory re-indexed under a new table prefix (what the model-changed error
tells users to do). Both are the typed refusal now, naming the cure.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_memory import (
    EmbeddingModelChangedError,
    EventSourcedVectorMemory,
    MemoryEntry,
    SqliteVectorStore,
)
from loom_runtime import Loom

pytest.importorskip("numpy")


class _Words:
    """Each word to one of ``dimension`` buckets: the same text, any width, under one name."""

    model = "my-model"

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in text.split():
                vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dimension] += 1
            vectors.append(vector)
        return vectors


def test_a_corpus_searched_by_the_same_model_name_at_a_new_width_is_refused(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'kb.db'}"
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "s", embedder=_Words(4), min_score=0.1)
        kb.put_doc(Doc(id="a.md", text="apple pie"), source="t")
        assert [p.doc_id for p in kb.search("apple", mode="vector")] == ["a.md"]  # control
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "s", embedder=_Words(8), min_score=0.1)
        with pytest.raises(EmbeddingModelChangedError, match="another name"):
            kb.put_doc(Doc(id="b.md", text="banana split"), source="t")
            kb.search("apple", mode="vector")


def test_a_vector_memory_reindexed_with_the_same_model_name_at_a_new_width_is_refused(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    at = datetime(2024, 1, 1, tzinfo=UTC)
    with Loom(url) as loom:
        store = SqliteVectorStore(
            loom.log.engine, embedder=_Words(4), min_score=0.1, table_prefix="v4_"
        )
        memory = EventSourcedVectorMemory(loom, store=store)
        memory.append("k", [MemoryEntry(id="a", content="apple pie", timestamp=at)])
        assert [e.id for e, _ in memory.search_scored("k", "apple")] == ["a"]  # control
    with Loom(url) as loom:
        store = SqliteVectorStore(
            loom.log.engine, embedder=_Words(8), min_score=0.1, table_prefix="v8_"
        )
        with pytest.raises(EmbeddingModelChangedError, match="another name"):
            EventSourcedVectorMemory(loom, store=store).search_scored("k", "apple")
