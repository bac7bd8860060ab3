"""ADR 0028: a wrapped MCP ``ClientSession`` records ``call_tool`` and ``read_resource``.

Recorded against a real in-process MCP server (``mcp.Client(server)``: the SDK's in-memory
transport, a real JSON-RPC session); replayed in a fresh ``Loom`` with the server gone: the
session the replay gets fails the test if it is called at all.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
import sqlalchemy as sa

import loom_runtime
from loom_runtime import DecisionInputChangedError, Loom, wrap
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import mcp
    from mcp import types as mcp_types
    from mcp.server import mcpserver
    from mcp.server.mcpserver import exceptions as mcp_exceptions

    from loom_runtime import mcp_session
else:  # imported by the tests that use them, on one worker (ADR 0031)
    mcp = deferred("mcp")
    mcp_types = deferred("mcp.types")
    mcpserver = deferred("mcp.server.mcpserver")
    mcp_exceptions = deferred("mcp.server.mcpserver.exceptions")
    mcp_session = deferred("loom_runtime.mcp_session")

pytestmark = pytest.mark.xdist_group("mcp-sdk")


def runbook_server(served: list[str]) -> mcpserver.MCPServer:
    """A small MCP server: a search tool, a failing tool and a runbook resource."""
    server = mcpserver.MCPServer("runbooks")

    @server.tool()
    def search(query: str, limit: int = 2) -> list[str]:
        """Search the runbooks."""
        served.append(f"search {query}")
        return [f"{query}-{n}" for n in range(limit)]

    @server.tool()
    def page_oncall(team: str) -> str:
        """Page a team."""
        served.append(f"page {team}")
        raise mcp_exceptions.ToolError(f"no on-call rota for {team}")

    @server.resource("runbook://{name}")
    def runbook(name: str) -> str:
        served.append(f"read {name}")
        return f"How to handle {name}: rotate the logs."

    return server


class GoneSession:
    """What a replay's session is: the server is gone, so any call fails the test."""

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the MCP server was called on replay: call_tool{args}")

    async def read_resource(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the MCP server was called on replay: read_resource{args}")


def build(url: str, session: Any, *, query: str = "disk full") -> Loom:
    loom = Loom(url)
    recorded = loom_runtime.wrap_session(session)

    @loom.flow("agent")
    async def agent(ctx: Any) -> dict[str, Any]:
        found = await recorded.call_tool("search", {"query": query})
        paged = await recorded.call_tool("page_oncall", {"team": "storage"})
        page = await recorded.read_resource("runbook://disk-full")
        try:
            await recorded.read_resource("missing://dns")
        except mcp.MCPError as exc:  # the same class, code and data live and on replay
            missing = [exc.code, exc.message, exc.data]
        assert isinstance(found, mcp_types.CallToolResult)
        assert isinstance(page, mcp_types.ReadResourceResult)
        return {
            "found": [block.text for block in found.content],
            "paged": [paged.is_error, paged.content[0].text],
            "page": page.contents[0].text,
            "missing": missing,
        }

    return loom


def record(url: str, served: list[str]) -> Any:
    async def run() -> Any:
        async with mcp.Client(runbook_server(served)) as client:
            with build(url, client.session) as loom:
                return await loom.arun("agent")

    return asyncio.run(run())


def replay(url: str, **options: Any) -> Any:
    with build(url, GoneSession(), **options) as loom:
        return asyncio.run(loom.areplay(loom.executions()[0].execution_id))


def test_an_mcp_call_inside_a_tool_is_a_part_of_the_tool_s_decision(sqlite_url: str) -> None:
    """ADR 0002 "inside a decision": a tool of the agent's own that calls the MCP server is
    recorded once, as the tool; a replay with the server gone answers it from the log."""

    def build_nested(session: Any) -> Loom:
        loom = Loom(sqlite_url)
        recorded = loom_runtime.wrap_session(session)

        @loom_runtime.tool
        async def runbook_search(query: str) -> list[str]:
            found = await recorded.call_tool("search", {"query": query})
            return [block.text for block in found.content]

        @loom.flow("nested")
        async def agent(ctx: Any) -> list[str]:
            return await runbook_search("disk full")

        return loom

    served: list[str] = []

    async def run() -> Any:
        async with mcp.Client(runbook_server(served)) as client:
            with build_nested(client.session) as loom:
                return await loom.arun("nested")

    live = asyncio.run(run())
    assert served == ["search disk full"]
    with Loom(sqlite_url) as loom:
        assert list(loom.execution(live.execution_id).decisions) == ["tool:runbook_search"]
    with build_nested(GoneSession()) as loom:
        replayed = asyncio.run(loom.areplay(live.execution_id))
    assert replayed.identical, replayed.describe()
    assert replayed.output == live.output == ["disk full-0", "disk full-1"]


def test_tool_calls_and_resource_reads_are_keyed_decisions_with_their_request_as_input(
    sqlite_url: str,
) -> None:
    served: list[str] = []
    run = record(sqlite_url, served)
    assert run.output == {
        "found": ["disk full-0", "disk full-1"],
        "paged": [True, "Error executing tool page_oncall: no on-call rota for storage"],
        "page": "How to handle disk-full: rotate the logs.",
        "missing": [-32602, "Unknown resource: missing://dns", {"uri": "missing://dns"}],
    }
    with Loom(sqlite_url) as loom:
        decisions = loom.execution(run.execution_id).decisions
    assert list(decisions) == [
        "tool:mcp:search",
        "tool:mcp:page_oncall",
        "resource:mcp:runbook://disk-full",
        "resource:mcp:missing://dns",
    ]
    assert [d.kind for d in decisions.values()] == ["tool", "tool", "resource", "resource"]
    assert msgspec.json.decode(decisions["resource:mcp:missing://dns"].value or b"null") == {
        "type": "MCPError",
        "result": {
            "code": -32602,
            "message": "Unknown resource: missing://dns",
            "data": {"uri": "missing://dns"},
        },
    }
    assert msgspec.json.decode(decisions["tool:mcp:search"].input) == {
        "name": "search",
        "arguments": {"query": "disk full"},
    }
    value = msgspec.json.decode(decisions["tool:mcp:search"].value or b"null")
    assert value["type"] == "CallToolResult"
    assert value["result"]["isError"] is False  # the protocol's own field names
    assert value["result"]["content"][0]["text"] == "disk full-0"
    assert served == ["search disk full", "page storage", "read disk-full"]


def test_a_replay_rebuilds_the_sdk_results_with_the_server_gone(sqlite_url: str) -> None:
    """Same output, same SDK types (the flow asserts them), no call to any server."""
    served: list[str] = []
    run = record(sqlite_url, served)
    result = replay(sqlite_url)
    assert result.identical, result.describe()
    assert result.output == run.output
    assert len(served) == 3


def test_a_changed_tool_argument_is_a_diffed_input_divergence(sqlite_url: str) -> None:
    record(sqlite_url, [])
    result = replay(sqlite_url, query="dns down")
    changed = [d for d in result.divergences if isinstance(d, DecisionInputChangedError)]
    assert changed, result.describe()
    assert changed[0].key == "tool:mcp:search"
    assert '"query": "dns down"' in str(changed[0])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"type":"CallToolResult"', b'"type":"Popen"'),
        (b'"content":[', b'"content":7,"was":['),
    ],
    ids=["unknown-type", "no-longer-validates"],
)
def test_a_recorded_result_that_cannot_be_rebuilt_is_a_typed_error_naming_the_decision(
    sqlite_url: str, old: bytes, new: bytes
) -> None:
    """Recorded data is untrusted: an unknown type name, or JSON the SDK no longer validates,
    is a RecordedResultError naming the decision, not a crash inside pydantic."""
    record(sqlite_url, [])
    with Loom(sqlite_url) as loom, loom.log.engine.begin() as conn:
        rows = conn.execute(sa.text("SELECT rowid, state FROM stored_events")).fetchall()
        edited = [(rowid, bytes(state)) for rowid, state in rows if old in bytes(state)]
        rowid, state = edited[0]
        conn.execute(
            sa.text("UPDATE stored_events SET state = :state WHERE rowid = :rowid"),
            {"state": state.replace(old, new, 1), "rowid": rowid},
        )
    result = replay(sqlite_url)
    assert not result.identical
    described = result.describe()
    assert (
        "replay raised loom_runtime.errors:RecordedResultError: the recorded result of "
        "decision 'tool:mcp:search' cannot be rebuilt"
    ) in described, described


def test_outside_a_flow_calls_go_to_the_session_and_everything_else_is_delegated() -> None:
    served: list[str] = []

    async def run() -> tuple[Any, Any]:
        async with mcp.Client(runbook_server(served)) as client:
            session = wrap(client.session)  # wrap() hands an MCP session to wrap_session
            assert isinstance(session, loom_runtime.RecordedSession)
            assert loom_runtime.wrap_session(session) is session
            assert session.session is client.session
            tools = await session.list_tools()
            found = await session.call_tool("search", {"query": "q", "limit": 1})
            return tools, found

    tools, found = asyncio.run(run())
    assert {tool.name for tool in tools.tools} == {"search", "page_oncall"}
    assert [block.text for block in found.content] == ["q-0"]
    assert served == ["search q"]


def test_a_resource_key_names_scheme_host_and_path_never_query_or_userinfo() -> None:
    assert mcp_session.resource_name("runbook://disk-full") == "runbook://disk-full"
    assert (
        mcp_session.resource_name("https://bot:s3cret@docs.example/runbooks/dns.md?token=abc#top")
        == "https://docs.example/runbooks/dns.md"
    )
    assert mcp_session.resource_name("file:///srv/runbooks/a.md") == "file:///srv/runbooks/a.md"


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_without_mcp_wrap_session_names_the_extra_to_install() -> None:
    """mcp missing: asking for wrap_session raises the typed error naming the extra."""
    script = (
        "import sys; sys.modules['mcp'] = None\n"
        "import loom_runtime\n"
        "try:\n"
        "    loom_runtime.wrap_session\n"
        "except loom_runtime.MissingExtraError as exc:\n"
        "    print(exc.extra, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("mcp ")
    assert "pip install 'loom-replay[mcp]'" in done.stdout
