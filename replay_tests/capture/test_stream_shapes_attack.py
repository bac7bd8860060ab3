"""A stream's stored ``final`` is for the audit; the bytes a replay hands the SDK are what it
read live (ADR 0025, amended "stream shapes").

An attack review fed a wrapped client streams the SDK reads without complaint and found the
recording failing the call, or storing a stream a replay hands back otherwise:

* a chunk of a shape the assembler did not expect (``"tool_calls": 1``, ``choices`` not a
  list, an Anthropic ``usage`` that is a string) raised a plain ``TypeError`` while the body
  was stored: the decision was never stored and the execution failed untyped;
* a chunk that is not UTF-8 was stored decoded with replacement characters: the SDK raises
  ``UnicodeDecodeError`` on it live, a replay handed it U+FFFD and diverged;
* a chunk msgspec refuses and Python's ``json`` (the SDK's parser) reads (``-Infinity`` in a
  logprob, a lone surrogate escape) was left out of ``final`` and the meta, and Anthropic's
  ``citations_delta`` was not added to its block.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import Loom, wrap
from loom_runtime.providers import SseEvent, assemble_chat, assemble_message, parse_sse
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import anthropic
    import openai
else:
    anthropic = deferred("anthropic")
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

SAID: Any = [{"role": "user", "content": "hi"}]
CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt"}


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
    return _sse({**CHUNK, "choices": [choice]})


def _anthropic(kind: str, **fields: Any) -> bytes:
    return _sse({"type": kind, **fields}, event=kind)


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 1},
}


def _mock(body: list[bytes]) -> Any:
    """An HTTP client of the SDKs' package answering every request with the stream ``body``
    (its pieces as given); the test fails if a replay sends anything."""
    import httpx2

    class Pieces(httpx2.SyncByteStream):
        def __iter__(self) -> Any:
            yield from body

    def answer(request: Any) -> Any:
        if not body:
            raise AssertionError("a replay sent a request")
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Pieces())

    return httpx2.MockTransport(answer)


def _loom(url: str, body: list[bytes]) -> Loom:
    """Flows reading a stream through a wrapped OpenAI and Anthropic client: what the SDK gave
    them (each chunk's first content as ``ascii`` spells it: JSON holds no lone surrogate), or
    the name of what it raised."""
    loom = Loom(url)

    @loom.flow("chat")
    def chat(ctx: Any) -> list[Any]:
        http = openai.DefaultHttpxClient(transport=_mock(body))
        client = wrap(openai.OpenAI(base_url="http://p.test/v1", api_key="k", http_client=http))
        read: list[Any] = []
        try:
            for chunk in client.chat.completions.create(model="gpt", messages=SAID, stream=True):
                choices = chunk.choices if isinstance(chunk.choices, list) else []
                read.append(ascii([choice.delta.content for choice in choices]))
        except Exception as exc:
            read.append({"raised": type(exc).__name__})
        return read

    @loom.flow("messages")
    def messages(ctx: Any) -> list[Any]:
        http = anthropic.DefaultHttpxClient(transport=_mock(body))
        client = wrap(anthropic.Anthropic(base_url="http://p.test", api_key="k", http_client=http))
        with client.messages.stream(model="claude", max_tokens=9, messages=SAID) as stream:
            read: list[Any] = [event.type for event in stream]
            read.append(stream.get_final_message().model_dump(mode="json", exclude_none=True))
        return read

    @loom.flow("events")
    def events(ctx: Any) -> list[Any]:
        http = anthropic.DefaultHttpxClient(transport=_mock(body))
        client = wrap(anthropic.Anthropic(base_url="http://p.test", api_key="k", http_client=http))
        asked = client.messages.create(model="claude", max_tokens=9, messages=SAID, stream=True)
        return [event.type for event in asked]

    return loom


def _run(url: str, flow: str, body: list[bytes]) -> tuple[Any, Any, Any]:
    """The flow run live over ``body`` and replayed with no network: its output, the stored
    value of its one model decision, and that decision's meta."""
    with _loom(url, body) as loom:
        run = loom.run(flow)
        [decision] = loom.execution(run.execution_id).decisions.values()
    assert decision.error_type is None, decision.message
    with _loom(url, []) as loom:
        replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    value = msgspec.json.decode(decision.value or b"null")
    return run.output, value, msgspec.json.decode(decision.meta or b"{}")


# -- 1. a chunk of a shape the assembler did not expect: never fails the call --------------

ODD_CHAT = {
    "tool_calls not a list": [
        _chunk({"role": "assistant", "content": "Hi"}),
        _chunk({"tool_calls": 1}, "stop"),
    ],
    "choices not a list": [
        _chunk({"role": "assistant", "content": "Hi"}),
        _sse({**CHUNK, "choices": 1}),
        _chunk({"content": "!"}, "stop"),
    ],
}
ODD_MESSAGES = {
    "usage a string": [
        _anthropic("message_start", message={**MESSAGE, "usage": "five"}),
        _anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        _anthropic("content_block_stop", index=0),
        _anthropic("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
        _anthropic("message_stop"),
    ],
}


@pytest.mark.parametrize("shape", sorted(ODD_CHAT))
def test_a_chat_chunk_of_an_unexpected_shape_is_stored_and_replayed(
    sqlite_url: str, shape: str
) -> None:
    output, value, _ = _run(sqlite_url, "chat", [*ODD_CHAT[shape], b"data: [DONE]\n\n"])
    assert output[0] == "['Hi']" and all(isinstance(chunk, str) for chunk in output)
    assert value["final"]["choices"][0]["message"]["content"].startswith("Hi")


@pytest.mark.parametrize("shape", sorted(ODD_MESSAGES))
def test_a_message_event_of_an_unexpected_shape_is_stored_and_replayed(
    sqlite_url: str, shape: str
) -> None:
    output, value, meta = _run(sqlite_url, "events", ODD_MESSAGES[shape])
    assert output[-1] == "message_stop"  # the SDK read it all
    assert value["final"]["content"] == [{"type": "text", "text": "Hi"}]
    assert meta["usage"] == {"output_tokens": 2}


WRONG = (1, "x", [1], {"a": 1}, None, -1, True, 1.5)
"""Values of every JSON shape, each put where the assemblers expect another one."""


def _variants(data: Any) -> Any:
    """``data`` with one value (at any depth) replaced by each of :data:`WRONG`."""
    yield from WRONG
    if isinstance(data, dict):
        for name, inner in data.items():
            for variant in _variants(inner):
                yield {**data, name: variant}
    elif isinstance(data, list):
        for index, inner in enumerate(data):
            for variant in _variants(inner):
                yield [*data[:index], variant, *data[index + 1 :]]


def _events(pieces: list[bytes]) -> list[SseEvent]:
    events, rest = parse_sse(b"".join(pieces).decode())
    assert rest == ""
    return events


ASSEMBLED = {
    "chat": (
        assemble_chat,
        [
            _chunk({"role": "assistant", "content": "Hi"}),
            _chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "t", "function": {"name": "s", "arguments": "{}"}}
                    ]
                },
                "tool_calls",
            ),
            _sse({**CHUNK, "choices": [], "usage": {"total_tokens": 3}}),
        ],
    ),
    "messages": (
        assemble_message,
        [
            _anthropic("message_start", message=MESSAGE),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "a"}),
            _anthropic(
                "content_block_delta",
                index=0,
                delta={"type": "citations_delta", "citation": {"cited_text": "x"}},
            ),
            _anthropic("content_block_stop", index=0),
            _anthropic("content_block_start", index=1, content_block={"type": "tool_use"}),
            _anthropic(
                "content_block_delta",
                index=1,
                delta={"type": "input_json_delta", "partial_json": "{}"},
            ),
            _anthropic("content_block_stop", index=1),
            _anthropic("message_delta", delta={"stop_reason": "x"}, usage={"output_tokens": 2}),
        ],
    ),
}


@pytest.mark.parametrize("provider", sorted(ASSEMBLED))
def test_an_assembler_skips_a_piece_of_any_wrong_shape(provider: str) -> None:
    """Every value of every event replaced, one at a time, by each JSON shape: the assembler
    skips what does not fit and still assembles the rest (the first event is whole)."""
    assemble, pieces = ASSEMBLED[provider]
    events = _events(pieces)
    assert assemble(events) is not None
    tried = 0
    for at, event in enumerate(events):
        for variant in _variants(event.data):
            altered = msgspec.structs.replace(event, data=variant)
            assemble([*events[:at], altered, *events[at + 1 :]])
            tried += 1
    assert tried > 100


def test_a_message_delta_may_not_replace_the_assembled_content() -> None:
    events = _events(
        [
            _anthropic("message_start", message=MESSAGE),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _anthropic("message_delta", delta={"content": "forged"}),
            _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "a"}),
            _anthropic("content_block_start", index=-1, content_block={"type": "text"}),
            _anthropic("content_block_delta", index=-1, delta={"type": "text_delta", "text": "b"}),
        ]
    )
    final = assemble_message(events)
    assert final is not None and final["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text"},
    ]


# -- 3. a chunk that is not UTF-8: the same bytes on replay -------------------------------


def test_a_stream_that_is_not_utf8_replays_the_bytes_the_sdk_read(sqlite_url: str) -> None:
    """Live the SDK raises ``UnicodeDecodeError`` on the second chunk; the replay hands it the
    same bytes, so it raises there again, and the audit still has the message assembled."""
    bad = _chunk({"content": "lo"}).replace(b'"lo"', b'"l\xff"')
    body = [_chunk({"role": "assistant", "content": "Hel"}), bad, b"data: [DONE]\n\n"]
    output, value, _ = _run(sqlite_url, "chat", body)
    assert output == ["['Hel']", {"raised": "UnicodeDecodeError"}]
    stored = msgspec.json.decode(msgspec.json.encode(value["data"]), type=bytes)
    assert b"\xff" in stored and b"".join(body).startswith(stored)  # as read, up to the raise
    assert value["final"]["choices"][0]["message"]["content"] == "Hell\ufffd"


# -- 4. what msgspec refuses and the SDK reads is in final and meta; citations ------------


def test_a_chunk_python_json_reads_is_in_the_final_message_and_the_meta(sqlite_url: str) -> None:
    def scored(text: str, finish: str | None = None) -> bytes:
        logprobs = {"content": [{"token": text, "logprob": -1.0, "top_logprobs": []}]}
        return _chunk({"content": text}, finish, logprobs=logprobs).replace(b"-1.0", b"-Infinity")

    body = [scored("disk "), scored("full", "stop"), b"data: [DONE]\n\n"]
    output, value, meta = _run(sqlite_url, "chat", body)
    assert output == ["['disk ']", "['full']"]
    assert value["final"]["choices"][0]["message"]["content"] == "disk full"
    assert value["final"]["choices"][0]["finish_reason"] == "stop"
    assert (meta["model"], meta["finish_reason"]) == ("gpt", "stop")


def test_a_surrogate_pair_split_over_chunks_is_one_character_in_the_final_message(
    sqlite_url: str,
) -> None:
    """The flow is handed each half as the SDK parsed it, live and on replay; the audit reads
    the pair as the character it spells, and a lone half escaped (JSON cannot hold it)."""
    body = [
        _chunk({"role": "assistant", "content": "Hi "}),
        _chunk({"content": "\ud83d"}),
        _chunk({"content": "\ude00 \ud800"}, "stop"),
        b"data: [DONE]\n\n",
    ]
    output, value, meta = _run(sqlite_url, "chat", body)
    assert output == ["['Hi ']", ascii(["\ud83d"]), ascii(["\ude00 \ud800"])]
    assert value["final"]["choices"][0]["message"]["content"] == "Hi \U0001f600 \\ud800"
    assert meta["finish_reason"] == "stop"


def test_a_citation_delta_is_added_to_its_block(sqlite_url: str) -> None:
    citation = {"type": "char_location", "cited_text": "x", "document_index": 0}
    citation |= {"start_char_index": 0, "end_char_index": 1}
    body = [
        _anthropic("message_start", message=MESSAGE),
        _anthropic(
            "content_block_start",
            index=0,
            content_block={"type": "text", "text": "", "citations": None},
        ),
        _anthropic("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
        _anthropic(
            "content_block_delta", index=0, delta={"type": "citations_delta", "citation": citation}
        ),
        _anthropic("content_block_stop", index=0),
        _anthropic("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 2}),
        _anthropic("message_stop"),
    ]
    output, value, _ = _run(sqlite_url, "messages", body)
    assert output[-1]["content"][0]["citations"] == [citation]  # what the SDK assembled
    assert value["final"]["content"][0]["citations"] == [citation]


def test_a_lone_surrogate_in_a_reply_s_model_is_stored_escaped_in_the_meta(sqlite_url: str) -> None:
    """The same walk for a reply that is not a stream: its meta (the model that answered) was
    read by Python's ``json`` and stored as read, and a lone surrogate there failed the call."""
    import httpx2

    reply = {**CHUNK, "object": "chat.completion", "model": "m\ud800"}
    reply["choices"] = [{"index": 0, "finish_reason": "stop", "message": {"content": "ok"}}]
    body = json.dumps(reply).encode()

    def answer(request: Any) -> Any:
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    http = openai.DefaultHttpxClient(transport=httpx2.MockTransport(answer))
    client = wrap(openai.OpenAI(base_url="http://p.test/v1", api_key="k", http_client=http))
    with Loom(sqlite_url) as loom:

        @loom.flow("reply")
        def ask(ctx: Any) -> str:
            return ascii(client.chat.completions.create(model="m", messages=SAID).model)

        run = loom.run("reply")
        [decision] = loom.execution(run.execution_id).decisions.values()
    assert run.output == ascii("m\ud800")
    assert msgspec.json.decode(decision.meta or b"{}")["model"] == "m\\ud800"
