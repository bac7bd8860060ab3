"""A body nested deeper than a JSON decoder goes is read as one that is not JSON (ADR 0024,
amended 2026-12-06 "deep JSON").

An attack review posted a JSON array nested 1,200 levels deep: httpx alone sent it, loom's
transport raised a bare ``RecursionError`` before sending anything, since msgspec raises that
(not ``DecodeError``) past its depth limit and only ``DecodeError`` was caught. The request
and model-response paths had the same gap. Such a body is now compared and stored as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom, ModelResponseError
from loom_runtime.http_transport import HTTPX
from loom_runtime.providers import ModelProfile, parse_sse

DEEP = "[" * 1200 + "]" * 1200
SHALLOW = {"ok": [[1]]}


def test_a_deep_request_body_is_sent_stored_as_text_and_replayed(tmp_path: Path) -> None:
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json={"ok": True})

    def build(inner: httpx.MockTransport) -> Loom:
        loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")

        @loom.flow("upload")
        def upload(ctx: Any) -> list[int]:
            with httpx.Client(transport=loom_runtime.transport(inner)) as client:
                url = "https://api.example.com/ingest"
                return [
                    client.post(
                        url, content=DEEP, headers={"content-type": "application/json"}
                    ).status_code,
                    client.post(url, json=SHALLOW).status_code,
                ]

        return loom

    with build(httpx.MockTransport(answer)) as loom:
        run = loom.run("upload")
        inputs = [
            msgspec.json.decode(d.input)
            for d in loom.execution(run.execution_id).decisions.values()
        ]
    assert run.output == [200, 200] and sent[0] == DEEP.encode()
    assert inputs[0]["body"] == {"text": DEEP}
    assert inputs[1]["body"] == {"json": SHALLOW}  # the control: JSON is still read as JSON

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise AssertionError("a replay sends nothing")

    with build(httpx.MockTransport(unreachable)) as loom:
        assert loom.replay(run.execution_id).identical


def test_a_deep_model_request_and_stream_event_are_read_as_text(tmp_path: Path) -> None:
    """The model profile: a deep request body is its input as text, a deep event's data is
    stored as the event's text (and handed back so on replay), and a deep reply announced as
    JSON is the typed refusal any reply that is not JSON is, not a ``RecursionError``."""
    events = f"data: {DEEP}\n\ndata: [DONE]\n\n".encode()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stream"):
            return httpx.Response(
                200, content=events, headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, content=DEEP, headers={"content-type": "application/json"})

    profile = ModelProfile(provider="openai", base_path="/v1", retry=None)

    def build(inner: httpx.MockTransport) -> Loom:
        loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")

        @loom.flow("model")
        def model(ctx: Any) -> bytes:
            with httpx.Client(transport=HTTPX.transport(inner, profile)) as client:
                streamed = client.post("https://p.test/v1/stream", content=DEEP).content
                with pytest.raises(ModelResponseError, match="is not the JSON it announced"):
                    client.post("https://p.test/v1/reply", content=DEEP).read()
                return streamed

        return loom

    with build(httpx.MockTransport(answer)) as loom:
        run = loom.run("model")
        decision = loom.execution(run.execution_id).decisions["model:openai:stream"]
    assert run.output == events
    assert msgspec.json.decode(decision.input)["body"] == {"text": DEEP}
    assert msgspec.json.decode(decision.value)["events"][0] == {"text": DEEP}
    with build(httpx.MockTransport(answer)) as loom:
        assert loom.replay(run.execution_id).identical


def test_parse_sse_reads_a_deep_event_as_text_beside_json_ones() -> None:
    events, rest = parse_sse(f'data: {DEEP}\n\ndata: {{"a": 1}}\n\n')
    assert [(event.text, event.data) for event in events] == [(DEEP, None), (None, {"a": 1})]
    assert rest == ""
