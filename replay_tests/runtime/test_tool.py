"""ADR 0028: ``@tool`` makes each call of a tool function inside a flow a ``tool`` decision.

Each replay runs in a fresh ``Loom`` on the same database with tool functions that fail the
test if they are called (the tool's backend is "gone").
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import msgspec
import pytest
from langchain_core.tools import tool as langchain_tool

from loom_runtime import (
    DecisionInputChangedError,
    DecisionKeyError,
    FlowContext,
    Loom,
    tool,
)


class Ticket(msgspec.Struct, frozen=True):
    id: str
    status: str


class Opaque:
    """A class msgspec cannot decode into: its instances are recorded as plain JSON."""


class TicketNotFoundError(Exception):
    pass


def backend(*, live: bool) -> dict[str, Any]:
    """Tool functions that count their calls, or fail the test when the backend is gone."""
    calls: list[str] = []

    def gone(what: str) -> None:
        if not live:
            raise AssertionError(f"the tool {what} was called on replay")
        calls.append(what)

    @tool
    def lookup(ticket_id: str, *, verbose: bool = False) -> Ticket:
        """Look a ticket up by id."""
        gone("lookup")
        if ticket_id == "missing":
            raise TicketNotFoundError(f"no ticket {ticket_id}")
        return Ticket(id=ticket_id, status="open" if not verbose else "open (verbose)")

    @tool(name="search")
    def search_runbooks(query: str, limit: int = 3) -> list[str]:
        gone("search")
        return [f"{query}-{n}" for n in range(limit)]

    @tool
    async def fetch(url: str) -> dict[str, str]:
        """Fetch a page."""
        gone("fetch")
        await asyncio.sleep(0)
        return {"url": url, "body": "page"}

    return {"calls": calls, "lookup": lookup, "search": search_runbooks, "fetch": fetch}


def build(url: str, *, live: bool, query: str = "disk full") -> tuple[Loom, dict[str, Any]]:
    loom = Loom(url)
    tools = backend(live=live)

    @loom.flow("agent")
    def agent(ctx: FlowContext) -> list[Any]:
        ticket = tools["lookup"]("T-1")
        assert isinstance(ticket, Ticket)
        return [ticket.status, tools["search"](query), tools["search"](query, limit=1)]

    @loom.flow("failing")
    def failing(ctx: FlowContext) -> str:
        try:
            tools["lookup"]("missing")
        except TicketNotFoundError as exc:
            return f"handled: {exc}"
        return "not raised"

    @loom.flow("async_agent")
    async def async_agent(ctx: Any) -> list[Any]:
        page = await tools["fetch"]("https://example.test/runbook")
        return [page, tools["lookup"]("T-2").status]  # a sync tool in an async flow

    return loom, tools


def test_a_call_is_a_tool_decision_keyed_by_name_with_its_bound_arguments(
    sqlite_url: str,
) -> None:
    """Key ``tool:<name>`` (``name=`` wins), kind ``tool``, input by parameter name with
    defaults applied, repeated calls numbered."""
    loom, tools = build(sqlite_url, live=True)
    with loom:
        run = loom.run("agent")
        decisions = loom.execution(run.execution_id).decisions
    assert run.output == ["open", ["disk full-0", "disk full-1", "disk full-2"], ["disk full-0"]]
    assert list(decisions) == ["tool:lookup", "tool:search", "tool:search#2"]
    assert {d.kind for d in decisions.values()} == {"tool"}
    assert msgspec.json.decode(decisions["tool:lookup"].input) == {
        "ticket_id": "T-1",
        "verbose": False,
    }
    assert msgspec.json.decode(decisions["tool:search#2"].input) == {
        "query": "disk full",
        "limit": 1,
    }
    assert tools["calls"] == ["lookup", "search", "search"]


def test_a_replay_answers_from_the_log_without_calling_the_tool(sqlite_url: str) -> None:
    """The typed result (a Struct, by the return annotation) comes back from the log."""
    loom, _ = build(sqlite_url, live=True)
    with loom:
        run = loom.run("agent")
    replayer, tools = build(sqlite_url, live=False)
    with replayer:
        result = replayer.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output
    assert tools["calls"] == []


def test_a_changed_argument_is_a_diffed_input_divergence(sqlite_url: str) -> None:
    """The model asking the tool something else is reported with the argument's diff."""
    loom, _ = build(sqlite_url, live=True)
    with loom:
        run = loom.run("agent")
    replayer, _ = build(sqlite_url, live=False, query="dns down")
    with replayer:
        result = replayer.replay(run.execution_id)
    changed = [d for d in result.divergences if isinstance(d, DecisionInputChangedError)]
    assert changed, result.describe()
    assert changed[0].key == "tool:search"
    assert '-  "query": "disk full"' in str(changed[0])
    assert '+  "query": "dns down"' in str(changed[0])


def test_a_raised_exception_is_recorded_and_raised_again_on_replay(sqlite_url: str) -> None:
    loom, _ = build(sqlite_url, live=True)
    with loom:
        run = loom.run("failing")
        decision = loom.execution(run.execution_id).decisions["tool:lookup"]
    assert run.output == "handled: no ticket missing"
    assert decision.error_type is not None and decision.error_type.endswith("TicketNotFoundError")
    replayer, _ = build(sqlite_url, live=False)
    with replayer:
        result = replayer.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output


def test_async_tools_are_awaited_and_sync_tools_work_in_async_flows(sqlite_url: str) -> None:
    loom, tools = build(sqlite_url, live=True)

    with loom:
        run = asyncio.run(loom.arun("async_agent"))
        decisions = loom.execution(run.execution_id).decisions
    assert run.output == [{"url": "https://example.test/runbook", "body": "page"}, "open"]
    assert list(decisions) == ["tool:fetch", "tool:lookup"]
    assert tools["calls"] == ["fetch", "lookup"]
    replayer, gone = build(sqlite_url, live=False)
    with replayer:
        result = asyncio.run(replayer.areplay(run.execution_id))
    assert result.identical, result.describe()
    assert result.output == run.output
    assert gone["calls"] == []


def test_outside_a_flow_the_function_is_called_as_is() -> None:
    """No round trip, no recording: the very object the function returned."""
    tools = backend(live=True)
    returned = tools["lookup"]("T-9")
    assert returned == Ticket(id="T-9", status="open")
    assert asyncio.run(tools["fetch"]("u")) == {"url": "u", "body": "page"}
    assert tools["calls"] == ["lookup", "fetch"]


def test_a_return_type_msgspec_cannot_decode_is_recorded_as_plain_json(sqlite_url: str) -> None:
    """An annotation msgspec needs a hook for, or one that does not resolve, does not break
    the tool: its value comes back as plain JSON."""

    @tool
    def opaque() -> list[Opaque]:
        return [{"shape": "a dict after all"}]  # type: ignore[list-item]

    @tool
    def unresolved() -> Undefined:  # type: ignore[name-defined]  # noqa: F821
        return {"id": "T-1", "status": "open"}

    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> Any:
            return [opaque(), unresolved()]

        assert loom.run("f").output == [
            [{"shape": "a dict after all"}],
            {"id": "T-1", "status": "open"},
        ]


def test_the_wrapper_keeps_the_signature_and_docstring_frameworks_read() -> None:
    """LangChain's ``@tool`` builds the same schema from the wrapped function as from the
    original, and an async tool stays a coroutine function."""

    def original(ticket_id: str, *, verbose: bool = False) -> Ticket:
        """Look a ticket up by id."""
        return Ticket(id=ticket_id, status="open")

    wrapped = tool(original)
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert wrapped.__name__ == "original" and wrapped.__doc__ == original.__doc__
    assert inspect.iscoroutinefunction(backend(live=True)["fetch"])
    plain, recorded = langchain_tool(original), langchain_tool(wrapped)
    assert recorded.name == plain.name and recorded.description == plain.description
    assert recorded.args == plain.args


def test_a_tool_name_must_be_a_non_empty_string() -> None:
    with pytest.raises(DecisionKeyError, match="non-empty str"):
        tool(name="")(lambda: None)
