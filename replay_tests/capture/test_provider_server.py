"""The loopback provider speaks enough of each API for the real SDKs to parse its replies.

These pin the fixture itself: if an SDK upgrade stops parsing what the server sends, these
fail first (instead of every capture test failing for a reason unrelated to loom).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from replay_tests.capture.provider_server import Fault, ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import anthropic
    import openai
else:
    anthropic = deferred("anthropic")
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


def _openai(server: ProviderServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key="sk-test", max_retries=0)


def _anthropic(server: ProviderServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.anthropic_url, api_key="sk-ant", max_retries=0)


def test_chat_answers_json_and_stream_derived_from_the_request(provider: ProviderServer) -> None:
    client = _openai(provider)
    said = [{"role": "user", "content": "hello there"}]
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=said)
    assert reply.choices[0].message.content == "Echo: hello there"
    assert reply.usage is not None and reply.usage.total_tokens > 0
    chunks = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=said,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == "Echo: hello there" and len(pieces) > 2
    assert provider.count == 2


def test_chat_calls_the_offered_tool_then_answers_its_result(provider: ProviderServer) -> None:
    client = _openai(provider)
    said = [{"role": "user", "content": "disk full"}]
    call = client.chat.completions.create(model="m", messages=said, tools=TOOLS)
    tool_call = call.choices[0].message.tool_calls[0]
    assert tool_call.function.arguments == '{"query": "disk full"}'
    said += [
        call.choices[0].message.model_dump(),
        {"role": "tool", "tool_call_id": tool_call.id, "content": "rotate logs"},
    ]
    answer = client.chat.completions.create(model="m", messages=said, tools=TOOLS)
    assert answer.choices[0].message.content == "Answer: rotate logs"


def test_responses_and_embeddings_parse(provider: ProviderServer) -> None:
    client = _openai(provider)
    assert client.responses.create(model="gpt-4o", input="what now").output_text == "Echo: what now"
    with client.responses.stream(model="gpt-4o", input="what now") as stream:
        assert stream.get_final_response().output_text == "Echo: what now"
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["a b", "c"])
    assert [len(d.embedding) for d in vectors.data] == [4, 4]


def test_anthropic_messages_json_stream_and_tool_use(provider: ProviderServer) -> None:
    client = _anthropic(provider)
    said = [{"role": "user", "content": "hi you"}]
    message = client.messages.create(model="claude-x", max_tokens=64, messages=said)
    assert message.content[0].text == "Echo: hi you"
    with client.messages.stream(model="claude-x", max_tokens=64, messages=said) as stream:
        assert list(stream.text_stream) == ["Echo: ", "hi ", "you"]
    tools = [{"name": "search", "input_schema": TOOLS[0]["function"]["parameters"]}]
    used = client.messages.create(model="claude-x", max_tokens=64, messages=said, tools=tools)
    assert used.content[0].input == {"query": "hi you"}


def test_scripted_faults_reach_the_sdk_as_their_errors(provider: ProviderServer) -> None:
    client = _openai(provider)
    said = [{"role": "user", "content": "x y z"}]
    provider.fail_next(Fault.rate_limited(retry_after="3"), Fault.server_error())
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=said)
    assert limited.value.response.headers["retry-after"] == "3"
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=said)
    provider.fail_next(Fault.dropped(after=2))
    with pytest.raises(openai.APIConnectionError):
        list(client.chat.completions.create(model="m", messages=said, stream=True))
    provider.stop()
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=said)
    assert provider.count == 3
