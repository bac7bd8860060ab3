"""A sync ``decide`` without ``retry`` is computed and recorded without the step generator and
its driver (ADR 0048): what it stores and raises is what the driven path stored and raised."""

from __future__ import annotations

import gc
import warnings

import pytest

from loom_runtime import FlowContext, Loom


def test_an_awaitable_is_refused_recorded_as_a_failure_and_closed(loom: Loom) -> None:
    """The refusal is the decision's recorded failure, with no meta, and the coroutine is
    closed (no "never awaited" warning)."""

    async def fetch() -> int:
        return 1

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        with pytest.raises(TypeError, match="async def"):
            ctx.decide("k", fetch)
        return "done"

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        run = loom.run("f")
        gc.collect()
    decision = loom.execution(run.execution_id).decisions["k"]
    assert decision.error_type == "builtins:TypeError"
    assert decision.value is None and decision.meta is None


def test_a_failed_compute_is_recorded_once_and_raised(loom: Loom) -> None:
    """An ``Exception`` from ``compute`` is stored as the decision and raised to the flow; a
    replay raises it again without computing."""
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        raise ValueError("no answer")

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        with pytest.raises(ValueError, match="no answer"):
            ctx.decide("k", compute)
        return "done"

    run = loom.run("f")
    decision = loom.execution(run.execution_id).decisions["k"]
    assert (decision.error_type, decision.message, decision.meta) == (
        "builtins:ValueError",
        "no answer",
        None,
    )
    loom.replay(run.execution_id)
    assert calls == [1]


def test_an_interrupt_in_compute_stores_nothing(loom: Loom) -> None:
    """Only an ``Exception`` is a recorded outcome: an interrupt stops the run unrecorded."""

    class Stop(BaseException):
        pass

    def compute() -> int:
        raise Stop

    @loom.flow("f")
    def f(ctx: FlowContext) -> int:
        ctx.decide("before", lambda: 1)
        return ctx.decide("k", compute)

    with pytest.raises(Stop):
        loom.run("f")
    (summary,) = loom.executions()
    assert set(loom.execution(summary.execution_id).decisions) == {"before"}
