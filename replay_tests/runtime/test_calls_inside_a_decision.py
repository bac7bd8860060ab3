"""A recorded call made while another decision is computed live is a part of that decision
(ADR 0002, amended 2026-12-05 "inside a decision").

A ``@tool`` whose body fetches through a recording transport, a tool that calls another tool,
and a ``decide`` whose compute asks ``ctx.decide``/``ctx.now()`` each recorded two decisions:
the outer one and the inner one. A replay answers the outer from the log and never runs its
body, so the inner decision was never asked and a faithful replay of unchanged code said
"not identical" (``UnusedDecisionsError``). Now the outermost call is the record and what it
does inside runs as a plain call, as DBOS runs a step called from a step. Each replay here
runs with the backends gone: the tool bodies and the server fail the test if they are called.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import AsyncFlowContext, Backoff, FlowContext, Loom, tool


class Backend:
    """A status API and the tool bodies that call it; ``gone`` makes any call fail the test."""

    def __init__(self) -> None:
        self.gone = False
        self.sent: list[str] = []

    def reply(self, request: httpx.Request) -> httpx.Response:
        if self.gone:
            raise AssertionError(f"the API was called on replay: {request.url}")
        self.sent.append(request.url.path)
        return httpx.Response(200, json={"status": "degraded", "path": request.url.path})

    def ran(self, what: str) -> None:
        if self.gone:
            raise AssertionError(f"{what} ran on replay")


def build(url: str, backend: Backend) -> Loom:
    loom = Loom(url)
    client = httpx.Client(
        transport=loom_runtime.transport(httpx.MockTransport(backend.reply)),
        base_url="https://status.example",
    )

    @tool
    def service_status(service: str) -> dict[str, Any]:
        backend.ran("service_status")
        return client.get(f"/{service}").json()

    @tool
    def incident(service: str) -> str:
        backend.ran("incident")
        return f"{service} is {service_status(service)['status']}"

    @tool
    def fan_out(services: list[str]) -> list[str]:
        backend.ran("fan_out")
        with ThreadPoolExecutor(2) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, service_status, name)
                for name in services
            ]
            return [future.result()["path"] for future in futures]

    @loom.flow("agent")
    def agent(ctx: FlowContext) -> list[Any]:
        status = service_status("postgres")
        direct = client.get("/direct").json()  # the flow's own request: recorded
        return [status, direct]

    @loom.flow("tool_calls_tool")
    def tool_calls_tool(ctx: FlowContext) -> str:
        return incident("redis")

    @loom.flow("pooled_inside_a_tool")
    def pooled(ctx: FlowContext) -> list[str]:
        return fan_out(["a", "b"])

    @loom.flow("decide_inside_decide")
    def nested(ctx: FlowContext) -> dict[str, Any]:
        def plan() -> dict[str, Any]:
            backend.ran("plan")
            return {
                "at": ctx.now().isoformat(),
                "id": str(ctx.uuid()),
                "roll": ctx.random(),
                "inner": ctx.decide("inner", lambda: 41) + 1,
                "status": client.get("/inner").json()["status"],
            }

        first = ctx.decide("plan", plan)
        after = ctx.decide("after", lambda: "recorded")  # numbering goes on as before
        return {**first, "after": after}

    return loom


def _decisions(url: str, execution_id: Any) -> list[str]:
    with Loom(url) as loom:
        return list(loom.execution(execution_id).decisions)


def _recorded_and_replayed(url: str, flow: str) -> tuple[list[str], Any, Any, Backend]:
    backend = Backend()
    with build(url, backend) as loom:
        run = loom.run(flow)
    backend.gone = True
    with build(url, backend) as loom:
        replayed = loom.replay(run.execution_id)
    return _decisions(url, run.execution_id), run, replayed, backend


def test_a_tool_s_request_is_a_part_of_the_tool_s_decision(sqlite_url: str) -> None:
    decisions, run, replayed, backend = _recorded_and_replayed(sqlite_url, "agent")
    # The tool is one decision; the flow's own request after it is recorded again (the
    # mark ends with the tool's body).
    assert decisions == ["tool:service_status", "http:GET status.example/direct"]
    assert backend.sent == ["/postgres", "/direct"]
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


def test_a_tool_called_by_a_tool_is_a_part_of_the_outer_tool(sqlite_url: str) -> None:
    decisions, run, replayed, _ = _recorded_and_replayed(sqlite_url, "tool_calls_tool")
    assert decisions == ["tool:incident"]
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output == "redis is degraded"


def test_calls_from_threads_a_tool_starts_with_its_context_are_a_part_of_it(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="loom.runtime"):
        decisions, run, replayed, _ = _recorded_and_replayed(sqlite_url, "pooled_inside_a_tool")
    assert decisions == ["tool:fan_out"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output == ["/a", "/b"]


def test_what_a_compute_asks_of_its_flow_is_a_part_of_its_decision(sqlite_url: str) -> None:
    decisions, run, replayed, _ = _recorded_and_replayed(sqlite_url, "decide_inside_decide")
    assert decisions == ["plan", "after"]
    assert run.output["inner"] == 42 and run.output["status"] == "degraded"
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


def test_async_computes_and_tools_keep_their_calls_inside(sqlite_url: str) -> None:
    backend = Backend()

    def build_async() -> Loom:
        loom = Loom(sqlite_url)
        client = httpx.AsyncClient(
            transport=loom_runtime.async_transport(httpx.MockTransport(backend.reply)),
            base_url="https://status.example",
        )

        @tool
        async def service_status(service: str) -> dict[str, Any]:
            backend.ran("service_status")
            await asyncio.sleep(0)  # the body runs when awaited, not when called
            return (await client.get(f"/{service}")).json()

        @loom.flow("async_agent")
        async def agent(ctx: AsyncFlowContext) -> list[Any]:
            async def plan() -> int:
                backend.ran("plan")
                await asyncio.sleep(0)
                return await ctx.decide("inner", lambda: 41) + 1

            both = await asyncio.gather(service_status("a"), service_status("b"))
            planned = await ctx.decide("plan", plan)
            direct = (await client.get("/direct")).json()
            return [both, planned, direct]

        return loom

    with build_async() as loom:
        run = asyncio.run(loom.arun("async_agent"))
    assert _decisions(sqlite_url, run.execution_id) == [
        "tool:service_status",
        "tool:service_status#2",
        "plan",
        "http:GET status.example/direct",
    ]
    backend.gone = True
    with build_async() as loom:
        replayed = asyncio.run(loom.areplay(run.execution_id))
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


def test_a_flow_run_inside_a_compute_records_into_its_own_execution(sqlite_url: str) -> None:
    """The control: the mark is the outer flow's, so a sub-agent run by a tool (another
    flow, another execution) still records its own decisions."""
    with Loom(sqlite_url) as loom:

        @loom.flow("child")
        def child(ctx: FlowContext) -> int:
            return ctx.decide("child-step", lambda: 7)

        @tool
        def delegate() -> str:
            return str(loom.run("child").execution_id)

        @loom.flow("parent")
        def parent(ctx: FlowContext) -> str:
            return delegate()

        run = loom.run("parent")
        assert list(loom.execution(run.execution_id).decisions) == ["tool:delegate"]
        children = [e for e in loom.executions() if e.flow == "child"]
        assert [str(e.execution_id) for e in children] == [run.output]
        assert list(loom.execution(children[0].execution_id).decisions) == ["child-step"]


class Plan(msgspec.Struct):
    steps: list[str]


def test_a_decide_inside_a_tool_keeps_its_retry_and_its_type(sqlite_url: str) -> None:
    """A part is computed as a decision is, minus the storing: a helper that asks
    ``ctx.decide(..., type=Plan, retry=...)`` hands back the same thing whether the flow or a
    tool calls it (the first form of this change called the compute once, raw)."""
    failures: list[int] = []

    def flaky() -> dict[str, Any]:
        if len(failures) % 2 == 0:  # every other call fails, as a rate limit would
            failures.append(1)
            raise TimeoutError("try again")
        failures.append(0)
        return {"steps": ["drain", "restart"]}

    def plan(ctx: FlowContext | AsyncFlowContext) -> Any:
        return ctx.decide("plan", flaky, type=Plan, retry=Backoff(attempts=3, first_pause=0.0))

    with Loom(sqlite_url) as loom:

        @tool
        def planned() -> list[str]:
            ctx = loom_runtime.current_context()
            assert isinstance(ctx, FlowContext)
            made = plan(ctx)
            at = ctx.decide("at", lambda: "2026-12-05T10:00:00Z", type=datetime)
            assert isinstance(made, Plan) and at == datetime(2026, 12, 5, 10, tzinfo=UTC)
            return made.steps

        @tool
        async def aplanned() -> list[str]:
            ctx = loom_runtime.current_context()
            assert isinstance(ctx, AsyncFlowContext)
            made = await plan(ctx)
            assert isinstance(made, Plan)
            return made.steps

        @loom.flow("sync")
        def sync(ctx: FlowContext) -> list[Any]:
            return [plan(ctx).steps, planned()]

        @loom.flow("async")
        async def async_flow(ctx: AsyncFlowContext) -> list[Any]:
            return [(await plan(ctx)).steps, await aplanned()]

        run = loom.run("sync")
        arun = asyncio.run(loom.arun("async"))
        assert run.output == arun.output == [["drain", "restart"]] * 2
        assert list(loom.execution(run.execution_id).decisions) == ["plan", "tool:planned"]
        assert list(loom.execution(arun.execution_id).decisions) == ["plan", "tool:aplanned"]
        assert failures == [1, 0] * 4  # each of the four plans retried once


def test_an_async_compute_refused_by_a_sync_flow_is_closed_not_leaked(sqlite_url: str) -> None:
    """The first form of this change wrapped the compute's awaitable in a coroutine of its
    own, so the sync driver's refusal closed the wrapper and Python warned that the user's
    coroutine was never awaited."""

    async def fetch() -> int:
        return 1

    @tool
    def returns_a_coroutine() -> Any:
        return fetch()

    with Loom(sqlite_url) as loom:

        @loom.flow("refused")
        def refused(ctx: FlowContext) -> list[str]:
            caught: list[str] = []
            for call in (
                lambda: ctx.decide("a", fetch),
                lambda: ctx.decide("b", fetch, retry=Backoff(attempts=2)),
                returns_a_coroutine,
            ):
                with pytest.raises(TypeError, match="awaitable"):
                    call()
            return caught

        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            loom.run("refused")
            gc.collect()
    assert [str(w.message) for w in warned if "never awaited" in str(w.message)] == []


def test_an_open_decision_inside_a_tool_is_a_part_of_it(sqlite_url: str) -> None:
    """An integration of the user's own built on ``ctx.open_decision`` (a stream's value
    stored when it ends) records nothing of its own inside a tool."""
    with Loom(sqlite_url) as loom:

        def totals() -> int:
            ctx = loom_runtime.current_context()
            assert ctx is not None
            opened = ctx.open_decision("stream:totals", kind="stream")
            if opened.recorded:
                return int(opened.value)
            return int(opened.record(sum(range(5))))

        @tool
        def report() -> int:
            return totals() * 2

        @loom.flow("report")
        def flow(ctx: FlowContext) -> list[int]:
            return [report(), totals()]

        run = loom.run("report")
        assert run.output == [20, 10]
        assert list(loom.execution(run.execution_id).decisions) == ["tool:report", "stream:totals"]
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
