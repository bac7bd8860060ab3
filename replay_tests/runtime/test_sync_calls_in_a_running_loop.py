"""A sync ``run``, ``resume``, ``recover`` or ``fork`` of an async flow called while an event
loop runs (a FastAPI lifespan hook resuming at start-up) is refused before anything is
written. The refusal came from the driver, after the execution was started or claimed, and was
stored as the flow's failure: an interrupted execution became failed for good, and a run or a
fork left a failed execution, over a usage error."""

from __future__ import annotations

import asyncio
import logging

import pytest

from loom_runtime import AsyncFlowContext, ConfigurationError, FlowContext, Loom


class Crash(BaseException):  # a process dying, not a failure the flow raises
    pass


def _interrupted(loom: Loom) -> object:
    crash = {"on": True}

    @loom.flow("steps")
    async def steps(ctx: AsyncFlowContext) -> list[str]:
        first: str = await ctx.decide("first", lambda: "one")

        def second() -> str:
            if crash["on"]:
                raise Crash  # the process "dies" here
            return "two"

        return [first, await ctx.decide("second", second)]

    with pytest.raises(Crash):
        loom.run("steps")
    crash["on"] = False
    [summary] = loom.executions()
    return summary.execution_id


def test_a_sync_resume_inside_a_running_loop_writes_nothing(loom: Loom) -> None:
    execution_id = _interrupted(loom)
    before = loom.log.position

    async def startup() -> None:
        loom.resume(execution_id, force=True)  # type: ignore[arg-type]

    with pytest.raises(ConfigurationError, match="aresume"):
        asyncio.run(startup())
    assert loom.log.position == before
    assert loom.resume(execution_id, force=True).output == ["one", "two"]  # type: ignore[arg-type]


def test_a_recovery_pass_inside_a_running_loop_leaves_async_flows_and_runs_sync_ones(
    loom: Loom, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass in a thread running a loop (Jupyter, a start-up hook) claims no async flow's
    execution (it could not run it) and says so; a sync flow's it recovers, as before."""
    execution_id = _interrupted(loom)
    crash = {"on": True}

    @loom.flow("plain")
    def plain(ctx: FlowContext) -> list[str]:
        def second() -> str:
            if crash["on"]:
                raise Crash
            return "two"

        return [str(ctx.decide("first", lambda: "one")), ctx.decide("second", second)]

    with pytest.raises(Crash):
        loom.run("plain")
    crash["on"] = False
    before = {e.execution_id: loom.execution(e.execution_id).version for e in loom.executions()}

    async def startup() -> list[object]:
        return [run.output for run in loom.recover(include_unowned=True)]

    with caplog.at_level(logging.WARNING, logger="loom.runtime"):
        assert asyncio.run(startup()) == [["one", "two"]]
    assert loom.execution(execution_id).version == before[execution_id]  # nothing claimed
    assert any("event loop" in record.getMessage() for record in caplog.records)


def test_a_sync_run_or_fork_inside_a_running_loop_writes_nothing(loom: Loom) -> None:
    @loom.flow("one")
    async def one(ctx: AsyncFlowContext) -> str:
        answer: str = await ctx.decide("a", lambda: "a")
        return answer

    run = loom.run("one")
    before = loom.log.position

    async def inside() -> None:
        with pytest.raises(ConfigurationError, match="arun"):
            loom.run("one")
        with pytest.raises(ConfigurationError, match="afork"):
            loom.fork(run.execution_id, at="a")

    asyncio.run(inside())
    assert loom.log.position == before
