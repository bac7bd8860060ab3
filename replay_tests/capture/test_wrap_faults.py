"""ADR 0025: retries inside one decision, and bad input, for a wrapped client.

Transient refusals (429, 5xx) and dropped connections are retried with ``Backoff`` inside the
one ``model`` decision, every failed attempt in its meta; only the final outcome is recorded
and a replay neither sleeps nor sends. What cannot be an answer (a body that is not JSON, a
stream cut short, a tampered recorded value) is a typed loom error naming the decision.
Pauses are kept at zero (``retry-after: 0`` or a zero ``Backoff``): no test measures time.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import (
    Loom,
    ModelResponseError,
    OutcomeChangedError,
    RecordedValueError,
    wrap,
)
from loom_runtime.backoff import Backoff
from replay_tests.capture.provider_server import Fault, ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

KEY = "model:openai:chat.completions"
NO_PAUSE = Backoff(attempts=3, first_pause=0.0, max_pause=0.0)
RETRIES: dict[str, Backoff | None] = {"default": Backoff(), "none": None, "no-pause": NO_PAUSE}


def build(db: str) -> Loom:
    loom = Loom(db)

    @loom.flow("ask")
    def ask(ctx: Any, url: str, retry: str, stream: bool) -> dict[str, Any]:
        client = wrap(openai.OpenAI(base_url=url, api_key="sk-test"), retry=RETRIES[retry])
        said: Any = [{"role": "user", "content": "why is the disk full"}]
        kept: list[str] = []  # what a stream gave before it failed: an agent keeps it
        try:
            if stream:
                chunks = client.chat.completions.create(model="m", messages=said, stream=True)
                for chunk in chunks:
                    kept.extend(c.delta.content or "" for c in chunk.choices[:1])
                text = "".join(kept)
            else:
                reply = client.chat.completions.create(model="m", messages=said)
                text = reply.choices[0].message.content or ""
        except (openai.APIError, ModelResponseError) as exc:
            status = getattr(exc, "status_code", None)
            raised = {"raised": type(exc).__name__, "status": status, "message": str(exc)}
            return raised | ({"kept": "".join(kept)} if kept else {})
        return {"text": text}

    @loom.flow("async-ask")
    async def async_ask(ctx: Any, url: str) -> str | None:
        client = wrap(openai.AsyncOpenAI(base_url=url, api_key="sk-test"), retry=NO_PAUSE)
        said: Any = [{"role": "user", "content": "async"}]
        reply = await client.chat.completions.create(model="m", messages=said)
        return reply.choices[0].message.content

    return loom


def record_then_replay(db: str, provider: ProviderServer, **arguments: Any) -> tuple[Any, Any]:
    """Run ``ask`` live, then replay it in a fresh Loom with the provider stopped; returns
    the live output and the recorded decision, after checking the replay was identical and
    sent nothing."""
    with build(db) as loom:
        run = loom.run("ask", url=provider.openai_url, **arguments)
    served = provider.count
    provider.stop()
    with build(db) as fresh:
        result = fresh.replay(run.execution_id)
        recorded = dict(fresh.execution(run.execution_id).decisions)
    assert result.identical, result.describe()
    assert result.output == run.output
    assert provider.count == served
    assert list(recorded) == [KEY]  # every attempt in one decision
    return run.output, recorded[KEY]


@pytest.mark.parametrize("stream", [False, True])
def test_a_rate_limit_then_an_answer_is_one_decision_with_its_attempt(
    provider: ProviderServer, sqlite_url: str, stream: bool
) -> None:
    """A 429 with ``retry-after: 0`` is retried (the default ``Backoff``, honouring the pause
    the provider asked for): the server saw two requests, the log holds one decision, the
    answer, with the refused attempt in its meta; a stream is retried before its first byte."""
    provider.fail_next(Fault.rate_limited(retry_after="0"))
    output, decision = record_then_replay(sqlite_url, provider, retry="default", stream=stream)
    assert output == {"text": "Echo: why is the disk full"}
    assert provider.count == 2
    meta = msgspec.json.decode(decision.meta)
    assert meta["retries"] == 1
    [attempt] = meta["attempts"]
    assert attempt["error"] == "http 429" and "Rate limit" in attempt["message"]
    assert attempt.get("paused", 0.0) == 0.0
    assert msgspec.json.decode(decision.value)["status"] == 200


def test_a_final_server_error_is_the_recorded_response_and_raises_alike_on_replay(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """When every attempt is refused, the last refusal is the decision's value: the SDK
    raises ``InternalServerError`` live and, from the log, on replay."""
    provider.fail_next(*[Fault.server_error(503)] * 3)
    output, decision = record_then_replay(sqlite_url, provider, retry="no-pause", stream=False)
    assert output["raised"] == "InternalServerError" and output["status"] == 503
    assert provider.count == 3
    meta = msgspec.json.decode(decision.meta)
    assert [a["error"] for a in meta["attempts"]] == ["http 503", "http 503"]
    assert msgspec.json.decode(decision.value)["status"] == 503


def test_without_retries_a_rate_limit_raises_at_once(
    provider: ProviderServer, sqlite_url: str
) -> None:
    provider.fail_next(Fault.rate_limited(retry_after="0"))
    output, decision = record_then_replay(sqlite_url, provider, retry="none", stream=False)
    assert output["raised"] == "RateLimitError" and output["status"] == 429
    assert provider.count == 1
    assert "attempts" not in msgspec.json.decode(decision.meta)


def test_a_refused_connection_is_retried_then_recorded_as_the_failure(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """Nothing listens: each attempt fails to connect; the last failure is the decision's,
    and the replay raises it again, so the SDK reports ``APIConnectionError`` both times."""
    url = provider.openai_url
    provider.stop()
    with build(sqlite_url) as loom:
        run = loom.run("ask", url=url, retry="no-pause", stream=False)
    assert run.output["raised"] == "APIConnectionError"
    with build(sqlite_url) as fresh:
        result = fresh.replay(run.execution_id)
        decision = fresh.execution(run.execution_id).decisions[KEY]
    assert result.identical, result.describe()
    assert decision.error_type is not None and decision.error_type.endswith(":ConnectError")
    meta = msgspec.json.decode(decision.meta)
    assert meta["retries"] == 2
    assert all(a["error"].endswith(":ConnectError") for a in meta["attempts"])


@pytest.mark.parametrize("mid_event", [False, True])
def test_a_stream_cut_by_the_connection_replays_its_events_then_the_error(
    provider: ProviderServer, sqlite_url: str, mid_event: bool
) -> None:
    """The connection drops after two events (between events, or inside the third): the
    caller gets the SDK's own ``APIConnectionError``, as the plain client raises it (an
    agent's ``except openai.APIError`` still runs; loom's own ``ModelResponseError`` did not
    match it), after the two events' text, which the flow keeps. The stream is stored as
    read, its two events and then the transport's error (``failed``), and a replay hands the
    SDK the same events, then the same error. It was stored as the decision's failure, which
    a replay raised when the request was sent: the flow kept nothing, and the unchanged flow
    replayed as diverged (an attack review; ADR 0025, amended "cut stream")."""
    provider.fail_next(Fault.dropped(after=2, mid_event=mid_event))
    output, decision = record_then_replay(sqlite_url, provider, retry="no-pause", stream=True)
    assert output["raised"] == "APIConnectionError" and output["kept"]
    assert decision.error_type is None
    stored = msgspec.json.decode(decision.value)
    assert len(stored["events"]) == 2 and not stored["complete"]
    assert stored["failed"]["error_type"].startswith("httpx")
    assert provider.count == 1  # the stream had begun: never retried


def test_a_dropped_stream_raises_what_the_plain_sdk_raises(provider: ProviderServer) -> None:
    """The control for the test above: the unwrapped client, same fault."""
    provider.fail_next(Fault.dropped(after=2))
    plain = openai.OpenAI(base_url=provider.openai_url, api_key="sk-test", max_retries=0)
    said: Any = [{"role": "user", "content": "why is the disk full"}]
    with pytest.raises(openai.APIConnectionError):
        for _ in plain.chat.completions.create(model="m", messages=said, stream=True):
            pass


def test_a_success_whose_body_is_not_json_is_a_typed_failure(
    provider: ProviderServer, sqlite_url: str
) -> None:
    provider.fail_next(Fault.not_json())
    output, decision = record_then_replay(sqlite_url, provider, retry="none", stream=False)
    assert output["raised"] == "ModelResponseError"
    assert KEY in output["message"] and "not the JSON it announced" in output["message"]
    assert decision.value is None


@pytest.mark.parametrize(
    "literal",
    ["-Infinity", "NaN", '"broken \\ud83d emoji"'],
    ids=["minus-infinity", "nan", "lone-surrogate"],
)
def test_json_the_sdk_reads_but_strict_json_does_not_records_and_replays(
    provider: ProviderServer, sqlite_url: str, literal: str
) -> None:
    """A reply with ``-Infinity`` (a vLLM logprob), ``NaN`` or a lone surrogate escape is
    JSON to the SDK (Python's ``json``) but not to a strict parser: the wrapped call failed
    with "not the JSON it announced" where the plain client answered. It is stored as the
    bytes received, so the SDK parses the same reply live and replayed."""
    body = (
        '{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        '"message":{"role":"assistant","content":"Echo: odd"},"finish_reason":"stop"}],'
        f'"extra":{literal}}}'
    ).encode()
    provider.fail_next(Fault(headers={"content-type": "application/json"}, body=body))
    output, decision = record_then_replay(sqlite_url, provider, retry="none", stream=False)
    assert output == {"text": "Echo: odd"}
    assert msgspec.json.decode(decision.value)["text"] == body.decode()
    assert msgspec.json.decode(decision.meta)["model"] == "m"


def test_a_response_header_that_is_not_ascii_records_and_replays(
    provider: ProviderServer, sqlite_url: str
) -> None:
    """A provider (or a proxy before it) sends a header that is not ASCII (latin-1 on the
    wire): the SDK gets its answer live and from the log, instead of a connection error."""
    reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Echo: caf\u00e9"},
                "finish_reason": "stop",
            }
        ],
    }
    note = {"x-note": "caf\u00e9 ferm\u00e9"}
    provider.fail_next(Fault(headers=note, body=msgspec.json.encode(reply)))
    output, decision = record_then_replay(sqlite_url, provider, retry="none", stream=False)
    assert output == {"text": "Echo: caf\u00e9"}
    assert ["x-note", "caf\u00e9 ferm\u00e9"] in msgspec.json.decode(decision.value)["headers"]


def test_an_async_client_retries_with_asyncio_and_replays_without(
    provider: ProviderServer, sqlite_url: str
) -> None:
    provider.fail_next(Fault.server_error(502))
    with build(sqlite_url) as loom:
        run = asyncio.run(loom.arun("async-ask", url=provider.openai_url))
    assert run.output == "Echo: async" and provider.count == 2
    provider.stop()
    with build(sqlite_url) as fresh:
        result = asyncio.run(fresh.areplay(run.execution_id))
        meta = msgspec.json.decode(fresh.execution(run.execution_id).decisions[KEY].meta)
    assert result.identical, result.describe()
    assert provider.count == 2 and meta["retries"] == 1


@pytest.mark.parametrize(
    "tampered",
    [
        {"status": "two hundred", "headers": []},
        {"status": 200, "headers": [], "events": 7},
        {"status": 200, "headers": [], "events": [{"event": "x\ndata: forged"}]},
        {"status": 200, "headers": [["Content-Encoding", "gzip"]], "body": {}},
        {"status": 200, "headers": [["transfer-encoding", "chunked"]], "body": {}},
        [],
    ],
)
def test_a_tampered_recorded_response_is_a_typed_error_naming_the_decision(
    provider: ProviderServer, sqlite_url: str, tampered: Any
) -> None:
    """A recorded value that is not a model response (an edited row) is refused as
    :class:`RecordedValueError` naming the key, before the SDK sees anything."""
    with build(sqlite_url) as loom:
        run = loom.run("ask", url=provider.openai_url, retry="none", stream=False)
    provider.stop()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        (state,) = db.execute(
            "SELECT state FROM stored_events WHERE originator_version = 2"
        ).fetchone()
        edited = {**msgspec.json.decode(state), "value": tampered}
        db.execute(
            "UPDATE stored_events SET state = ? WHERE originator_version = 2",
            (msgspec.json.encode(edited),),
        )
    with build(sqlite_url) as fresh:
        result = fresh.replay(run.execution_id)
    [divergence] = result.divergences
    assert isinstance(divergence, OutcomeChangedError)  # the flow saw the typed error, raised
    assert f"{RecordedValueError.__module__}:RecordedValueError" in str(divergence)
    assert f"decision {KEY!r} holds a value that is not a recorded model" in str(divergence)


# -- outside a flow: the SDK's retries, as before it was wrapped --------------------------------


@pytest.mark.parametrize("fault", ["429", "503"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_outside_a_flow_a_wrapped_client_retries_as_the_sdk_would(
    provider: ProviderServer, fault: str, asynchronous: bool
) -> None:
    """A refusal that says "later", then an answer: the SDK's own client retries and
    answers, and so must the wrapped one outside a flow. It retried nothing (wrap sets the
    SDK's ``max_retries`` to 0, for loom to retry inside a decision), so wrapping a client
    made code that never runs in a flow fail where it worked."""
    first = {"429": Fault.rate_limited(retry_after="0"), "503": Fault.server_error(503)}[fault]
    provider.fail_next(first)
    said: Any = [{"role": "user", "content": "no flow"}]
    retry = Backoff(first_pause=0.0, max_pause=0.0)
    if asynchronous:
        aclient = wrap(openai.AsyncOpenAI(base_url=provider.openai_url, api_key="k"), retry=retry)
        reply = asyncio.run(aclient.chat.completions.create(model="m", messages=said))
    else:
        client = wrap(openai.OpenAI(base_url=provider.openai_url, api_key="k"), retry=retry)
        reply = client.chat.completions.create(model="m", messages=said)
    assert reply.choices[0].message.content == "Echo: no flow"
    assert provider.count == 2


def test_outside_a_flow_a_dropped_connection_is_retried() -> None:
    """A connection reset before any answer, then an answer, through the user's own HTTP
    client's transport: retried outside a flow, as the SDK retries it."""
    import httpx2

    sent: list[int] = []

    def answer(request: Any) -> Any:
        sent.append(1)
        if len(sent) == 1:
            raise httpx2.ConnectError("[Errno 104] Connection reset by peer", request=request)
        reply = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "answered"},
                }
            ],
        }
        return httpx2.Response(200, json=reply)

    http_client = openai.DefaultHttpxClient(transport=httpx2.MockTransport(answer))
    client = wrap(
        openai.OpenAI(base_url="http://provider.test/v1", api_key="k", http_client=http_client),
        retry=Backoff(first_pause=0.0, max_pause=0.0),
    )
    said: Any = [{"role": "user", "content": "no flow"}]
    reply = client.chat.completions.create(model="m", messages=said)
    assert (reply.choices[0].message.content, len(sent)) == ("answered", 2)


def test_outside_a_flow_a_client_made_not_to_retry_still_does_not(
    provider: ProviderServer,
) -> None:
    """``max_retries=0`` on the client given to wrap is kept outside a flow: one request."""
    provider.fail_next(Fault.server_error(503))
    client = wrap(openai.OpenAI(base_url=provider.openai_url, api_key="k", max_retries=0))
    said: Any = [{"role": "user", "content": "no flow"}]
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=said)
    assert provider.count == 1


def test_an_azure_stream_is_assembled_as_an_openai_one(sqlite_url: str) -> None:
    """``AzureOpenAI`` keys a chat completion under its deployment
    (``model:openai:deployments.gpt-4o.chat.completions``): the assembler was looked up by the
    exact key, so an Azure stream was stored without its assembled ``final`` message and
    without the model and finish reason in its meta."""
    import httpx2

    chunks = [
        {
            "id": "s",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": word}, "finish_reason": None}
            ],
        }
        for word in ("disk ", "full")
    ]
    chunks.append(
        {
            "id": "s",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    events = b"".join(b"data: " + msgspec.json.encode(c) + b"\n\n" for c in chunks)

    def answer(request: Any) -> Any:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=events + b"data: [DONE]\n\n")

    azure = openai.AzureOpenAI(
        api_key="k",
        api_version="2024-10-21",
        azure_endpoint="https://res.openai.azure.com",
        http_client=openai.DefaultHttpxClient(transport=httpx2.MockTransport(answer)),
    )
    client = wrap(azure)
    loom = Loom(sqlite_url)

    @loom.flow("ask")
    def ask(ctx: Any) -> str:
        said: Any = [{"role": "user", "content": "why"}]
        stream = client.chat.completions.create(model="gpt-4o", messages=said, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with loom:
        run = loom.run("ask")
        ((key, decision),) = loom.execution(run.execution_id).decisions.items()
    assert (run.output, key) == ("disk full", "model:openai:deployments.gpt-4o.chat.completions")
    final = msgspec.json.decode(decision.value)["final"]
    assert final["choices"][0]["message"]["content"] == "disk full"
    assert msgspec.json.decode(decision.meta)["finish_reason"] == "stop"


def test_a_reply_whose_body_the_connection_cuts_is_retried_inside_the_decision(
    sqlite_url: str,
) -> None:
    """A 200 that is not a stream, cut half way ("peer closed connection"), then the answer:
    the plain SDK reads the body inside its retries and answers; the wrapped one recorded the
    cut as the decision's failure after one request, whatever its retry policy. The body is
    now read inside the retries: two requests, one decision, the cut in its meta."""
    import httpx2

    reply = msgspec.json.encode(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "answered"},
                }
            ],
        }
    )

    class CutAfterFirstPiece(httpx2.SyncByteStream):
        def __iter__(self) -> Any:
            yield reply[:20]
            raise httpx2.RemoteProtocolError("peer closed connection")

    sent: list[int] = []

    def answer(request: Any) -> Any:
        sent.append(1)
        json_type = {"content-type": "application/json"}
        if len(sent) == 1:
            return httpx2.Response(200, headers=json_type, stream=CutAfterFirstPiece())
        return httpx2.Response(200, headers=json_type, content=reply)

    http_client = openai.DefaultHttpxClient(transport=httpx2.MockTransport(answer))
    client = wrap(
        openai.OpenAI(base_url="http://provider.test/v1", api_key="k", http_client=http_client),
        retry=NO_PAUSE,
    )
    loom = Loom(sqlite_url)

    @loom.flow("ask")
    def ask(ctx: Any) -> str | None:
        said: Any = [{"role": "user", "content": "why"}]
        return client.chat.completions.create(model="m", messages=said).choices[0].message.content

    with loom:
        run = loom.run("ask")
        (decision,) = loom.execution(run.execution_id).decisions.values()
    assert (run.output, len(sent)) == ("answered", 2)
    (attempt,) = msgspec.json.decode(decision.meta)["attempts"]
    assert "RemoteProtocolError" in attempt["error"]
