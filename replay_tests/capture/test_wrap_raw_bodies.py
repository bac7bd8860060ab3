"""The raw body a wrapped client's caller reads is the one it read live (ADR 0025, amended
2026-12-05 "raw bodies").

A model response is stored parsed (what an audit reads); a replay re-encoded it compactly, so
``with_raw_response(...).text`` (and a streamed ``iter_lines()``) differed from the live run's
whenever the provider spaced its JSON (OpenAI's replies are indented), and an unchanged flow
returning it replayed as changed. A body indented as ``msgspec.json.format`` would is stored as
its indent; any other spacing keeps its exact text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import Loom, wrap
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

REPLY = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
    ],
}
LAYOUTS = {
    "indented": msgspec.json.format(msgspec.json.encode(REPLY), indent=2),
    "spaced": json.dumps(REPLY).encode(),
    "compact": msgspec.json.encode(REPLY),
}
CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def _client(body: bytes, *, stream: bool) -> Any:
    import httpx2

    def answer(request: Any) -> Any:
        if not stream:
            return httpx2.Response(200, content=body, headers={"content-type": "application/json"})
        delta = {**CHUNK, "choices": [{"index": 0, "delta": {"content": "hi"}}]}
        events = body or f"data: {json.dumps(delta)}\n\ndata: [DONE]\n\n".encode()
        return httpx2.Response(200, content=events, headers={"content-type": "text/event-stream"})

    http_client = openai.DefaultHttpxClient(transport=httpx2.MockTransport(answer))
    return wrap(
        openai.OpenAI(base_url="http://provider.test/v1", api_key="k", http_client=http_client)
    )


def _loom(url: str, client: Any) -> Loom:
    loom = Loom(url)
    said: Any = [{"role": "user", "content": "hi"}]

    @loom.flow("raw")
    def raw(ctx: Any) -> str:
        return str(client.chat.completions.with_raw_response.create(model="m", messages=said).text)

    @loom.flow("lines")
    def lines(ctx: Any) -> list[str]:
        with client.chat.completions.with_streaming_response.create(
            model="m", messages=said, stream=True
        ) as response:
            return [line for line in response.iter_lines() if line]

    return loom


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_raw_body_replays_as_it_was_read(tmp_path: Any, layout: str) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with _loom(url, _client(LAYOUTS[layout], stream=False)) as loom:
        run = loom.run("raw")
    assert run.output == LAYOUTS[layout].decode()
    with _loom(url, _client(b"never sent", stream=False)) as loom:
        replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.divergences


def test_streamed_lines_replay_as_they_were_read(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with _loom(url, _client(b"", stream=True)) as loom:
        run = loom.run("lines")
    assert run.output[0].startswith('data: {"id": "c"')  # spaced, as the provider sent it
    with _loom(url, _client(b"", stream=True)) as loom:
        replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.divergences


def _event(text: str) -> str:
    delta = {**CHUNK, "choices": [{"index": 0, "delta": {"content": text}}]}
    return msgspec.json.encode(delta).decode()


SPELLINGS = {
    "comments, ids and CRLF": (
        f": OPENROUTER PROCESSING\r\n\r\nid: 1\r\ndata:{_event('Hel')}\r\n\r\n"
        f"id: 2\r\ndata:{_event('lo')}\r\n\r\ndata:[DONE]\r\n\r\n"
    ),
    "retry and an event name": f"retry: 3000\nevent: chunk\ndata:  {_event('hi')}\n\n",
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_streamed_lines_replay_as_the_provider_spelled_them(tmp_path: Any, spelling: str) -> None:
    """A stream's comments (OpenRouter's keep-alives), ``id`` and ``retry`` fields, ``data:``
    without its space and CRLF line ends were not kept: ``iter_lines()`` of an unchanged flow
    replayed re-spelled, reported as changed (an attack review; ADR 0025, amended "raw
    events"). Each event keeps its text as read when that is not how it is spelled anew."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    body = SPELLINGS[spelling].encode()
    with _loom(url, _client(body, stream=True)) as loom:
        run = loom.run("lines")
    assert any(not line.startswith(("data: ", "event: ")) for line in run.output)
    with _loom(url, _client(b"", stream=True)) as loom:
        replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.divergences


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_an_event_of_several_lines_is_one_event_whatever_its_line_ends(end: str) -> None:
    """A CRLF line end inside an event was read as a line end and an empty line, so each
    ``event:`` line and its ``data:`` were stored as two events (the terminal one a bare
    name), every one with its raw text (a regression review of "raw events")."""
    from loom_runtime.providers import parse_sse

    body = end.join(["event: message_start", 'data: {"type":"message_start"}', ""])
    body += end + end.join(["event: message_stop", 'data: {"type":"message_stop"}', "", ""])
    events, rest = parse_sse(body)
    assert rest == ""
    assert [(e.event, e.data) for e in events] == [
        ("message_start", {"type": "message_start"}),
        ("message_stop", {"type": "message_stop"}),
    ]
    assert b"".join(event.wire() for event in events) == body.encode()
    assert all(event.raw is None for event in events) is (end == "\n")  # LF: spelled anew


def test_an_events_text_altered_apart_from_its_data_is_not_what_a_replay_hands_over() -> None:
    """An event's text as read is handed over only when it reads as that very event (its name
    and data, what an audit shows): altered apart from them (a row or bundle edited), the
    event is spelled anew from its data."""
    from loom_runtime.providers import parse_sse

    [event], rest = parse_sse(SPELLINGS["comments, ids and CRLF"].split("id: 2")[0])
    assert rest == "" and event.raw is not None and event.wire() == event.raw.encode()
    forged = msgspec.structs.replace(event, raw=event.raw.replace("Hel", "Bye"))
    assert b"Bye" not in forged.wire() and b"Hel" in forged.wire()


def test_a_spelling_altered_apart_from_its_data_is_not_what_a_replay_hands_over(
    tmp_path: Any,
) -> None:
    """The body is stored twice, parsed (what an audit reads) and as spelled: a bundle whose
    spelled text was altered alone replays the parsed body, so a replay never hands the flow
    what the audit does not show (here the output then differs: a divergence, not a forgery)."""
    from loom_runtime.bundle import read_bundle, write_bundle

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with _loom(url, _client(LAYOUTS["spaced"], stream=False)) as loom:
        run = loom.run("raw")
        path = loom.export(run.execution_id, tmp_path / "raw.json")
    bundle = read_bundle(path)
    events = [
        msgspec.structs.replace(e, state=e.state.replace('\\"hi\\"', '\\"forged\\"'))
        for e in bundle.events
    ]
    assert events != list(bundle.events)  # the spelled text was altered
    forged = write_bundle(bundle.resealed(events), tmp_path / "forged.json")
    with _loom(f"sqlite:///{tmp_path / 'other.db'}", _client(b"", stream=False)) as loom:
        replayed = loom.replay_bundle(forged)
    assert "forged" not in replayed.output
    assert msgspec.json.decode(replayed.output) == REPLY
    assert not replayed.identical
