"""A vector search's top k is exactly the full ranking cut at k, ties in append order.

The store selects the best ``limit`` scores before sorting them (a search at 100,000 entries
would otherwise sort nearly all of them); these tests pin that the shortcut never changes an
answer, above all where ties straddle the cut.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loom_memory import HashingEmbedder, SqliteVectorStore, top_positions
from loom_memory.conformance import entry


def test_the_selection_equals_a_stable_sort_cut_at_every_limit() -> None:
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.9, 0.5, 0.7, 0.5], dtype=np.float32)
    candidates = np.arange(len(scores))
    for limit in range(1, len(scores) + 2):
        expected = candidates[np.argsort(-scores, kind="stable")][:limit]
        assert top_positions(scores, candidates, limit).tolist() == expected.tolist()


def test_only_candidates_are_ranked() -> None:
    """Positions the floor or a filter dropped never come back through the selection."""
    scores = np.array([0.9, 0.8, 0.7, 0.6], dtype=np.float32)
    assert top_positions(scores, np.array([1, 3]), 1).tolist() == [1]


def test_a_store_answers_as_the_full_ranking_with_ties_across_the_cut(tmp_path: Path) -> None:
    store = SqliteVectorStore(
        f"sqlite:///{tmp_path / 'v.db'}", embedder=HashingEmbedder(), min_score=0.2
    )
    texts = ["disk full", "worker", "disk", "disk full", "disk full now", "disk", "disk full"]
    store.append("a", [entry(text, id=str(n)) for n, text in enumerate(texts)])
    everything = store.search_scored("a", "disk full", limit=len(texts), min_score=-1.0)
    assert [hit.id for hit, _ in everything[:3]] == ["0", "3", "6"]  # three ties, append order
    for limit in range(1, len(texts) + 1):
        assert (
            store.search_scored("a", "disk full", limit=limit, min_score=-1.0)
            == (everything[:limit])
        )
