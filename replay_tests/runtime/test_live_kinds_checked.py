"""A kind replayed live is still compared: its input, the calls added and the calls gone.

Core and bundle reviews of 6 December: ``replay(live={"retrieval"})`` (a counterfactual,
``loom replay --live``) returned before any check for a live kind, and left live kinds out of
the unused count: a changed query, an extra retrieval and a removed one each replayed
IDENTICAL, and so did a crafted bundle holding a retrieval the code never asks.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loom_runtime import FlowContext, Loom


def _recorded(ctx: FlowContext) -> int:
    hits = ctx.decide("search", lambda: ["doc1"], input={"query": "refund"}, kind="retrieval")
    return len(hits)


def _changed_query(ctx: FlowContext) -> int:
    hits = ctx.decide("search", lambda: ["doc1"], input={"query": "DROP"}, kind="retrieval")
    return len(hits)


def _extra(ctx: FlowContext) -> int:
    hits = ctx.decide("search", lambda: ["doc1"], input={"query": "refund"}, kind="retrieval")
    ctx.decide("search_more", lambda: ["x"], input={"query": "new"}, kind="retrieval")
    return len(hits)


def _gone(ctx: FlowContext) -> int:
    return 1


@pytest.mark.parametrize(
    ("code", "divergence"),
    [
        (_changed_query, "DecisionInputChangedError"),
        (_extra, "UnrecordedDecisionError"),
        (_gone, "UnusedDecisionsError"),
    ],
    ids=["changed-input", "extra-call", "call-gone"],
)
def test_a_live_kind_s_change_is_a_divergence(
    db_url: str, code: Callable[[FlowContext], int], divergence: str
) -> None:
    with Loom(db_url) as recording:
        recording.flow("f")(_recorded)
        run = recording.run("f")
    with Loom(db_url) as changed:
        changed.flow("f")(code)
        assert not changed.replay(run.execution_id).identical  # as a plain replay says
        result = changed.replay(run.execution_id, live={"retrieval"})
    assert not result.identical
    assert divergence in [type(found).__name__ for found in result.divergences]


def test_an_unchanged_flow_replays_identical_with_a_live_kind(loom: Loom) -> None:
    """The control: the live retrieval returns what it did, nothing else changed."""
    loom.flow("f")(_recorded)
    run = loom.run("f")
    result = loom.replay(run.execution_id, live={"retrieval"})
    assert result.identical, result.describe()
    assert result.live_values == {"search": ["doc1"]}
