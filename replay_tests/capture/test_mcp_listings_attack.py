"""What an MCP server offers is recorded as what it answers is (ADR 0028, amended "listings").

An attack review ran the canonical MCP agent step, list the server's tools (to offer them to
the model) and call one: ``call_tool`` was a decision, ``list_tools`` went to the live
session, on replay too. A replay then needed the server, and one against a server that had
gained a tool diverged. ``list_tools``, ``list_resources``, ``list_resource_templates``,
``list_prompts`` and ``get_prompt`` are now decisions, rebuilt as the SDK's result types.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import mcp
    from mcp import types as mcp_types
    from mcp.server import mcpserver
else:  # imported by the tests that use them, on one worker (ADR 0031)
    mcp = deferred("mcp")
    mcp_types = deferred("mcp.types")
    mcpserver = deferred("mcp.server.mcpserver")

pytestmark = pytest.mark.xdist_group("mcp-sdk")


def server(*, grown: bool) -> mcpserver.MCPServer:
    """A tool, a resource, a resource template and a prompt; ``grown``: one tool more."""
    served = mcpserver.MCPServer("runbooks")

    @served.tool()
    def search(query: str) -> str:
        """Search the runbooks."""
        return f"found {query}"

    if grown:

        @served.tool()
        def page_oncall(team: str) -> str:
            """Page a team."""
            return "paged"

    @served.resource("runbook://index")
    def index() -> str:
        return "disk, dns"

    @served.resource("runbook://{name}")
    def runbook(name: str) -> str:
        return f"How to handle {name}"

    @served.prompt()
    def triage(alert: str) -> str:
        """Triage an alert."""
        return f"Triage {alert}"

    return served


class GoneSession:
    """What a replay's session is: the server is gone, so any call fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the MCP server was asked on replay: {name}")


def build(url: str, session: Any) -> Loom:
    loom = Loom(url)
    recorded = loom_runtime.wrap_session(session)

    @loom.flow("agent")
    async def agent(ctx: Any) -> dict[str, Any]:
        tools = await recorded.list_tools()
        assert isinstance(tools, mcp_types.ListToolsResult)
        resources = await recorded.list_resources()
        templates = await recorded.list_resource_templates()
        prompts = await recorded.list_prompts()
        paged = await recorded.list_tools(params=mcp_types.PaginatedRequestParams(cursor="0"))
        prompt = await recorded.get_prompt("triage", {"alert": "disk full"})
        assert isinstance(prompt, mcp_types.GetPromptResult)
        found = await recorded.call_tool(tools.tools[0].name, {"query": "disk"})
        return {
            "tools": [tool.name for tool in tools.tools],
            "paged": [tool.name for tool in paged.tools],
            "resources": [str(resource.uri) for resource in resources.resources],
            "templates": [template.uri_template for template in templates.resource_templates],
            "prompts": [prompt.name for prompt in prompts.prompts],
            "prompt": [message.content.text for message in prompt.messages],
            "found": found.content[0].text,
        }

    return loom


def _record(url: str) -> Any:
    async def run() -> Any:
        async with mcp.Client(server(grown=False)) as client:
            with build(url, client.session) as loom:
                return await loom.arun("agent")

    return asyncio.run(run())


def test_listings_and_prompts_are_decisions_replayed_with_the_server_gone(
    sqlite_url: str,
) -> None:
    live = _record(sqlite_url)
    assert live.output["tools"] == ["search"]
    assert live.output["prompt"] == ["Triage disk full"]
    with Loom(sqlite_url) as loom:
        decisions = loom.execution(live.execution_id).decisions
    assert {key: d.kind for key, d in decisions.items()} == {
        "list:mcp:tools": "list",
        "list:mcp:resources": "list",
        "list:mcp:resource_templates": "list",
        "list:mcp:prompts": "list",
        "list:mcp:tools#2": "list",
        "prompt:mcp:triage": "prompt",
        "tool:mcp:search": "tool",
    }
    inputs = {key: msgspec.json.decode(d.input) for key, d in decisions.items()}
    assert inputs["list:mcp:tools"] == {}
    assert inputs["list:mcp:tools#2"] == {"cursor": "0"}
    assert inputs["prompt:mcp:triage"] == {"name": "triage", "arguments": {"alert": "disk full"}}
    listed = msgspec.json.decode(decisions["list:mcp:tools"].value or b"null")
    assert listed["type"] == "ListToolsResult"
    assert [tool["name"] for tool in listed["result"]["tools"]] == ["search"]
    assert "inputSchema" in listed["result"]["tools"][0]  # the protocol's own field names

    with build(sqlite_url, GoneSession()) as loom:
        replayed = asyncio.run(loom.areplay(live.execution_id))
    assert replayed.identical, replayed.describe()


def test_a_server_that_gained_a_tool_does_not_change_the_replay(sqlite_url: str) -> None:
    """The review's case: the tools offered to the model are the recorded ones."""
    live = _record(sqlite_url)

    async def replay() -> Any:
        async with mcp.Client(server(grown=True)) as client:
            with build(sqlite_url, client.session) as loom:
                return await loom.areplay(live.execution_id)

    replayed = asyncio.run(replay())
    assert replayed.identical, replayed.describe()
    assert replayed.output["tools"] == ["search"]


def test_outside_a_flow_a_listing_goes_to_the_session() -> None:
    async def run() -> list[str]:
        async with mcp.Client(server(grown=True)) as client:
            listed = await loom_runtime.wrap_session(client.session).list_tools()
            return [tool.name for tool in listed.tools]

    assert asyncio.run(run()) == ["search", "page_oncall"]
