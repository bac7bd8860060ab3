"""ADR 0025: a wrapped Anthropic client records messages, streams and tool use, sync and async.

Each replay runs in a fresh ``Loom`` with the loopback provider stopped; its request count
proves nothing was sent.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import Loom, wrap
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import anthropic
else:
    anthropic = deferred("anthropic")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

TOOLS: Any = [
    {
        "name": "search",
        "description": "Search the runbooks",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
]


def build(db: str) -> Loom:
    loom = Loom(db)

    @loom.flow("messages")
    def messages(ctx: Any, url: str, question: str) -> dict[str, Any]:
        client = wrap(anthropic.Anthropic(base_url=url, api_key="sk-ant-test"))
        said: Any = [{"role": "user", "content": question}]
        plain = client.messages.create(model="claude-x", max_tokens=64, messages=said)
        with client.messages.stream(model="claude-x", max_tokens=64, messages=said) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
        used = client.messages.create(model="claude-x", max_tokens=64, messages=said, tools=TOOLS)
        tool_use = used.content[0]
        return {
            "text": plain.content[0].text,  # type: ignore[union-attr]
            "output_tokens": plain.usage.output_tokens,
            "pieces": pieces,
            "final": final.content[0].text,  # type: ignore[union-attr]
            "final_stop": final.stop_reason,
            "tool": [tool_use.type, tool_use.name, tool_use.input],  # type: ignore[union-attr]
            "types": [type(plain).__name__, type(tool_use).__name__],
        }

    @loom.flow("first-words")
    def first_words(ctx: Any, url: str, question: str) -> list[str]:
        client = wrap(anthropic.Anthropic(base_url=url, api_key="sk-ant-test"))
        said: Any = [{"role": "user", "content": question}]
        with client.messages.stream(model="claude-x", max_tokens=64, messages=said) as stream:
            words = iter(stream.text_stream)
            return [next(words), next(words)]

    @loom.flow("async-messages")
    async def async_messages(ctx: Any, url: str, question: str) -> dict[str, Any]:
        client = wrap(anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test"))
        said: Any = [{"role": "user", "content": question}]
        plain = await client.messages.create(model="claude-x", max_tokens=64, messages=said)
        async with client.messages.stream(
            model="claude-x", max_tokens=64, messages=said, tools=TOOLS
        ) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
        return {
            "text": plain.content[0].text,  # type: ignore[union-attr]
            "kinds": kinds,
            "tool_input": final.content[0].input,  # type: ignore[union-attr]
        }

    return loom


def test_messages_streams_and_tool_use_replay_offline(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """``messages.create``, the ``messages.stream`` helper (its ``text_stream`` and final
    message) and a tool use are three ``model:anthropic:messages`` decisions; the replay
    returns the same ``Message`` objects and text pieces."""
    with build(sqlite_url) as loom:
        run = loom.run("messages", url=provider.anthropic_url, question="hi you")
    assert run.output["text"] == run.output["final"] == "Echo: hi you"
    assert run.output["pieces"] == ["Echo: ", "hi ", "you"]
    assert run.output["tool"] == ["tool_use", "search", {"query": "hi you"}]
    assert run.output["types"] == ["Message", "ToolUseBlock"]
    served = provider.count
    provider.stop()
    with build(sqlite_url) as fresh:
        result = fresh.replay(run.execution_id)
        recorded = dict(fresh.execution(run.execution_id).decisions)
    assert provider.count == served == 3
    assert result.identical, result.describe()
    assert result.output == run.output
    assert sorted(recorded) == [
        "model:anthropic:messages",
        "model:anthropic:messages#2",
        "model:anthropic:messages#3",
    ]
    streamed = msgspec.json.decode(recorded["model:anthropic:messages#2"].value)
    assert [e["event"] for e in streamed["events"]][:2] == ["message_start", "content_block_start"]
    assert streamed["events"][-1]["event"] == "message_stop"
    assert streamed["final"]["content"] == [{"type": "text", "text": "Echo: hi you"}]
    assert streamed["final"]["stop_reason"] == "end_turn"
    meta = msgspec.json.decode(recorded["model:anthropic:messages#2"].meta)
    assert meta["model"] == "claude-x-2025-01-01" and meta["finish_reason"] == "end_turn"
    assert meta["usage"]["output_tokens"] == run.output["output_tokens"]
    asked = msgspec.json.decode(recorded["model:anthropic:messages#3"].input)
    assert asked == {
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi you"}],
        "model": "claude-x",
        "tools": TOOLS,
    }


def test_an_async_client_streams_tool_use_and_replays_it(
    provider: ProviderServer, sqlite_url: str
) -> None:
    with build(sqlite_url) as loom:
        run = asyncio.run(loom.arun("async-messages", url=provider.anthropic_url, question="q"))
    assert run.output["tool_input"] == {"query": "q"}
    assert "input_json" in run.output["kinds"] or "content_block_delta" in run.output["kinds"]
    provider.stop()
    with build(sqlite_url) as fresh:
        result = asyncio.run(fresh.areplay(run.execution_id))
        value = msgspec.json.decode(
            fresh.execution(run.execution_id).decisions["model:anthropic:messages#2"].value
        )
    assert provider.count == 2
    assert result.identical, result.describe()
    assert result.output == run.output
    assert value["final"]["content"][0]["input"] == {"query": "q"}
    assert value["final"]["stop_reason"] == "tool_use"


def test_a_stream_helper_left_early_stores_what_was_read_as_incomplete(
    provider: ProviderServer, sqlite_url: str
) -> None:
    with build(sqlite_url) as loom:
        run = loom.run("first-words", url=provider.anthropic_url, question="one two three four")
    assert run.output == ["Echo: ", "one "]
    provider.stop()
    with build(sqlite_url) as fresh:
        result = fresh.replay(run.execution_id)
        value = msgspec.json.decode(
            fresh.execution(run.execution_id).decisions["model:anthropic:messages"].value
        )
    assert provider.count == 1
    assert result.identical, result.describe()
    assert result.output == run.output
    assert value["complete"] is False
    assert value["events"][-1]["event"] != "message_stop"
    assert value["final"]["stop_reason"] is None
