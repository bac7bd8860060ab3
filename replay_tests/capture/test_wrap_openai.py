"""ADR 0025: a wrapped OpenAI client records its calls in a flow and replays them offline.

The real ``openai`` SDK talks to the loopback provider; each replay runs in a fresh ``Loom``
on the same file with the provider stopped, and the provider's request count proves that
nothing was sent.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import (
    DecisionInputChangedError,
    Loom,
    ReadPastRecordingError,
    UnsupportedClientError,
    async_transport,
    transport,
    wrap,
)
from loom_runtime.http_transport import http_package
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

API_KEY = "sk-proj-wrapTESTkey0123456789abcdefghijklmnopqrstuv"
ORGANIZATION = "org-wrapTESTorganisation42"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the runbooks",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


def client(url: str) -> openai.OpenAI:
    return wrap(openai.OpenAI(base_url=url, api_key=API_KEY, organization=ORGANIZATION))


def aclient(url: str) -> openai.AsyncOpenAI:
    return wrap(openai.AsyncOpenAI(base_url=url, api_key=API_KEY, organization=ORGANIZATION))


def build(
    db: str,
    *,
    system: str = "You are an SRE.",
    transcriber: str = "whisper-1",
    read_to_end: bool = False,
) -> Loom:
    """A Loom whose flows call a wrapped OpenAI client at ``url`` (``read_to_end``: the
    ``stream`` flow ignores ``keep``, as code changed since the recording would)."""
    loom = Loom(db)

    @loom.flow("agent")
    def agent(ctx: Any, url: str, question: str) -> dict[str, Any]:
        said: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ]
        openai_client = client(url)
        first = openai_client.chat.completions.create(
            model="gpt-4o-mini", messages=said, tools=TOOLS
        )
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        said.append(first.choices[0].message.model_dump(exclude_none=True))
        said.append({"role": "tool", "tool_call_id": call.id, "content": "rotate the logs"})
        answer = openai_client.chat.completions.create(
            model="gpt-4o-mini", messages=said, tools=TOOLS
        )
        return {
            "arguments": call.function.arguments,  # type: ignore[union-attr]
            "answer": answer.choices[0].message.content,
            "total_tokens": answer.usage.total_tokens,  # type: ignore[union-attr]
            "model": answer.model,
            "finish": [first.choices[0].finish_reason, answer.choices[0].finish_reason],
            "types": [type(first).__name__, type(call).__name__],
        }

    @loom.flow("stream")
    def stream(ctx: Any, url: str, question: str, keep: int | None) -> list[Any]:
        chunks = client(url).chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": question}],
            tools=TOOLS if question.startswith("tool") else openai.omit,
            stream=True,
            stream_options={"include_usage": True},
        )
        seen: list[Any] = []
        with chunks:
            for chunk in chunks:
                seen.append(chunk.model_dump(exclude_none=True))
                if keep is not None and len(seen) == keep and not read_to_end:
                    break
        return seen

    @loom.flow("responses")
    def responses(ctx: Any, url: str, question: str) -> dict[str, Any]:
        openai_client = client(url)
        reply = openai_client.responses.create(model="gpt-4o", input=question)
        with openai_client.responses.stream(model="gpt-4o", input=question) as events:
            kinds = [event.type for event in events]
            streamed = events.get_final_response().output_text
        vectors = openai_client.embeddings.create(model="text-embedding-3-small", input=[question])
        return {
            "text": reply.output_text,
            "tokens": reply.usage.total_tokens,  # type: ignore[union-attr]
            "kinds": kinds,
            "streamed": streamed,
            "vector": vectors.data[0].embedding,
        }

    @loom.flow("transcription")
    def transcription(ctx: Any, url: str) -> str:
        audio = ("note.wav", b"RIFF\x00\x01not really audio\xff", "audio/x-wav")
        return client(url).audio.transcriptions.create(model=transcriber, file=audio).text

    @loom.flow("async-agent")
    async def async_agent(ctx: Any, url: str, question: str) -> dict[str, Any]:
        openai_client = aclient(url)
        said: Any = [{"role": "user", "content": question}]
        reply = await openai_client.chat.completions.create(model="gpt-4o-mini", messages=said)
        chunks = await openai_client.chat.completions.create(
            model="gpt-4o-mini", messages=said, stream=True
        )
        pieces = [chunk.choices[0].delta.content async for chunk in chunks if chunk.choices]
        return {"reply": reply.choices[0].message.content, "pieces": pieces}

    return loom


def replay_offline(db: str, provider: ProviderServer, execution_id: Any, **kw: Any) -> Any:
    """Replay in a fresh Loom with the provider stopped; fails if it was sent anything."""
    served = provider.count
    provider.stop()
    with build(db, **kw) as fresh:
        result = fresh.replay(execution_id)
    assert provider.count == served
    return result


def decisions(db: str, execution_id: Any) -> dict[str, Any]:
    with Loom(db) as loom:
        return dict(loom.execution(execution_id).decisions)


def test_a_tool_calling_conversation_replays_offline_with_the_same_sdk_objects(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """Two chat completions (a tool call, then the answer to its result) are two ``model``
    decisions keyed by the call; the replay returns the same ``ChatCompletion`` objects (the
    attribute chains of the live run give the same values) without a request."""
    with build(sqlite_url) as loom:
        run = loom.run("agent", url=provider.openai_url, question="disk full")
    assert run.output["arguments"] == '{"query": "disk full"}'
    assert run.output["answer"] == "Answer: rotate the logs"
    assert run.output["types"] == ["ChatCompletion", "ChatCompletionMessageFunctionToolCall"]
    assert provider.count == 2
    result = replay_offline(sqlite_url, provider, run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output
    recorded = decisions(sqlite_url, run.execution_id)
    assert {key: d.kind for key, d in recorded.items()} == {
        "model:openai:chat.completions": "model",
        "model:openai:chat.completions#2": "model",
    }
    asked = msgspec.json.decode(recorded["model:openai:chat.completions"].input)
    assert asked == {
        "messages": [
            {"role": "system", "content": "You are an SRE."},
            {"role": "user", "content": "disk full"},
        ],
        "model": "gpt-4o-mini",
        "tools": TOOLS,
    }
    value = msgspec.json.decode(recorded["model:openai:chat.completions#2"].value)
    assert value["status"] == 200
    assert value["body"]["choices"][0]["message"]["content"] == "Answer: rotate the logs"
    meta = msgspec.json.decode(recorded["model:openai:chat.completions#2"].meta)
    assert meta["model"] == "gpt-4o-mini-2025-01-01"
    assert meta["usage"]["total_tokens"] == run.output["total_tokens"]
    assert meta["finish_reason"] == "stop"
    assert meta["latency_ms"] >= 0 and "attempts" not in meta


def test_a_changed_prompt_is_a_changed_input_whose_diff_shows_the_message(
    provider: ProviderServer, sqlite_url: str
) -> None:
    with build(sqlite_url) as loom:
        run = loom.run("agent", url=provider.openai_url, question="disk full")
    result = replay_offline(sqlite_url, provider, run.execution_id, system="You are a DBA.")
    assert not result.identical
    changed = result.divergences[0]
    assert isinstance(changed, DecisionInputChangedError)
    assert changed.key == "model:openai:chat.completions"
    assert "You are an SRE." in changed.diff and "You are a DBA." in changed.diff


@pytest.mark.parametrize("question", ["hello there", "tool please"])
def test_a_stream_is_stored_as_its_events_and_the_message_they_assemble_to(
    provider: ProviderServer, sqlite_url: str, question: str
) -> None:
    """A streamed completion is one decision written when the stream ends: its parsed SSE
    events in order and the assembled ``chat.completion`` (content or tool-call arguments
    accumulated, the usage chunk's usage); the replay yields the same chunks."""
    with build(sqlite_url) as loom:
        run = loom.run("stream", url=provider.openai_url, question=question, keep=None)
    result = replay_offline(sqlite_url, provider, run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output and len(run.output) >= 4
    recorded = decisions(sqlite_url, run.execution_id)["model:openai:chat.completions"]
    value = msgspec.json.decode(recorded.value)
    assert "complete" not in value  # true, the default, is not written
    assert len(value["events"]) == len(run.output) + 1 and value["events"][-1] == {"text": "[DONE]"}
    message = value["final"]["choices"][0]["message"]
    if question.startswith("tool"):
        arguments = message["tool_calls"][0]["function"]["arguments"]
        assert arguments == '{"query": "tool please"}'
        assert value["final"]["choices"][0]["finish_reason"] == "tool_calls"
    else:
        assert message["content"] == "Echo: hello there"
    assert value["final"]["usage"] == run.output[-1]["usage"]
    meta = msgspec.json.decode(recorded.meta)
    assert meta["usage"] == run.output[-1]["usage"]
    assert 0 <= meta["time_to_first_byte_ms"] <= meta["latency_ms"]


def test_an_abandoned_stream_stores_what_was_consumed_and_says_so(
    provider: ProviderServer, sqlite_url: str
) -> None:
    with build(sqlite_url) as loom:
        run = loom.run("stream", url=provider.openai_url, question="one two three four", keep=2)
    result = replay_offline(sqlite_url, provider, run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output and len(run.output) == 2
    value = msgspec.json.decode(
        decisions(sqlite_url, run.execution_id)["model:openai:chat.completions"].value
    )
    assert value["complete"] is False
    assert len(value["events"]) >= 2 and value["events"][-1] != {"text": "[DONE]"}
    assert value["final"]["choices"][0]["finish_reason"] is None


def test_reading_an_abandoned_stream_further_on_replay_is_reported(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """Code that now reads to the end a stream the recorded run left after two chunks asks
    for chunks never received: the flow gets :class:`ReadPastRecordingError` naming the
    decision, instead of the part passed off as a whole stream."""
    with build(sqlite_url) as loom:
        run = loom.run("stream", url=provider.openai_url, question="one two three four", keep=2)
    provider.stop()
    with build(sqlite_url, read_to_end=True) as fresh:
        result = fresh.replay(run.execution_id)
    [divergence] = result.divergences
    assert isinstance(divergence, ReadPastRecordingError), result.describe()
    assert "'model:openai:chat.completions'" in str(divergence)


def test_responses_and_embeddings_replay_offline(provider: ProviderServer, sqlite_url: str) -> None:
    with build(sqlite_url) as loom:
        run = loom.run("responses", url=provider.openai_url, question="what now")
    assert run.output["text"] == run.output["streamed"] == "Echo: what now"
    assert run.output["kinds"][-1] == "response.completed"
    result = replay_offline(sqlite_url, provider, run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output
    recorded = decisions(sqlite_url, run.execution_id)
    assert sorted(recorded) == [
        "model:openai:embeddings",
        "model:openai:responses",
        "model:openai:responses#2",
    ]
    streamed = msgspec.json.decode(recorded["model:openai:responses#2"].value)
    assert streamed["final"]["output"][0]["content"][0]["text"] == "Echo: what now"
    assert msgspec.json.decode(recorded["model:openai:embeddings"].meta)["usage"]["total_tokens"]


def test_an_upload_replays_offline_and_a_changed_field_shows_as_text(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """A transcription is a multipart upload with a boundary drawn per request: the same call
    replays identically, and another model is a changed input whose diff names it."""
    with build(sqlite_url) as loom:
        run = loom.run("transcription", url=provider.openai_url)
    assert run.output == "the disk is full"
    result = replay_offline(sqlite_url, provider, run.execution_id)
    assert result.identical, result.describe()
    with build(sqlite_url, transcriber="whisper-2") as fresh:
        changed = fresh.replay(run.execution_id)
    [finding] = changed.divergences
    assert isinstance(finding, DecisionInputChangedError)
    assert finding.key == "model:openai:audio.transcriptions"
    assert '+          "text": "whisper-2"' in finding.diff


def test_an_async_client_records_and_replays_plain_and_streamed(
    provider: ProviderServer, sqlite_url: str
) -> None:
    with build(sqlite_url) as loom:
        run = asyncio.run(loom.arun("async-agent", url=provider.openai_url, question="hi you"))
    assert run.output == {"reply": "Echo: hi you", "pieces": ["", "Echo: ", "hi ", "you", None]}
    served = provider.count
    provider.stop()
    with build(sqlite_url) as fresh:
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert provider.count == served == 2
    assert result.identical, result.describe()
    assert result.output == run.output


def test_the_api_key_and_organisation_never_reach_the_database(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """Neither the key nor the organisation id (headers the SDK sends, the organisation echoed
    in the response's headers) is stored: the SQLite file and its WAL are grepped, with the
    log's redaction switched off so nothing but loom's choice of what to store keeps them out."""
    db = tmp_path / "loom.db"
    loom = Loom(f"sqlite:///{db}", redactor=None)

    @loom.flow("ask")
    def ask(ctx: Any, url: str) -> str | None:
        said: Any = [{"role": "user", "content": "canary-question"}]
        return (
            client(url).chat.completions.create(model="m", messages=said).choices[0].message.content
        )

    with loom:
        loom.run("ask", url=provider.openai_url)
        stored = b"".join(
            p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("loom.db")
        )
    assert provider.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert provider.requests[0].headers["openai-organization"] == ORGANIZATION
    assert b"canary-question" in stored
    assert API_KEY.encode() not in stored and ORGANIZATION.encode() not in stored


def test_outside_a_flow_a_wrapped_client_passes_through(provider: ProviderServer) -> None:
    wrapped = client(provider.openai_url)
    assert isinstance(wrapped, openai.OpenAI) and wrapped.max_retries == 0
    said: Any = [{"role": "user", "content": "no flow"}]
    reply = wrapped.chat.completions.create(model="m", messages=said)
    assert reply.choices[0].message.content == "Echo: no flow"
    assert provider.count == 1


def test_wrap_refuses_what_it_cannot_record_saying_what_it_accepts() -> None:
    with pytest.raises(UnsupportedClientError, match=r"openai\.OpenAI.*transport\(\)"):
        wrap(object())


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_wrap_imports_no_sdk() -> None:
    """``loom_runtime.wrap`` recognises clients by class name: using it imports neither SDK
    (a user of one SDK does not pay for the other)."""
    code = (
        "import sys, loom_runtime\n"
        "loom_runtime.wrap\n"
        "print(sorted({'openai', 'anthropic', 'mcp'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_client_s_own_http_client_still_sends_its_requests(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """A client built with an ``http_client`` of the user's (a proxy, a corporate CA, a
    transport of their own) keeps sending through it once wrapped, live and outside a flow,
    as the SDK's own ``with_options`` would: wrapping replaced it with a default client, so
    such settings were silently dropped. Replay still sends nothing."""
    http = http_package(openai.DefaultHttpxClient, "Client")

    class Counting(http.BaseTransport):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.inner = http.HTTPTransport()
            self.sent: list[str] = []

        def handle_request(self, request: Any) -> Any:
            self.sent.append(request.url.path)
            return self.inner.handle_request(request)

    own = Counting()
    wrapped = wrap(
        openai.OpenAI(
            base_url=provider.openai_url,
            api_key=API_KEY,
            http_client=openai.DefaultHttpxClient(transport=own),
        )
    )
    question = [{"role": "user", "content": "hi"}]
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("ask")
        def ask(ctx: Any) -> Any:
            reply = wrapped.chat.completions.create(model="gpt-4o-mini", messages=question)
            return reply.choices[0].message.content

        run = loom.run("ask")
        assert own.sent == ["/v1/chat/completions"]
        wrapped.chat.completions.create(model="gpt-4o-mini", messages=question)  # no flow
        assert len(own.sent) == 2
        assert loom.replay(run.execution_id).identical
    assert len(own.sent) == 2 and provider.count == 2


def test_an_async_client_s_own_http_client_still_sends_its_requests(
    provider: ProviderServer, tmp_path: Path
) -> None:
    http = http_package(openai.DefaultAsyncHttpxClient, "AsyncClient")

    class Counting(http.AsyncBaseTransport):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.inner = http.AsyncHTTPTransport()
            self.sent: list[str] = []

        async def handle_async_request(self, request: Any) -> Any:
            self.sent.append(request.url.path)
            return await self.inner.handle_async_request(request)

    own = Counting()
    wrapped = wrap(
        openai.AsyncOpenAI(
            base_url=provider.openai_url,
            api_key=API_KEY,
            http_client=openai.DefaultAsyncHttpxClient(transport=own),
        )
    )
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("ask")
        async def ask(ctx: Any) -> Any:
            reply = await wrapped.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
            )
            return reply.choices[0].message.content

        asyncio.run(loom.arun("ask"))
    assert own.sent == ["/v1/chat/completions"]


@pytest.mark.parametrize("twice", ["wrap of a wrapped client", "client over loom's transport"])
def test_a_client_already_recording_is_recorded_once(
    provider: ProviderServer, tmp_path: Path, twice: str
) -> None:
    """Wrapping a wrapped client, or one whose ``http_client`` sends through
    ``loom_runtime.transport()`` (what ``UnsupportedClientError`` suggests), stacked a second
    recording transport on the first: each call became two decisions, and the replay of the
    recording, which asks once, diverged."""
    http = http_package(openai.DefaultHttpxClient, "Client")
    if twice == "wrap of a wrapped client":
        base = wrap(openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY))
    else:
        own = openai.DefaultHttpxClient(transport=transport(http.HTTPTransport()))
        base = openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY, http_client=own)
    assert _asked_once(wrap(base), tmp_path) == ["model:openai:chat.completions"]
    assert provider.count == 1


def test_a_client_recording_below_a_transport_of_its_own_is_recorded_once(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """A user's transport (a gateway's signing, a proxy) around ``loom_runtime.transport()``
    hides loom's transport from ``wrap``, which looks beneath the transport the client picks
    and no deeper: the call was recorded by both layers, a model decision and an http one,
    and the replay, which answers the model decision and so never reaches the http layer,
    diverged on the decision it never asked. A request is recorded by the outermost
    recording transport it passes through, however deep the others are."""
    http = http_package(openai.DefaultHttpxClient, "Client")
    signed: list[str] = []

    class Signing(http.BaseTransport):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def handle_request(self, request: Any) -> Any:
            signed.append(request.url.path)
            return self.inner.handle_request(request)

    own = openai.DefaultHttpxClient(transport=Signing(transport(http.HTTPTransport())))
    base = openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY, http_client=own)
    assert _asked_once(wrap(base), tmp_path) == ["model:openai:chat.completions"]
    assert signed == ["/v1/chat/completions"] and provider.count == 1


def test_an_async_client_recording_below_a_transport_of_its_own_is_recorded_once(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """As above, for an async client: the outer transport's send awaits the inner one in
    the same task, which sees it is being sent and passes the request on."""
    http = http_package(openai.DefaultAsyncHttpxClient, "AsyncClient")
    signed: list[str] = []

    class Signing(http.AsyncBaseTransport):
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def handle_async_request(self, request: Any) -> Any:
            signed.append(request.url.path)
            return await self.inner.handle_async_request(request)

    own = openai.DefaultAsyncHttpxClient(
        transport=Signing(async_transport(http.AsyncHTTPTransport()))
    )
    wrapped = wrap(
        openai.AsyncOpenAI(base_url=provider.openai_url, api_key=API_KEY, http_client=own)
    )
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("ask")
        async def ask(ctx: Any) -> Any:
            said: Any = [{"role": "user", "content": "once"}]
            return (await wrapped.chat.completions.create(model="m", messages=said)).model_dump()

        run = asyncio.run(loom.arun("ask"))
        assert list(loom.execution(run.execution_id).decisions) == ["model:openai:chat.completions"]
        assert loom.replay(run.execution_id).identical
    assert signed == ["/v1/chat/completions"] and provider.count == 1


def _asked_once(wrapped: Any, folder: Path) -> list[str]:
    """Ask ``wrapped`` one chat completion in a flow; the keys of the decisions recorded,
    once its replay (which sends nothing) is checked identical."""
    with Loom(f"sqlite:///{folder / 'loom.db'}") as loom:

        @loom.flow("ask")
        def ask(ctx: Any) -> Any:
            said: Any = [{"role": "user", "content": "once"}]
            return wrapped.chat.completions.create(model="m", messages=said).model_dump()

        run = loom.run("ask")
        assert loom.replay(run.execution_id).identical
        return list(loom.execution(run.execution_id).decisions)


def test_closing_a_wrapped_client_closes_the_client_s_own_connections(
    provider: ProviderServer,
) -> None:
    """As the SDK's ``with_options`` copies share one HTTP client and closing a copy closes
    it, closing the wrapped client closes the connection pool it sends through (the
    original's): it stayed open until the garbage collector found it."""
    original = openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY)
    wrapped = wrap(original)
    wrapped.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert not original._client.is_closed
    wrapped.close()
    assert original._client.is_closed


def test_a_client_s_own_headers_and_event_hooks_still_apply(provider: ProviderServer) -> None:
    """Only the transport of the user's ``http_client`` was kept: its default headers, event
    hooks and authentication were dropped, so a proxy or gateway that needs a header of the
    user's refused the wrapped client's requests (the guide says it behaves as before)."""
    seen: list[str] = []
    own = openai.DefaultHttpxClient(
        headers={"x-gateway": "team-a"},
        event_hooks={"request": [lambda request: seen.append(request.headers["x-gateway"])]},
    )
    client_ = openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY, http_client=own)
    said: Any = [{"role": "user", "content": "hi"}]
    client_.chat.completions.create(model="m", messages=said)
    wrap(client_).chat.completions.create(model="m", messages=said)
    assert seen == ["team-a", "team-a"]


def test_closing_a_wrapped_async_client_closes_the_client_s_own_connections(
    provider: ProviderServer,
) -> None:
    original = openai.AsyncOpenAI(base_url=provider.openai_url, api_key=API_KEY)
    wrapped = wrap(original)

    async def use_and_close() -> None:
        said: Any = [{"role": "user", "content": "hi"}]
        await wrapped.chat.completions.create(model="m", messages=said)
        assert not original._client.is_closed
        await wrapped.close()

    asyncio.run(use_and_close())
    assert original._client.is_closed


def test_an_http_client_of_the_other_httpx_package_still_sends_its_requests(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """The SDK (built on httpx2) also takes an ``http_client`` of the older ``httpx``;
    wrapping such a client sent through a default transport of the SDK's package instead,
    so the user's transport (a proxy, a CA) never saw a request."""
    import httpx

    class Counting(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()
            self.sent: list[str] = []

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            self.sent.append(request.url.path)
            return self.inner.handle_request(request)

    own = Counting()
    base = openai.OpenAI(
        base_url=provider.openai_url, api_key=API_KEY, http_client=httpx.Client(transport=own)
    )
    assert http_package(type(base._client), "Client") is not http_package(
        openai.DefaultHttpxClient, "Client"
    ), "the SDK and the user's client are on one package: this test proves nothing"
    assert _asked_once(wrap(base), tmp_path) == ["model:openai:chat.completions"]
    assert own.sent == ["/v1/chat/completions"] and provider.count == 1


def test_a_client_s_own_query_parameters_are_not_added_to_its_requests(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """Carrying the ``http_client``'s ``params`` put a query on every request: the decision's
    input became ``{method, query, body}`` instead of the body, so a recording made before
    diverged on replay, and a parameter not known as a credential was stored. They stay the
    user's client's own, as before ``wrap`` kept its other settings."""
    own = openai.DefaultHttpxClient(params={"session": "PARAMSECRET444"})
    base = openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY, http_client=own)
    assert _asked_once(wrap(base), tmp_path) == ["model:openai:chat.completions"]
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        [summary] = loom.executions()
        decision = loom.execution(summary.execution_id).decisions["model:openai:chat.completions"]
    assert set(msgspec.json.decode(decision.input)) == {"messages", "model"}
    assert b"PARAMSECRET444" not in b"".join(p.read_bytes() for p in tmp_path.glob("loom.db*"))


def test_a_client_s_digest_authentication_records_and_replays_its_two_requests(
    provider: ProviderServer, tmp_path: Path
) -> None:
    """The ``auth`` ``wrap`` carries from the user's ``http_client`` may take several requests:
    HTTP Digest is answered 401 with a challenge first, then sent again with a response made
    from a fresh random client nonce. Both requests are recorded; the replay meets the same
    challenge and its second request, whose ``Authorization`` differs, is still the recorded
    one, since no credential header is part of a decision's input. The password is never
    stored."""
    http = http_package(openai.DefaultHttpxClient, "Client")
    challenge = 'Digest realm="gateway", nonce="n0nce42", qop="auth", algorithm=MD5'
    answered: list[str] = []

    class Gateway(http.BaseTransport):
        """Asks for Digest credentials, then lets an authenticated request through."""

        def __init__(self) -> None:
            self.inner = http.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            authorization = request.headers.get("authorization", "")
            answered.append(authorization.partition(" ")[0])
            if not authorization.startswith("Digest "):
                return http.Response(401, headers={"www-authenticate": challenge})
            return self.inner.handle_request(request)

    own = openai.DefaultHttpxClient(
        transport=Gateway(), auth=http.DigestAuth("ops", "DIGESTPASSWORD77")
    )
    base = openai.OpenAI(base_url=provider.openai_url, api_key=API_KEY, http_client=own)
    keys = _asked_once(wrap(base), tmp_path)
    # The SDK's key first, then the Digest answer; the replay inside _asked_once sent nothing.
    assert answered == ["Bearer", "Digest"]
    assert provider.count == 1
    assert keys == ["model:openai:chat.completions", "model:openai:chat.completions#2"]
    assert b"DIGESTPASSWORD77" not in b"".join(p.read_bytes() for p in tmp_path.glob("loom.db*"))
