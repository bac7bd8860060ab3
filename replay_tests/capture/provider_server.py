"""A loopback stand-in for the OpenAI and Anthropic HTTP APIs, for tests and benchmarks.

The capture tests drive the *real* ``openai`` and ``anthropic`` SDKs (no monkeypatching), so
something on 127.0.0.1 has to speak their wire formats: OpenAI Chat Completions, Responses and
Embeddings, Anthropic Messages, each as JSON and (except embeddings) as SSE with the event
sequence the SDKs parse, and an OpenAI audio transcription (a multipart upload) as JSON.
Replies are derived from the request, so a recording and its replay can be compared without
storing expectations:

- a request that offers tools and ends with a user turn answers with a call of the first tool,
  its first parameter set to the user's text (so a tool round trip needs no scripting);
- a request ending with a tool result answers ``"Answer: <tool result>"``;
- anything else answers ``"Echo: <last user text>"``.

Faults are scripted per request (:meth:`ProviderServer.fail_next`): a status with headers
(429 + ``retry-after``, 500), a body that is not JSON, or a stream whose connection drops after
some events (optionally in the middle of one). Every request is counted in
:attr:`ProviderServer.requests`, so a test proves a replay made none by stopping the server and
checking the count. The routes are a small table of canned handlers, not a web framework.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Fault", "ProviderServer", "Received"]

Json = dict[str, Any]
#: One SSE event: its ``event:`` name (None for OpenAI's data-only chunks) and its data.
Event = tuple[str | None, Json | str]

CREATED = 1_700_000_000


@dataclass(frozen=True)
class Fault:
    """What the server does instead of answering one request normally.

    ``status``/``headers``/``body`` replace the reply outright (a 429 with ``retry-after``, a 500,
    a 200 whose body is not JSON). ``drop_after`` applies to a streamed reply: send that many
    events, then close the connection without finishing the chunked body (the client sees a
    dropped connection); with ``mid_event`` half of the next event is sent first.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    drop_after: int | None = None
    mid_event: bool = False

    @classmethod
    def rate_limited(cls, *, retry_after: str = "0") -> Fault:
        """A 429 carrying ``retry-after`` (seconds), shaped like OpenAI's error body."""
        return cls(
            status=429,
            headers={"retry-after": retry_after},
            body=_error_body("rate_limit_exceeded", "Rate limit reached; try again"),
        )

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        """A 5xx with a provider-shaped JSON error body."""
        return cls(status=status, body=_error_body("server_error", "The server had an error"))

    @classmethod
    def not_json(cls) -> Fault:
        """A 200 that claims JSON but carries an HTML error page (a misbehaving proxy)."""
        return cls(
            headers={"content-type": "application/json"},
            body=b"<html><body>502 Bad Gateway</body></html>",
        )

    @classmethod
    def dropped(cls, *, after: int = 2, mid_event: bool = False) -> Fault:
        """A stream whose connection closes after ``after`` events (mid-event if asked)."""
        return cls(drop_after=after, mid_event=mid_event)


@dataclass(frozen=True)
class Received:
    """One request as the server saw it (for assertions about what the client sent)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Json


class ProviderServer:
    """The loopback provider: start on construction, :meth:`stop` when done (idempotent).

    ``openai_url`` is the ``base_url`` for ``openai.OpenAI`` and ``anthropic_url`` the one for
    ``anthropic.Anthropic``.
    """

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _handler_class(self))
        self.port: int = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.openai_url = f"{self.url}/v1"
        self.anthropic_url = self.url
        # serve_forever looks for shutdown() every poll_interval: its default of 0.5 s made
        # stop() wait about that long, once per test that uses the provider.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    @property
    def count(self) -> int:
        """How many requests reached the server so far."""
        with self._lock:
            return len(self.requests)

    def fail_next(self, *faults: Fault) -> None:
        """Answer the next requests (one fault each, in order) with these faults."""
        with self._lock:
            self._faults.extend(faults)

    def stop(self) -> None:
        """Stop serving and free the port; a later connection is refused."""
        if not self._thread.is_alive():
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> ProviderServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _receive(self, received: Received) -> Fault | None:
        with self._lock:
            self.requests.append(received)
            return self._faults.popleft() if self._faults else None


# ---------------------------------------------------------------------------------------------
# Deterministic replies derived from the request.


@dataclass(frozen=True)
class Turn:
    """What the last turn of a conversation asks for, provider-neutral."""

    text: str
    tool_result: str | None
    tool: tuple[str, str] | None  # (tool name, its first parameter) when tools are offered

    def reply(self) -> str:
        if self.tool_result is not None:
            return f"Answer: {self.tool_result}"
        return f"Echo: {self.text}"

    def arguments(self) -> str:
        assert self.tool is not None
        return json.dumps({self.tool[1]: self.text}) if self.tool[1] else "{}"


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of text parts of any provider."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text") or _text_of(p.get("content")) for p in content if isinstance(p, dict)
        ]
        return " ".join(p for p in parts if p)
    return ""


def _first_tool(tools: list[Json], schema_key: str) -> tuple[str, str] | None:
    if not tools:
        return None
    tool = tools[0]
    spec = tool.get("function", tool)
    properties = (spec.get(schema_key) or {}).get("properties") or {}
    return str(spec["name"]), next(iter(properties), "")


def _chat_turn(body: Json) -> Turn:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Turn(text="", tool_result=_text_of(last.get("content")), tool=None)
    tool = _first_tool(body.get("tools") or [], "parameters")
    return Turn(text=_text_of(last.get("content")), tool_result=None, tool=tool)


def _responses_turn(body: Json) -> Turn:
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    last = (items or [{}])[-1]
    if last.get("type") == "function_call_output":
        return Turn(text="", tool_result=str(last.get("output")), tool=None)
    tool = _first_tool(body.get("tools") or [], "parameters")
    return Turn(text=_text_of(last.get("content")), tool_result=None, tool=tool)


def _anthropic_turn(body: Json) -> Turn:
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages else ""
    if isinstance(content, list):
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return Turn(text="", tool_result=_text_of(results[-1].get("content")), tool=None)
    tool = _first_tool(body.get("tools") or [], "input_schema")
    return Turn(text=_text_of(content), tool_result=None, tool=tool)


def _words(text: str) -> list[str]:
    """The pieces a stream sends: each word with its following space (joined back = text)."""
    return re.findall(r"\S+\s*", text) or [text]


def _tokens(body: Json) -> int:
    return len(json.dumps(body.get("messages") or body.get("input") or "").split())


def _served_model(body: Json) -> str:
    """The model the provider says it ran: a dated snapshot of the requested alias."""
    return f"{body.get('model', 'model')}-2025-01-01"


def _chat(body: Json) -> tuple[Json, list[Event]]:
    turn = _chat_turn(body)
    model, prompt = _served_model(body), _tokens(body)
    base = {"id": "chatcmpl-loopback", "created": CREATED, "model": model}
    chunk = {**base, "object": "chat.completion.chunk", "system_fingerprint": "fp_loop"}
    if turn.tool is not None and turn.tool_result is None:
        arguments = turn.arguments()
        call = {"id": "call_1", "type": "function"}
        function = {"name": turn.tool[0], "arguments": arguments}
        message: Json = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{**call, "function": function}],
        }
        finish, completion = "tool_calls", len(_words(arguments))
        half = len(arguments) // 2
        deltas: list[Json] = [
            {"role": "assistant", "content": None,
             "tool_calls": [{"index": 0, **call, "function": {**function, "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
        ]  # fmt: skip
    else:
        text = turn.reply()
        message = {"role": "assistant", "content": text, "refusal": None}
        finish, completion = "stop", len(_words(text))
        deltas = [{"role": "assistant", "content": ""}] + [{"content": w} for w in _words(text)]
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    reply = {
        **base,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }
    events: list[Event] = [
        (None, {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
        for d in deltas
    ]
    events.append(
        (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    )
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append((None, {**chunk, "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return reply, events


def _responses(body: Json) -> tuple[Json, list[Event]]:
    turn = _responses_turn(body)
    model, prompt = _served_model(body), _tokens(body)
    if turn.tool is not None and turn.tool_result is None:
        arguments = turn.arguments()
        item: Json = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": turn.tool[0],
            "arguments": arguments,
            "status": "completed",
        }
        completion, text = len(_words(arguments)), None
    else:
        text = turn.reply()
        part = {"type": "output_text", "text": text, "annotations": []}
        item = {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
        completion = len(_words(text))
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
    response: Json = {
        "id": "resp_loopback",
        "object": "response",
        "created_at": CREATED,
        "model": model,
        "status": "completed",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "usage": usage,
    }
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    raw: list[Json] = [{"type": "response.created", "response": started}]
    if text is None:
        raw += [
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "arguments": "", "status": "in_progress"}},
            {"type": "response.function_call_arguments.delta", "item_id": "fc_1",
             "output_index": 0, "delta": item["arguments"]},
            {"type": "response.function_call_arguments.done", "item_id": "fc_1",
             "output_index": 0, "arguments": item["arguments"]},
        ]  # fmt: skip
    else:
        empty = {"type": "output_text", "text": "", "annotations": []}
        at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        raw += [
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "status": "in_progress", "content": []}},
            {"type": "response.content_part.added", **at, "part": empty},
            *({"type": "response.output_text.delta", **at, "delta": w, "logprobs": []}
              for w in _words(text)),
            {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": item["content"][0]},
        ]  # fmt: skip
    raw += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": response},
    ]
    events: list[Event] = [(str(e["type"]), {**e, "sequence_number": n}) for n, e in enumerate(raw)]
    return response, events


def _embeddings(body: Json) -> tuple[Json, list[Event]]:
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
    base64_wanted = body.get("encoding_format") == "base64"
    data = []
    for index, text in enumerate(texts):
        vector = [round((sum(map(ord, str(text))) % 97 + k) / 100.0, 2) for k in range(4)]
        encoded: Any = vector
        if base64_wanted:
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(len(str(t).split()) for t in texts)
    reply = {
        "object": "list",
        "data": data,
        "model": _served_model(body),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return reply, []


def _messages(body: Json) -> tuple[Json, list[Event]]:
    turn = _anthropic_turn(body)
    model, prompt = _served_model(body), _tokens(body)
    blocks: list[Json] = []
    starts: list[Json] = []
    pieces: list[list[Json]] = []
    if turn.tool is not None and turn.tool_result is None:
        arguments = turn.arguments()
        tool = {"type": "tool_use", "id": "toolu_1", "name": turn.tool[0]}
        blocks.append({**tool, "input": json.loads(arguments)})
        starts.append({**tool, "input": {}})
        half = len(arguments) // 2
        pieces.append(
            [
                {"type": "input_json_delta", "partial_json": p}
                for p in (arguments[:half], arguments[half:])
            ]
        )
        stop, completion = "tool_use", len(_words(arguments))
    else:
        text = turn.reply()
        blocks.append({"type": "text", "text": text})
        starts.append({"type": "text", "text": ""})
        pieces.append([{"type": "text_delta", "text": w} for w in _words(text)])
        stop, completion = "end_turn", len(_words(text))
    message = {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }
    opening = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }
    events: list[Event] = [("message_start", {"type": "message_start", "message": opening})]
    for index, (start, deltas) in enumerate(zip(starts, pieces, strict=True)):
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        if index == 0:
            events.append(("ping", {"type": "ping"}))
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events += [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": completion}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return message, events


#: Path suffix -> handler returning (the JSON reply, the SSE events of the streamed reply).
ROUTES: dict[str, Callable[[Json], tuple[Json, list[Event]]]] = {
    "/v1/chat/completions": _chat,
    "/v1/responses": _responses,
    "/v1/embeddings": _embeddings,
    "/v1/messages": _messages,
    "/v1/audio/transcriptions": lambda body: ({"text": "the disk is full"}, []),  # multipart
}


def _error_body(code: str, message: str) -> bytes:
    error = {"message": message, "type": code, "code": code, "param": None}
    return json.dumps({"type": "error", "error": error}).encode()


def _sse(event: Event) -> bytes:
    name, data = event
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {name}\n" if name is not None else ""
    return f"{head}data: {payload}\n\n".encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (an abandoned stream, a stopped test) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_class(server: ProviderServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # each event leaves when written, as from a provider

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            path = self.path.split("?", 1)[0]
            headers = {k.lower(): v for k, v in self.headers.items()}
            fault = server._receive(Received("POST", path, headers, body))
            route = ROUTES.get(path)
            if fault is not None and fault.body is not None:
                self._whole(fault.status, fault.body, fault.headers)
            elif route is None:
                self._whole(404, _error_body("not_found", f"no route {path}"), {})
            elif body.get("stream"):
                self._stream(route(body)[1], fault)
            else:
                self._whole(200, json.dumps(route(body)[0]).encode(), {})

        def _whole(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            headers = {"content-type": "application/json", **headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self._provider_headers()
            self.end_headers()
            self.wfile.write(payload)

        def _stream(self, events: list[Event], fault: Fault | None) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self._provider_headers()
            self.end_headers()
            for n, chunk in enumerate(map(_sse, events)):
                if fault is not None and fault.drop_after == n:
                    if fault.mid_event:
                        half = chunk[: len(chunk) // 2]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(half), half))
                    self._drop()
                    return
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _provider_headers(self) -> None:
            """A request id, and the account's organisation echoed as OpenAI does (a
            credential-like id a recording must leave out)."""
            self.send_header("x-request-id", f"req_{server.count}")
            organization = self.headers.get("openai-organization")
            if organization:
                self.send_header("openai-organization", organization)

        def _drop(self) -> None:
            """Close the socket without the chunked terminator: the client sees a cut body."""
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler
