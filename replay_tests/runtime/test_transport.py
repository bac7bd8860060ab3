"""ADR 0024: httpx transports record the requests a flow makes, and replay them offline.

Every test talks to a real HTTP server on loopback started here; a replay runs in a fresh
``Loom`` on the same file with the server stopped and an inner transport that fails the test
if it is ever called (:class:`Unreachable`).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import (
    DecisionInputChangedError,
    Loom,
    OutcomeChangedError,
    Redactor,
    SecretRefusedError,
    current_context,
)

TOKEN = "tok3n-of-the-authorization-header"
API_KEY = "k3y-of-the-x-api-key-header"
COOKIE = "c00kie-the-client-sends"
SET_COOKIE = "c00kie-the-server-sets"
QUERY_KEY = "k3y-in-the-query-string"
CANARY = "canary-question-about-disk-full"
ATTACHMENT = "r\u00e9sum\u00e9.txt"
OPENAI_KEY = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34Yz56_-AbCdEf"


class Server:
    """A loopback HTTP server that counts what it serves (so a replay that calls it shows)."""

    def __init__(self) -> None:
        self.hits: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.released_in_time: bool | None = None
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(  # a short poll: shutdown() waits for it
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and free the port (once; later calls do nothing)."""
        if not self._thread.is_alive():
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, body: bytes, *, encoding: str | None = None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if encoding is not None:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Set-Cookie", f"session={SET_COOKIE}")
            self.end_headers()
            self.wfile.write(body)

        def _headers(self) -> dict[str, str]:
            return {name.lower(): value for name, value in self.headers.items()}

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            server.hits.append({"path": url.path, "headers": self._headers()})
            if url.path == "/items":
                query = parse_qs(url.query)
                self._reply(json.dumps({"q": query.get("q"), "served": len(server.hits)}).encode())
            elif url.path == "/gzip":
                self._reply(gzip.compress(b'{"zipped": "unzipped in the log"}'), encoding="gzip")
            elif url.path == "/secret":
                self._reply(json.dumps({"leaked": OPENAI_KEY}).encode())
            elif url.path == "/stream":
                self._stream()
            elif url.path == "/attachment":  # a header value that is not ASCII (sent latin-1)
                self.send_response(200)
                self.send_header("Content-Disposition", f'attachment; filename="{ATTACHMENT}"')
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            server.hits.append({"path": self.path, "headers": self._headers()})
            echo = {"received": json.loads(body), "served": len(server.hits)}
            self._reply(json.dumps(echo).encode())

        def _stream(self) -> None:
            """Server-sent events: the second waits until the client says it has the first."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                self.wfile.write(b"data: one\n\n")
                self.wfile.flush()
                server.released_in_time = server.release.wait(5)
                self.wfile.write(b"data: two\n\n")
                self.wfile.flush()
            except OSError:  # the client closed the stream early
                pass

    return Handler


class Unreachable(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An inner transport that fails the flow (and so the replay) if it is called at all."""

    def __init__(self) -> None:
        self.calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        raise AssertionError(f"the network was called on replay: {request.url}")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return self.handle_request(request)


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    SERVERS[running.url] = running
    yield running
    del SERVERS[running.url]
    running.stop()


def build(
    url: str,
    inner: httpx.BaseTransport,
    *,
    prompt: str = "why is the disk full?",
    redactor: Any = "builtin",
) -> Loom:
    """A Loom whose flows send their requests through ``transport(inner)``."""
    loom = Loom(url, redactor=redactor)

    @loom.flow("calls")
    def calls(ctx: Any, base: str) -> dict[str, Any]:
        with httpx.Client(transport=loom_runtime.transport(inner), base_url=base) as client:
            first = client.get("/items", params={"q": "disk full"})
            second = client.get("/items", params={"q": "pool"})
            posted = client.post("/echo", json={"prompt": prompt})
        return {
            "first": first.json(),
            "second": second.json(),
            "posted": posted.json(),
            "status": posted.status_code,
            "type": posted.headers["content-type"],
        }

    @loom.flow("credentials")
    def credentials(ctx: Any, base: str) -> str:
        headers = {"Authorization": f"Bearer {TOKEN}", "x-api-key": API_KEY, "Cookie": COOKIE}
        with httpx.Client(transport=loom_runtime.transport(inner), headers=headers) as client:
            response = client.get(f"{base}/items", params={"q": CANARY, "api_key": QUERY_KEY})
            return response.text

    @loom.flow("stream")
    def stream(ctx: Any, base: str, read_all: bool) -> list[str]:
        with (
            httpx.Client(transport=loom_runtime.transport(inner)) as client,
            client.stream("GET", f"{base}/stream") as response,
        ):
            chunks = response.iter_bytes()
            received = [next(chunks).decode()]
            _release_server_of(base)
            # Another decision, stored while the response is still being read.
            received.append(ctx.decide("between", lambda: "decided mid-stream"))
            if read_all:
                received += [chunk.decode() for chunk in chunks]
        return received

    @loom.flow("secret")
    def secret(ctx: Any, base: str) -> str:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get(f"{base}/secret").text

    @loom.flow("zipped")
    def zipped(ctx: Any, base: str) -> Any:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get(f"{base}/gzip").json()

    @loom.flow("refused")
    def refused(ctx: Any, base: str) -> str:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            try:
                client.get(f"{base}/items")
            except httpx.ConnectError as exc:
                return f"caught {type(exc).__name__}"
        return "connected"

    return loom


SERVERS: dict[str, Server] = {}
"""The running servers by URL, so a flow can release its server's second event."""


def _release_server_of(base: str) -> None:
    server = SERVERS.get(base)
    if server is not None:
        server.release.set()


def test_a_recorded_flow_replays_identically_with_the_server_stopped(
    server: Server, sqlite_url: str
) -> None:
    """Each request is an ``http`` decision keyed by method, host and path; a fresh Loom on
    the same file replays the flow to the same output without sending anything."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("calls", base=server.url)
    assert len(server.hits) == 3
    server.stop()
    unreachable = Unreachable()
    with build(sqlite_url, unreachable) as fresh:
        result = fresh.replay(run.execution_id)
        decisions = fresh.execution(run.execution_id).decisions
    assert result.identical, result.describe()
    assert result.output == run.output
    assert run.output["first"]["served"] == 1 and run.output["posted"]["served"] == 3
    assert unreachable.calls == 0
    origin = f"127.0.0.1:{server.port}"
    assert {key: decision.kind for key, decision in decisions.items()} == {
        f"http:GET {origin}/items": "http",
        f"http:GET {origin}/items#2": "http",
        f"http:POST {origin}/echo": "http",
    }
    request = msgspec.json.decode(decisions[f"http:GET {origin}/items#2"].input)
    assert request == {
        "method": "GET",
        "url": f"http://{origin}/items",
        "query": [["q", "pool"]],
        "headers": {"accept": "*/*"},
        "body": None,
    }


def test_replaying_with_the_network_allowed_is_caught(server: Server, sqlite_url: str) -> None:
    """The control for every replay here: a replay that does send (``live={"http"}``) reaches
    the inner transport, which fails it, so a transport that called the network on replay
    could not pass as identical."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("calls", base=server.url)
    server.stop()
    unreachable = Unreachable()
    with build(sqlite_url, unreachable) as fresh:
        result = fresh.replay(run.execution_id, live={"http"})
    assert unreachable.calls == 1
    assert not result.identical
    assert any(isinstance(finding, OutcomeChangedError) for finding in result.divergences)


def test_credentials_and_cookies_never_reach_the_log(server: Server, tmp_path: Path) -> None:
    """Authorization, x-api-key and cookie headers, a credential query parameter and the
    response's set-cookie are left out by name, with no redactor at all: no row holds them,
    while the question sent alongside them is stored (the control)."""
    path = tmp_path / "loom.db"
    with build(f"sqlite:///{path}", httpx.HTTPTransport(), redactor=None) as loom:
        run = loom.run("credentials", base=server.url)
        decision = next(iter(loom.execution(run.execution_id).decisions.values()))
    sent = server.hits[0]["headers"]
    assert sent["authorization"] == f"Bearer {TOKEN}" and sent["x-api-key"] == API_KEY
    connection = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        rows = repr([connection.execute(f'SELECT * FROM "{table}"').fetchall() for table in tables])
    finally:
        connection.close()
    assert CANARY in rows
    for secret in (TOKEN, API_KEY, COOKIE, SET_COOKIE, QUERY_KEY):
        assert secret not in rows, secret
    assert set(msgspec.json.decode(decision.input)["headers"]) == {"accept"}


def test_flagged_and_client_headers_are_left_out(server: Server, sqlite_url: str) -> None:
    """A header with an unlisted name whose value the log's redactor flags is not stored, nor
    are an SDK's platform and retry headers or a random idempotency key."""
    loom = Loom(sqlite_url)

    @loom.flow("custom")
    def custom(ctx: Any, base: str) -> int:
        headers = {
            "x-custom-auth": OPENAI_KEY,
            "x-trace": "plain",
            "X-Stainless-Retry-Count": "0",
            "Idempotency-Key": "stainless-python-retry-0b3f",
        }
        with httpx.Client(transport=loom_runtime.transport(), headers=headers) as client:
            return client.get(f"{base}/items").status_code

    with loom:
        run = loom.run("custom", base=server.url)
        decision = next(iter(loom.execution(run.execution_id).decisions.values()))
    headers = msgspec.json.decode(decision.input)["headers"]
    assert headers == {"accept": "*/*", "x-trace": "plain"}


def test_a_changed_request_body_is_a_changed_input_with_a_diff(
    server: Server, sqlite_url: str
) -> None:
    """Replaying code that posts another body reports the changed input, with a diff."""
    with build(sqlite_url, httpx.HTTPTransport(), prompt="why is the disk full?") as loom:
        run = loom.run("calls", base=server.url)
    server.stop()
    with build(sqlite_url, Unreachable(), prompt="why is the pool exhausted?") as fresh:
        result = fresh.replay(run.execution_id)
    assert [type(finding) for finding in result.divergences] == [DecisionInputChangedError]
    finding = result.divergences[0]
    assert isinstance(finding, DecisionInputChangedError)
    assert finding.key == f"http:POST 127.0.0.1:{server.port}/echo"
    assert '-      "prompt": "why is the disk full?"' in finding.diff
    assert '+      "prompt": "why is the pool exhausted?"' in finding.diff


def test_outside_a_flow_the_transport_passes_through(server: Server) -> None:
    """No flow runs: the request goes to the inner transport, and nothing is recorded."""
    assert current_context() is None
    with httpx.Client(transport=loom_runtime.transport()) as client:
        response = client.get(f"{server.url}/items", params={"q": "x"})
    assert response.json() == {"q": ["x"], "served": 1}
    assert response.headers["set-cookie"] == f"session={SET_COOKIE}"  # untouched
    with (
        httpx.Client(transport=loom_runtime.transport(Unreachable())) as client,
        pytest.raises(AssertionError, match="network was called"),
    ):
        client.get(f"{server.url}/items")


def test_an_async_client_records_and_replays(server: Server, sqlite_url: str) -> None:
    """``async_transport`` in an ``async def`` flow: a plain request and a streamed one."""

    def build_async(inner: httpx.AsyncBaseTransport) -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("fetch")
        async def fetch(ctx: Any, base: str) -> list[Any]:
            transport = loom_runtime.async_transport(inner)
            async with httpx.AsyncClient(transport=transport, base_url=base) as client:
                items = (await client.get("/items", params={"q": "async"})).json()
                await asyncio.sleep(0)
                chunks = []
                async with client.stream("GET", "/stream") as response:
                    async for chunk in response.aiter_bytes():
                        chunks.append(chunk.decode())
                        _release_server_of(base)
            return [items, chunks]

        return loom

    with build_async(httpx.AsyncHTTPTransport()) as loom:
        run = loom.run("fetch", base=server.url)
    server.stop()
    assert run.output == [{"q": ["async"], "served": 1}, ["data: one\n\n", "data: two\n\n"]]
    unreachable = Unreachable()
    with build_async(unreachable) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert unreachable.calls == 0


def test_a_sync_client_in_an_async_flow_records_and_replays(
    server: Server, sqlite_url: str
) -> None:
    """The async flow's context records a sync client's request too (a tool built on one)."""

    def build_mixed(inner: httpx.BaseTransport) -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("mixed")
        async def mixed(ctx: Any, base: str) -> Any:
            await asyncio.sleep(0)
            with httpx.Client(transport=loom_runtime.transport(inner)) as client:
                return client.get(f"{base}/items", params={"q": "mixed"}).json()

        return loom

    with build_mixed(httpx.HTTPTransport()) as loom:
        run = loom.run("mixed", base=server.url)
    server.stop()
    assert run.output == {"q": ["mixed"], "served": 1}
    with build_mixed(Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_stream_reaches_the_caller_as_it_arrives_and_replays_in_its_pieces(
    server: Server, sqlite_url: str
) -> None:
    """The server sends its second event only once the flow holds the first, so a transport
    that read the body before handing it over would stall the server past its timeout. The
    replay hands out the same pieces."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("stream", base=server.url, read_all=True)
        decisions = loom.execution(run.execution_id).decisions
    assert server.released_in_time is True
    assert run.output == ["data: one\n\n", "decided mid-stream", "data: two\n\n"]
    value = msgspec.json.decode(decisions[f"http:GET 127.0.0.1:{server.port}/stream"].value)
    assert value["complete"] is True and value["chunks"] == [11, 11]
    server.stop()
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_stream_closed_early_records_what_was_read(server: Server, sqlite_url: str) -> None:
    """Closing a stream before its end stores the part read, marked incomplete; it replays."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("stream", base=server.url, read_all=False)
        decisions = loom.execution(run.execution_id).decisions
    value = msgspec.json.decode(decisions[f"http:GET 127.0.0.1:{server.port}/stream"].value)
    assert value["complete"] is False and value["text"] == "data: one\n\n"
    server.stop()
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == ["data: one\n\n", "decided mid-stream"]


def test_a_compressed_body_is_stored_decoded(server: Server, sqlite_url: str) -> None:
    """A gzip body is stored as the text it holds, without the encoding header that no longer
    describes it, and replays to the same value."""
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("zipped", base=server.url)
        (decision,) = loom.execution(run.execution_id).decisions.values()
    value = msgspec.json.decode(decision.value)
    assert value["text"] == '{"zipped": "unzipped in the log"}'
    assert "content-encoding" not in dict(value["headers"])
    assert run.output == {"zipped": "unzipped in the log"}
    server.stop()
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_an_async_stream_closed_early_records_what_was_read(
    server: Server, sqlite_url: str
) -> None:
    """The async twin: leaving ``aiter_bytes`` after the first event stores it, incomplete."""

    def build_async(inner: httpx.AsyncBaseTransport) -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("first_event")
        async def first_event(ctx: Any, base: str) -> str:
            transport = loom_runtime.async_transport(inner)
            async with (
                httpx.AsyncClient(transport=transport) as client,
                client.stream("GET", f"{base}/stream") as response,
            ):
                async for chunk in response.aiter_bytes():
                    _release_server_of(base)
                    return chunk.decode()
            return "no event"

        return loom

    with build_async(httpx.AsyncHTTPTransport()) as loom:
        run = loom.run("first_event", base=server.url)
        (decision,) = loom.execution(run.execution_id).decisions.values()
    value = msgspec.json.decode(decision.value)
    assert value["complete"] is False and value["text"] == "data: one\n\n"
    server.stop()
    with build_async(Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == "data: one\n\n"


def test_a_transport_error_is_recorded_and_replays_as_the_same_error(sqlite_url: str) -> None:
    """A refused connection is the decision's recorded failure; the replay raises the same
    ``httpx.ConnectError``, so the flow's ``except`` takes the same path."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with build(sqlite_url, httpx.HTTPTransport()) as loom:
        run = loom.run("refused", base=closed)
        (decision,) = loom.execution(run.execution_id).decisions.values()
    assert run.output == "caught ConnectError"
    assert decision.error_type == "httpx:ConnectError"
    with build(sqlite_url, Unreachable()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_response_that_cannot_be_stored_is_refused_naming_the_decision(
    server: Server, sqlite_url: str
) -> None:
    """A body the log refuses (a secret, in refuse mode) fails the call with a typed error
    naming the decision; no value is stored for it."""
    with build(sqlite_url, httpx.HTTPTransport(), redactor=Redactor(mode="refuse")) as loom:
        with pytest.raises(SecretRefusedError) as refused:
            loom.run("secret", base=server.url)
        (summary,) = loom.executions()
        execution = loom.execution(summary.execution_id)
    assert f"decision 'http:GET 127.0.0.1:{server.port}/secret'" in str(refused.value)
    assert OPENAI_KEY not in str(refused.value)
    assert execution.decisions == {} and summary.status == "failed"


def test_the_current_context_is_the_running_flow_and_only_there(sqlite_url: str) -> None:
    """Set while a flow body runs, across ``await`` and into its tasks; not in threads it
    starts, and gone when it returns or raises."""
    seen: dict[str, Any] = {}
    loom = Loom(sqlite_url)

    @loom.flow("plain")
    def plain(ctx: Any) -> None:
        seen["sync"] = current_context() is ctx
        thread = threading.Thread(target=lambda: seen.__setitem__("thread", current_context()))
        thread.start()
        thread.join()

    @loom.flow("awaiting")
    async def awaiting(ctx: Any) -> None:
        await asyncio.sleep(0)
        seen["async"] = current_context() is ctx

        async def child() -> bool:
            return current_context() is ctx

        seen["task"] = await asyncio.create_task(child())

    @loom.flow("failing")
    def failing(ctx: Any) -> None:
        raise ValueError("boom")

    with loom:
        loom.run("plain")
        loom.run("awaiting")
        with pytest.raises(ValueError):
            loom.run("failing")
    assert seen == {"sync": True, "thread": None, "async": True, "task": True}
    assert current_context() is None


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_without_httpx_the_transport_names_the_extra_to_install() -> None:
    """httpx missing: asking for the transport raises the typed error naming the extra."""
    script = (
        "import sys; sys.modules['httpx'] = None\n"
        "import loom_runtime\n"
        "try:\n"
        "    loom_runtime.transport\n"
        "except loom_runtime.MissingExtraError as exc:\n"
        "    print(exc.extra, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("http ")
    assert "pip install 'loom-replay[http]'" in done.stdout


def test_a_body_iterated_again_continues_and_is_stored_once(
    server: Server, sqlite_url: str
) -> None:
    """An SDK that stops at its stream's last event and then drains the rest (the OpenAI
    async stream) iterates the body a second time: that continues the one reader, and the
    response is stored whole (not as a ``StreamConsumed`` failure)."""
    loom = Loom(sqlite_url)

    @loom.flow("twice")
    def twice(ctx: Any, base: str) -> list[str]:
        with (
            httpx.Client(transport=loom_runtime.transport()) as client,
            client.stream("POST", f"{base}/echo", json={"prompt": "p"}) as response,
        ):
            pieces = [next(iter(response.stream)).decode()]
            pieces += [piece.decode() for piece in response.stream]
        return pieces

    with loom:
        run = loom.run("twice", base=server.url)
        decision = loom.execution(run.execution_id).decisions[
            f"http:POST 127.0.0.1:{server.port}/echo"
        ]
    assert json.loads("".join(run.output))["received"] == {"prompt": "p"}
    assert decision.error_type is None
    assert msgspec.json.decode(decision.value)["complete"] is True


def test_an_httpx2_inner_transport_records_for_an_httpx2_client(
    server: Server, sqlite_url: str
) -> None:
    """``transport(httpx2.HTTPTransport())`` is a transport an ``httpx2.Client`` accepts (the
    package current OpenAI and Anthropic SDKs use), recording and replaying the same way."""
    httpx2 = pytest.importorskip("httpx2")

    def build_httpx2(inner: Any) -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("two")
        def two(ctx: Any, base: str) -> Any:
            with httpx2.Client(transport=loom_runtime.transport(inner)) as client:
                return client.get(f"{base}/items", params={"q": "two"}).json()

        return loom

    with build_httpx2(httpx2.HTTPTransport()) as loom:
        run = loom.run("two", base=server.url)
    server.stop()
    assert run.output == {"q": ["two"], "served": 1}

    class Unreachable2(httpx2.BaseTransport):  # type: ignore[name-defined,misc]
        def handle_request(self, request: Any) -> Any:
            raise AssertionError(f"the network was called on replay: {request.url}")

    with build_httpx2(Unreachable2()) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
