"""An MCP server's completions are recorded as what it answers is (ADR 0028, amended
"completions").

``session.complete`` (the suggestions a server gives for a prompt's or a resource template's
argument: what a user picks from, or an agent fills in) went to the live session, on replay
too: a replay needed the server, and one whose suggestions had changed took another path
without a divergence. It is a decision now, rebuilt as the SDK's ``CompleteResult``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom
from replay_tests.capture.test_mcp_listings_attack import GoneSession, mcp, mcp_types, mcpserver

pytestmark = pytest.mark.xdist_group("mcp-sdk")


def server() -> mcpserver.MCPServer:
    served = mcpserver.MCPServer("runbooks")

    @served.prompt()
    def triage(alert: str) -> str:
        """Triage an alert."""
        return f"Triage {alert}"

    @served.resource("runbook://{name}")
    def runbook(name: str) -> str:
        return f"How to handle {name}"

    @served.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Any:
        known = ("disk full", "dns down") if argument.name == "alert" else ("disk", "dns")
        return mcp_types.Completion(values=[v for v in known if v.startswith(argument.value)])

    return served


def build(url: str, session: Any) -> Loom:
    loom = Loom(url)
    recorded = loom_runtime.wrap_session(session)

    @loom.flow("pick")
    async def pick(ctx: Any) -> list[str]:
        prompt = mcp_types.PromptReference(type="ref/prompt", name="triage")
        alerts = await recorded.complete(prompt, {"name": "alert", "value": "d"})
        assert isinstance(alerts, mcp_types.CompleteResult)
        template = mcp_types.ResourceTemplateReference(
            type="ref/resource", uri="runbook://{name}?token=s3cret"
        )
        names = await recorded.complete(template, {"name": "name", "value": "dn"})
        return [*alerts.completion.values, *names.completion.values]

    return loom


def test_completions_are_decisions_replayed_with_the_server_gone(sqlite_url: str) -> None:
    async def record() -> Any:
        async with mcp.Client(server()) as client:
            with build(sqlite_url, client.session) as loom:
                return await loom.arun("pick")

    live = asyncio.run(record())
    assert live.output == ["disk full", "dns down", "dns"]
    with Loom(sqlite_url) as loom:
        decisions = loom.execution(live.execution_id).decisions
    assert {key: d.kind for key, d in decisions.items()} == {
        "complete:mcp:triage": "complete",
        "complete:mcp:runbook://{name}": "complete",
    }
    asked = msgspec.json.decode(decisions["complete:mcp:triage"].input)
    assert asked == {
        "ref": {"type": "ref/prompt", "name": "triage"},
        "argument": {"name": "alert", "value": "d"},
    }
    template = msgspec.json.decode(decisions["complete:mcp:runbook://{name}"].input)
    assert "s3cret" not in str(template)  # a signing parameter is stored as the HTTP ones are

    with build(sqlite_url, GoneSession()) as loom:
        replayed = asyncio.run(loom.areplay(live.execution_id))
    assert replayed.identical, replayed.describe()
    assert replayed.output == live.output
