"""Reciprocal rank fusion: ranks, not scores, decide; ties keep the order first met."""

from __future__ import annotations

import pytest

from loom_memory import InvalidArgumentError, reciprocal_rank_fusion


def _fused(rankings: list[list[str]], limit: int = 10, k: int = 60) -> list[str]:
    return reciprocal_rank_fusion(rankings, identity=lambda item: item, limit=limit, k=k)


def test_an_item_in_both_rankings_beats_one_at_the_top_of_one() -> None:
    """b is 2nd in both: 2/62 beats a's 1/61 (1st in one ranking only)."""
    assert _fused([["a", "b", "c"], ["d", "b", "e"]]) == ["b", "a", "d", "c", "e"]


def test_scores_are_reciprocal_ranks() -> None:
    """With k = 0 the scores are 1/rank summed: y = 1/2 + 1 beats x = 1 + 1/3 beats z = 1/2."""
    assert _fused([["x", "y"], ["y", "z", "x"]], k=0) == ["y", "x", "z"]


def test_ties_keep_the_order_first_met_and_the_first_occurrence() -> None:
    """a and d tie (both first once); a was met first. A duplicate counts at its best rank."""
    found = reciprocal_rank_fusion(
        [[("a", 1), ("a", 2)], [("d", 1)]], identity=lambda item: item[0], limit=5
    )
    assert found == [("a", 1), ("d", 1)]


def test_the_limit_cuts_the_fused_ranking() -> None:
    assert _fused([["a", "b", "c"]], limit=2) == ["a", "b"]


@pytest.mark.parametrize(("limit", "k"), [(0, 60), (True, 60), (3, -1)])
def test_bad_limits_and_constants_are_refused(limit: int, k: int) -> None:
    with pytest.raises(InvalidArgumentError):
        _fused([["a"]], limit=limit, k=k)


def test_an_identity_that_does_not_hash_is_refused_typed() -> None:
    """An entry's content is often a dict: an identity returning it (or a tuple holding it)
    raised a bare ``TypeError: unhashable type`` from deep inside (a memory review)."""
    with pytest.raises(InvalidArgumentError, match="identity"):
        reciprocal_rank_fusion([[{"a": 1}]], identity=lambda item: (1, item), limit=3)
