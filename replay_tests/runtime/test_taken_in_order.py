"""Occurrences taken on the in-order path are listed, not put in the taken set, until the walk
(``_occurrence``) needs the set: it adds them first. Pinned: a caller's own ``k#2`` asked after
two plain ``k`` calls still finds ``k#2`` taken, recording and replaying, and a replay that
skips a decision still reports it unused though matched answers are only listed.
"""

from __future__ import annotations

from loom_runtime import FlowContext, Loom, UnusedDecisionsError


def test_a_callers_own_key_after_in_order_calls_skips_their_occurrences(loom: Loom) -> None:
    """``k``, ``k``, then the caller's ``k#2``: the in-order ``k#2`` is taken, so ``k#2#2``."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> list[int]:
        return [
            ctx.decide("k", lambda: 1),
            ctx.decide("k", lambda: 2),
            ctx.decide("k#2", lambda: 3),
        ]

    run = loom.run("f")
    assert list(loom.execution(run.execution_id).decisions) == ["k", "k#2", "k#2#2"]
    assert run.output == [1, 2, 3]
    assert loom.replay(run.execution_id).identical


def test_a_skipped_decision_is_unused_though_matches_are_listed(loom: Loom) -> None:
    """Matched answers are listed, not put in a set: a decision the replay skips is reported."""
    skip = {"on": False}

    @loom.flow("f")
    def f(ctx: FlowContext) -> int:
        ctx.decide("a", lambda: 1)
        if not skip["on"]:
            ctx.decide("b", lambda: 2)
        ctx.decide("c", lambda: 3)
        return 0

    run = loom.run("f")
    skip["on"] = True
    found = loom.replay(run.execution_id).divergences
    assert [type(d) for d in found] == [UnusedDecisionsError]
    assert found[0].keys == ["b"]
