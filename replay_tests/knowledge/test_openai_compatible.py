"""The OpenAI-compatible model adapter, against a local fake server (no network)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from loom_knowledge import (
    ModelResponseError,
    ModelUnavailableError,
    OpenAICompatibleModel,
    Passage,
    grounded_request,
)


class FakeServer:
    """An OpenAI-compatible endpoint on 127.0.0.1 that records requests and replies as told."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.reply: tuple[int, Any] = (200, {})
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(
                    (self.path, dict(self.headers), json.loads(self.rfile.read(length)))
                )
                status, body = server.reply
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                return

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def completion(self, content: str) -> None:
        self.reply = (200, {"choices": [{"message": {"role": "assistant", "content": content}}]})


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    thread = threading.Thread(  # a short poll: shutdown() waits for it
        target=fake.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


REQUEST = grounded_request(
    "Answer briefly.",
    "Why is the disk full?",
    [Passage(doc_id="disk.md", index=0, text="Rotate the logs.", revision=1)],
    scope="runbooks",
)


def test_sends_the_grounded_messages_and_parses_answer_and_citations(server: FakeServer) -> None:
    """The request keeps the grounded messages in order; the JSON reply becomes an Answer."""
    server.completion(json.dumps({"answer": "Rotate the logs.", "cited_doc_ids": ["disk.md"]}))
    model = OpenAICompatibleModel(base_url=server.url, model="local-llm", api_key="sk-test")
    answer = model.answer(REQUEST)
    assert answer.text == "Rotate the logs." and answer.cited_doc_ids == ("disk.md",)
    [(path, headers, body)] = server.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "local-llm"
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "user", "system"]
    assert body["messages"][1]["content"] == REQUEST.messages[1].content


def test_a_reply_without_citations_is_refused(server: FakeServer) -> None:
    """Free text instead of the JSON shape is a typed error, not an uncited answer."""
    server.completion("The disk is full because of logs.")
    with pytest.raises(ModelResponseError):
        OpenAICompatibleModel(base_url=server.url, model="m").answer(REQUEST)


def test_http_errors_and_unreachable_endpoints_are_typed(server: FakeServer) -> None:
    """An HTTP 500 and a closed port both raise ModelUnavailableError."""
    server.reply = (500, {"error": "boom"})
    with pytest.raises(ModelUnavailableError, match="HTTP 500"):
        OpenAICompatibleModel(base_url=server.url, model="m").answer(REQUEST)
    with pytest.raises(ModelUnavailableError):
        OpenAICompatibleModel(base_url="http://127.0.0.1:9/v1", model="m", timeout=2).answer(
            REQUEST
        )
