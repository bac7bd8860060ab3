"""The OpenAI-compatible adapter against a server that breaks HTTP or its body (no network).

Every failure is one of the two typed errors a caller catches: the endpoint could not be
used (:class:`ModelUnavailableError`: refused, cut or garbled at the HTTP level), or it
answered something that is not an answer (:class:`ModelResponseError`). ``http.client``'s
own errors, a body that is not UTF-8 and a JSON nested past the parser's recursion limit
escaped untyped.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from loom_knowledge import (
    ModelResponseError,
    ModelUnavailableError,
    OpenAICompatibleModel,
    Passage,
    grounded_request,
)

REQUEST = grounded_request(
    "Answer briefly.",
    "Why is the disk full?",
    [Passage(doc_id="disk.md", index=0, text="Rotate the logs.", revision=1)],
    scope="runbooks",
)

ANSWER = json.dumps(
    {"choices": [{"message": {"content": json.dumps({"answer": "a", "cited_doc_ids": ["x"]})}}]}
).encode()


def _reply(body: bytes, *, length: int | None = None, status: str = "200 OK") -> bytes:
    size = len(body) if length is None else length
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n"
    return head.encode() + b"\r\n" + body


class _OneShot:
    """A server on 127.0.0.1 answering one request with ``raw`` (nothing: it closes without
    a reply), set before the model is asked."""

    def __init__(self) -> None:
        self.raw = b""
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.settimeout(10)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            _read_request(conn)  # whole: unread bytes at close would reset the connection
            if self.raw:
                conn.sendall(self.raw)
            conn.shutdown(socket.SHUT_WR)  # the reply ends here; wait for the client to close
            while conn.recv(65536):
                pass

    def answer(self) -> None:
        OpenAICompatibleModel(base_url=self.url, model="m", timeout=5).answer(REQUEST)


def _read_request(conn: socket.socket) -> None:
    """Read one HTTP request: its head, then as many body bytes as its Content-Length says."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = conn.recv(65536)
        if not chunk:
            return
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


@pytest.fixture
def server() -> Iterator[_OneShot]:
    one = _OneShot()
    yield one
    one.thread.join(10)
    one.listener.close()


def test_the_server_s_well_formed_answer_is_taken(server: _OneShot) -> None:
    """The control: the same server with a whole reply gives an answer."""
    server.raw = _reply(ANSWER)
    answer = OpenAICompatibleModel(base_url=server.url, model="m", timeout=5).answer(REQUEST)
    assert (answer.text, answer.cited_doc_ids) == ("a", ("x",))


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"", id="closed-without-a-reply"),
        pytest.param(_reply(ANSWER[:10], length=len(ANSWER)), id="body-cut-short"),
        pytest.param(b"HTTP/1.1 abc\r\n\r\n", id="garbled-status-line"),
    ],
)
def test_a_broken_http_exchange_is_model_unavailable(server: _OneShot, raw: bytes) -> None:
    server.raw = raw
    with pytest.raises(ModelUnavailableError):
        server.answer()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(_reply(b'{"choices": "\xff\xfe"}'), id="not-utf8"),
        pytest.param(_reply(b"[" * 100_000 + b"]" * 100_000), id="nested-past-recursion"),
        pytest.param(_reply(b"<html>busy</html>"), id="not-json"),
    ],
)
def test_a_body_that_is_not_json_is_a_model_response_error(server: _OneShot, raw: bytes) -> None:
    server.raw = raw
    with pytest.raises(ModelResponseError):
        server.answer()


def test_the_api_key_is_not_in_the_repr() -> None:
    """A model object is logged and shown in tracebacks: its key must not be."""
    model = OpenAICompatibleModel(base_url="https://api.example", model="m", api_key="sk-SECRET")
    assert "sk-SECRET" not in repr(model) and "api.example" in repr(model)
