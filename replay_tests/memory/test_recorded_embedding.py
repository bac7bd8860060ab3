"""A query's embedding is a decision: a replay answers from the log and needs no model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from loom_memory import (
    HashingEmbedder,
    InvalidArgumentError,
    MemoryEntry,
    SqliteVectorStore,
    embed_query,
    embedding_key,
)
from loom_memory.conformance import entry
from loom_runtime import DecisionInputChangedError, Loom


class SwitchableEmbedder(HashingEmbedder):
    """The hashing embedder that raises once ``broken``: a model that is gone."""

    broken = False
    calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.broken:
            raise AssertionError("the embedding model was called during a replay")
        self.calls += 1
        return super().embed(texts)


def _build(db: str, embedder: SwitchableEmbedder, store: SqliteVectorStore) -> Loom:
    loom = Loom(db)

    @loom.flow("ask")
    def ask(ctx: Any, question: str) -> list[str]:
        vector = embed_query(embedder, question, decide=ctx.decide)
        hits = ctx.decide(
            "memory:runbooks:vector-search",
            lambda: [hit for hit, _ in store.search_by_vector("runbooks", vector)],
            input={"question": question},
            type=list[MemoryEntry],
            kind="retrieval",
        )
        return [str(hit.content) for hit in hits]

    return loom


@pytest.fixture
def store(tmp_path: Path) -> SqliteVectorStore:
    store = SqliteVectorStore(
        f"sqlite:///{tmp_path / 'vectors.db'}", embedder=HashingEmbedder(), min_score=0.2
    )
    store.append("runbooks", [entry("restart the worker pool"), entry("lunch menu")])
    return store


def test_a_replay_needs_no_embedding_model(tmp_path: Path, store: SqliteVectorStore) -> None:
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    embedder = SwitchableEmbedder()
    with _build(db, embedder, store) as loom:
        run = loom.run("ask", question="worker")
    assert run.output == ["restart the worker pool"] and embedder.calls == 1
    embedder.broken = True
    store.clear("runbooks")
    with _build(db, embedder, store) as loom:
        result = loom.replay(run.execution_id)
        recorded = loom.execution(run.execution_id).decisions
    assert result.identical, result.describe()
    assert result.output == run.output
    assert embedding_key(embedder.model) in recorded


def test_a_changed_question_is_a_changed_input(tmp_path: Path, store: SqliteVectorStore) -> None:
    """The text is the decision's input: a replay asked another question says so."""
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    embedder = SwitchableEmbedder()
    with _build(db, embedder, store) as loom:
        run = loom.run("ask", question="worker")

    with Loom(db) as loom:

        @loom.flow("ask")
        def ask(ctx: Any, question: str) -> list[float]:
            return embed_query(embedder, "lunch", decide=ctx.decide)

        result = loom.replay(run.execution_id)
    assert any(isinstance(found, DecisionInputChangedError) for found in result.divergences)


def test_embed_query_refuses_a_missing_decide() -> None:
    with pytest.raises(InvalidArgumentError):
        embed_query(HashingEmbedder(), "q", decide=None)  # type: ignore[arg-type]
