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
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

import loom_runtime
from loom_runtime import AsyncFlowContext, FlowContext, Loom, tool


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
