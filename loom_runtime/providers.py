"""The ``model`` profile: what a call of a wrapped OpenAI or Anthropic client stores (ADR 0025).

A wrapped client sends its requests through the recording transport of ADR 0024 with this
profile instead of the ``http`` one. The exchange is the same (sent, retried, streamed to the
caller as it arrives, replayed with no network); what the decision holds differs:

* key ``model:<provider>:<path>``: the path under the client's base URL, without a leading
  version segment, ``/`` read as ``.`` (``model:openai:chat.completions``,
  ``model:anthropic:messages``), numbered ``#2``... by the flow context;
* input: the request's JSON body (model, messages, tools, parameters, ``stream``), nothing
  else: no header, key, organisation or base URL;
* value (:class:`ModelResponse`): the status, the headers the SDK reads, and the provider's
  JSON, or for a stream its parsed events in order and the message they assemble to;
* meta: the model that answered, latency, usage, finish reason, retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final

import httpx
import msgspec

from loom_runtime.backoff import Backoff
from loom_runtime.context import OpenDecision
from loom_runtime.errors import ModelResponseError
from loom_runtime.execution import error_message_of, error_type_of
from loom_runtime.http_request import JSON_DECODE_ERRORS, request_key_and_input, without_credentials
from loom_runtime.http_transport import (
    RESPONSE_HEADERS_NOT_STORED,
    BodyFailure,
    Call,
    Recording,
    Replayed,
    headers_to_store,
    replayed,
    stored_headers,
)
from loom_runtime.redaction import Redactor
from loom_runtime.storable import is_unicode

KIND = "model"

MODEL_RESPONSE_HEADERS_NOT_STORED = RESPONSE_HEADERS_NOT_STORED | {
    "content-length",
    "transfer-encoding",
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
}
"""Besides the ``http`` profile's: the account's organisation and project ids (they identify
the payer, like a key does) and the framing and length of the body, which a replay
re-frames."""

TERMINAL_EVENTS = frozenset(
    {"[DONE]", "message_stop", "response.completed", "response.incomplete", "response.failed"}
)
"""The events that end a provider's stream (an event name, or a data line that is not JSON):
a stream whose last event is one is complete even when the SDK closes it before the body's
end (OpenAI's iterator stops at ``[DONE]`` and closes the response)."""

_VERSION = re.compile(r"^v\d+(?:beta\d*|alpha\d*)?/")

_Line = Annotated[str, msgspec.Meta(pattern=r"^[^\r\n]*$")]
"""An event name: one line (a recorded name holding a line break would forge more fields)."""


class SseEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One server-sent event: its ``event`` name (Anthropic's and the Responses API's; none
    for a Chat Completions chunk) and its data, as JSON, or as ``text`` when it is not JSON
    (OpenAI's ``[DONE]``)."""

    event: _Line | None = None
    data: Any = None
    text: str | None = None
    spelled: str | None = None
    """The data's JSON as the provider spelled it, when that is not its compact encoding
    (spaces after separators): the caller of ``iter_lines()`` reads it so on replay too."""
    raw: str | None = None
    """The event's text as it was read, with the comments before it, when that is not how
    :meth:`wire` spells it anew: CRLF line ends, ``data:`` without its space, an ``id`` or
    ``retry`` field, a keep-alive comment (``: OPENROUTER PROCESSING``). No SDK reads those,
    but the caller of ``iter_lines()`` does (ADR 0025, amended "raw events")."""

    def wire(self) -> bytes:
        """The event as the provider sent it: as read (``raw``) when that text reads as this
        very event, else its data as spelled (compact unless ``spelled`` spells that very
        data: :func:`_spelling`). What the audit shows is the event's name and data; a text
        that reads otherwise (altered apart from them) is never what a replay hands over."""
        if self.raw is not None:
            read, rest = parse_sse(self.raw)
            if not rest and len(read) == 1 and read[0] == self:
                return self.raw.encode()
        if self.text is not None:
            payload = self.text
        else:
            payload = _spelling(self.data, self.spelled).decode()
        head = f"event: {self.event}\n" if self.event is not None else ""
        return f"{head}data: {payload.replace(chr(10), chr(10) + 'data: ')}\n\n".encode()


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A provider's response as a ``model`` decision stores it.

    Exactly one of ``body`` (the JSON reply), ``text`` (a reply that is not JSON, an error
    page), ``data`` (bytes that are not UTF-8, e.g. audio) and ``events`` (a stream) holds the
    body. For a stream, ``final`` is the message its events assemble to (OpenAI: the deltas
    accumulated, tool calls included; Responses: the last response snapshot; Anthropic: the
    final ``Message``; for the audit only, so None when the events do not assemble), and
    ``complete`` is false when the caller closed it before its last event: ``events`` are
    then what the caller consumed. A stream that is not UTF-8 is stored as its ``data``, with
    its ``final``: the SDK raises on the bytes as it decodes them, on replay too.
    ``cancelled_after`` is set when the flow cancelled the read while it waited for more, as
    :class:`RecordedResponse`'s is.
    """

    status: int
    headers: list[tuple[str, str]]
    body: Any = None
    text: str | None = None
    data: bytes | None = None
    events: list[SseEvent] | None = None
    final: Any = None
    complete: bool = True
    cancelled_after: Annotated[float, msgspec.Meta(ge=0)] | None = None
    indent: Annotated[int, msgspec.Meta(ge=1, le=8)] | None = None
    """The body was ``body`` indented so (OpenAI's replies are, by 2): re-encoded so on replay."""
    spelled: str | None = None
    """The body's JSON as the provider spelled it, when neither the compact encoding of
    ``body`` nor an indented one is (kept whole: the caller of ``with_raw_response`` reads
    ``.text`` as it was)."""
    failed: BodyFailure | None = None
    """What reading a stream raised after its stored ``events`` (the connection cut): a
    replay hands out the events, then raises it, where the SDK met it live."""

    def pieces(self) -> list[bytes]:
        """The body a replay hands the SDK: one piece per recorded event, or the whole, as
        the provider spelled it."""
        if self.events is not None:
            return [event.wire() for event in self.events]
        if self.text is not None:
            return [self.text.encode()]
        if self.data is not None:
            return [self.data]
        spelled = _spelling(self.body, self.spelled)  # compact unless spelled otherwise
        return [
            spelled if self.indent is None else msgspec.json.format(spelled, indent=self.indent)
        ]


Assembler = Callable[[list[SseEvent]], Any]

BETA_HEADERS: Final = ("anthropic-beta", "openai-beta")
"""Request headers that switch a provider's features (a 1M context, interleaved thinking, the
Assistants API's version): what is asked as much as the body is, so a replay compares them
(ADR 0025, amended "beta headers"). Only these: the rest describe the client or its
credentials."""


@dataclass(frozen=True)
class ModelProfile:
    """The ``model`` profile of one wrapped client: its provider, its base URL's path (keys
    name the call relative to it), its retry policy inside a flow and outside one (the
    client's own ``max_retries``, which wrapping sets to 0 for loom to retry instead)."""

    provider: str
    base_path: str
    retry: Backoff | None
    retry_outside: Backoff | None = None

    @property
    def kind(self) -> str:
        return KIND

    def buffered(self, response: httpx.Response) -> bool:
        """A reply that is not a stream is read whole inside the retries, so a body the
        connection cuts is retried, as the SDK retries it unwrapped (it reads it whole too)."""
        return not response.headers.get("content-type", "").startswith("text/event-stream")

    def key_and_input(
        self, request: httpx.Request, redactor: Redactor | None
    ) -> tuple[str, object]:
        path = request.url.path
        relative = path[len(self.base_path) :] if path.startswith(self.base_path) else path
        name = _VERSION.sub("", relative.strip("/")).replace("/", ".") or "."
        key = f"{KIND}:{self.provider}:{name}"
        # A beta feature changes the answer and is asked in a header: compared beside the
        # body when sent; a call without one is compared by its body alone, as it always was.
        betas = {name: request.headers[name] for name in BETA_HEADERS if name in request.headers}
        if not request.url.query:
            try:
                body = without_credentials(msgspec.json.decode(request.content))
            except JSON_DECODE_ERRORS:
                pass
            else:
                return key, {"body": body, "headers": betas} if betas else body
        _, canonical = request_key_and_input(request, redactor)
        asked = {part: canonical[part] for part in ("method", "query", "body")}
        return key, asked | {"headers": betas} if betas else asked

    def replayed(self, key: str, value: Any) -> Replayed:
        return replayed(
            key,
            value,
            ModelResponse,
            expected="a recorded model response",
            not_stored=MODEL_RESPONSE_HEADERS_NOT_STORED,
        )

    def recording(self, decision: OpenDecision, response: httpx.Response, call: Call) -> Recording:
        base = decision.key.split("#", 1)[0]
        return _ModelRecording(decision, response, call, assembler_for(base))


class _ModelRecording:
    """A live model response as the SDK reads it, stored (with its meta) once it ends."""

    def __init__(
        self,
        decision: OpenDecision,
        response: httpx.Response,
        call: Call,
        assemble: Assembler | None,
    ) -> None:
        self.headers = stored_headers(response, MODEL_RESPONSE_HEADERS_NOT_STORED)
        self._stored_headers = headers_to_store(self.headers)
        content_type = response.headers.get("content-type", "")
        self._streamed = content_type.startswith("text/event-stream")
        self._announced_json = "json" in content_type
        self._status = response.status_code
        self._decision = decision
        self._call = call
        self._assemble = assemble
        self._chunks: list[bytes] = []
        self._first_byte: float | None = None

    def add(self, chunk: bytes) -> None:
        if self._first_byte is None:
            self._first_byte = time.perf_counter()
        self._chunks.append(chunk)

    def finish(self, *, complete: bool) -> None:
        """Store the response (once): parsed when it is whole, what was consumed when the
        caller closed it early. A success that is not the JSON it announced, or a stream
        ending inside an event, is stored as a failure and raised."""
        if not self._decision.settled:
            value, meta = self._outcome(complete=complete)
            self._decision.record(value, meta=meta)

    def cancel(self) -> None:
        cancelled_after = round(time.perf_counter() - self._call.started, 3)
        value, meta = self._outcome(complete=False)
        self._decision.defer(
            msgspec.structs.replace(value, cancelled_after=cancelled_after),
            meta={**meta, **self._decision.cut_point()},
        )

    def raised(self, cancelled: asyncio.CancelledError) -> None:
        value, meta = self._outcome(complete=False)
        failed = BodyFailure(
            error_type=error_type_of(cancelled),
            message=self._decision.stored_message(error_message_of(cancelled)),
        )
        self._decision.defer(msgspec.structs.replace(value, failed=failed), meta=meta)

    def _outcome(self, *, complete: bool) -> tuple[ModelResponse, dict[str, object]]:
        """The response as stored, and its meta; a refusal (only of a whole one) raises."""
        raw = b"".join(self._chunks)
        if self._streamed:
            try:
                text, data = raw.decode("utf-8"), None
            except UnicodeDecodeError:
                # The SDK raises on such an event as it decodes it: stored as the bytes read,
                # a replay hands it the same bytes and it raises there again. The events and
                # ``final`` the audit reads are those of the text with replacement characters.
                text, data = raw.decode("utf-8", "replace"), raw
            events, rest = parse_sse(text)
            if complete and rest.strip():
                raise self._refuse(f"ended inside an event after {len(events)} events")
            ended = complete or bool(events and _terminal(events[-1]))
            final = _final(self._assemble, events)
            value = ModelResponse(
                status=self._status,
                headers=self._stored_headers,
                events=events if data is None else None,
                data=data,
                final=final,
                complete=ended,
            )
            return value, self._meta(final)
        try:
            body = msgspec.json.decode(raw)
        except JSON_DECODE_ERRORS:
            # The SDK reads with Python's json, which takes what strict JSON refuses (NaN,
            # -Infinity in a logprob, a lone surrogate escape): such a reply is stored as the
            # bytes received (which the SDK parses alike on replay), its meta read from them.
            lenient = _python_json(raw)
            announced = complete and self._announced_json and 200 <= self._status < 300
            if announced and lenient is _NOT_JSON:
                raise self._refuse(f"is not the JSON it announced: {raw[:80]!r}") from None
            value = self._unparsed(raw, complete=complete)
            return value, self._meta(None if lenient is _NOT_JSON else _unicode(lenient))
        value = ModelResponse(
            status=self._status, headers=self._stored_headers, body=body, **_layout(raw, body)
        )
        return value, self._meta(value.body)

    def fail(self, error: Exception) -> Exception:
        """A body cut by the connection, raised on, so the SDK turns it into its connection
        error (``openai.APIConnectionError``) live and on replay alike, as it does unwrapped.

        A stream is stored as read, its complete events and then the error
        (:attr:`ModelResponse.failed`): a flow that kept what it consumed before the cut gets
        the same events again on replay, then the same error (ADR 0025, amended "cut
        stream"). Any other body: the transport's error is the decision's failure, with what
        had arrived in the meta (``cut_after``)."""
        if self._streamed:
            if not self._decision.settled:
                value, meta = self._outcome(complete=False)
                failed = BodyFailure(
                    error_type=error_type_of(error), message=error_message_of(error)
                )
                self._decision.record(msgspec.structs.replace(value, failed=failed), meta=meta)
            return error
        meta = self._call.meta()
        if isinstance(error, self._call.library.transport_error):
            meta["cut_after"] = f"{sum(map(len, self._chunks))} bytes"
        self._decision.fail(error, meta=meta)
        return error

    def _refuse(self, what: str) -> ModelResponseError:
        error = self._error(what)
        self._decision.fail(error, meta=self._call.meta())
        return error

    def _error(self, what: str) -> ModelResponseError:
        return ModelResponseError(
            f"the provider's response to model decision {self._decision.key!r} {what}; it was "
            "recorded as the decision's failure, not as an answer. Run the flow again once the "
            "provider answers whole responses"
        )

    def _unparsed(self, raw: bytes, *, complete: bool) -> ModelResponse:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return ModelResponse(
                status=self._status, headers=self._stored_headers, data=raw, complete=complete
            )
        return ModelResponse(
            status=self._status, headers=self._stored_headers, text=text, complete=complete
        )

    def _meta(self, answer: Any) -> dict[str, object]:
        """What the call measured: the model that answered, usage and finish reason as the
        provider reported them, latency (retries and pauses included), retries."""
        now = time.perf_counter()
        meta: dict[str, object] = {}
        if isinstance(answer, dict):
            for name, value in (
                ("model", answer.get("model")),
                ("usage", answer.get("usage")),
                ("finish_reason", _finish_reason(answer)),
            ):
                if value is not None:
                    meta[name] = value
        meta["latency_ms"] = _ms(now - self._call.started)
        if self._streamed and self._first_byte is not None:
            meta["time_to_first_byte_ms"] = _ms(self._first_byte - self._call.started)
        meta.update(self._call.meta())
        return meta


def _spelling(data: Any, spelled: str | None) -> bytes:
    """``data``'s JSON as the provider spelled it: ``spelled`` when it decodes to ``data``,
    else its compact encoding. Both are stored, and the audit reads ``data``: a ``spelled``
    altered apart from it (or redacted unlike it) is not what the flow is handed on replay, so
    what a replay gives is always what an audit shows."""
    if spelled is not None:
        try:
            if msgspec.json.decode(spelled) == data:
                return spelled.encode()
        except JSON_DECODE_ERRORS:
            pass
    return msgspec.json.encode(data)


_INDENTS = (2, 4)
"""The indents a JSON body is tried in before it is kept as spelled (:func:`_layout`)."""


def _layout(raw: bytes, body: Any) -> dict[str, Any]:
    """How ``raw`` (a JSON body, ``body`` decoded) is spelled, as :class:`ModelResponse`'s
    fields: nothing when compact, ``indent`` when indented as msgspec indents, else the text
    itself (``spelled``)."""
    compact = msgspec.json.encode(body)
    if compact == raw:
        return {}
    for indent in _INDENTS:
        if msgspec.json.format(compact, indent=indent) == raw:
            return {"indent": indent}
    return {"spelled": raw.decode("utf-8")}  # UTF-8: msgspec refuses JSON that is not


def parse_sse(body: str) -> tuple[list[SseEvent], str]:
    """The complete events of an SSE body, and what follows the last one (an event cut
    short, or nothing). Comments and ``id``/``retry`` fields are read past (no SDK reads
    them), but an event's text as read is kept when it is not spelled as :meth:`SseEvent.wire`
    would spell it (``raw``), with the comment blocks before it."""
    *pieces, rest = _BLANK_LINE.split(body)
    events = []
    before = ""  # blocks holding no event (comments), sent before the next event
    for block, end in zip(pieces[::2], pieces[1::2], strict=True):
        read = before + block + end
        before = ""
        name: str | None = None
        data: list[str] = []
        for line in block.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if name is None and not data:
            before = read
            continue
        payload = "\n".join(data)
        try:
            decoded = msgspec.json.decode(payload)
        except JSON_DECODE_ERRORS:
            event = SseEvent(event=name, text=payload)
        else:
            compact = msgspec.json.encode(decoded).decode() == payload
            event = SseEvent(event=name, data=decoded, spelled=None if compact else payload)
        if event.wire() != read.encode():
            event = msgspec.structs.replace(event, raw=read)
        events.append(event)
    return events, rest


_BLANK_LINE = re.compile(r"((?:\r\n|\r(?!\n)|\n){2})")
"""What ends an SSE block: a line end and an empty line (either spelling, CR, LF or CRLF),
kept by ``split`` as what the block was read with. A CR before an LF is never a line end of
its own: one CRLF read as two would end the block inside an event."""


def _terminal(event: SseEvent) -> bool:
    return event.text in TERMINAL_EVENTS or event.event in TERMINAL_EVENTS


def _finish_reason(answer: dict[str, Any]) -> Any:
    """Why the model stopped: a chat completion's first choice's ``finish_reason``, a
    message's ``stop_reason``, a Responses API response's ``status``."""
    choices = answer.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("finish_reason")
    return answer.get("stop_reason", answer.get("status"))


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _final(assemble: Assembler | None, events: list[SseEvent]) -> Any:
    """The message ``events`` assemble to, as stored (``final``), or None.

    For the audit only, while the SDK reads the stream as it is: the assemblers skip a piece
    of a shape they do not know, and an assembly that still fails (an event nested past the
    recursion limit) leaves ``final`` None rather than failing a call the SDK answered (ADR
    0025, amended "stream shapes"). Text read by Python's ``json`` (an event msgspec
    refuses) may hold halves of a surrogate pair, made one character here."""
    if assemble is None:
        return None
    try:
        final = assemble(events)
        if any(event.text is not None and not _terminal(event) for event in events):
            final = _unicode(final)
    except Exception:  # audit only: never fails the call (see above)
        return None
    return final


def _objects(events: list[SseEvent]) -> list[dict[str, Any]]:
    """The events whose data is a JSON object (what every assembler reads): msgspec's, or, for
    an event it refused (``NaN``, ``-Infinity``, a lone surrogate escape), Python's ``json``'s,
    as the SDK reads it and as a reply that is not a stream is read for its meta."""
    objects = []
    for event in events:
        data = event.data
        if data is None and event.text is not None and not _terminal(event):
            data = _python_json(event.text)
        if isinstance(data, dict):
            objects.append(data)
    return objects


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _unicode(value: Any) -> Any:
    """``value`` (Python's ``json``'s) with each string made storable: a surrogate pair (the
    halves of one character, escaped apart or split over a stream's chunks and joined) as the
    character, a lone surrogate (which UTF-8 cannot hold) as its backslash escape. None when it
    nests deeper than this walk may go (audit and meta only: never a failed call)."""
    try:
        return _paired(value)
    except RecursionError:
        return None


def _paired(value: Any) -> Any:
    if isinstance(value, str):
        if is_unicode(value):
            return value
        paired = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return paired.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [_paired(item) for item in value]
    if isinstance(value, dict):
        return {_paired(name): _paired(item) for name, item in value.items()}
    return value


def _append(target: dict[str, Any], field: str, piece: Any) -> None:
    """Add a text ``piece`` to ``target[field]`` (anything but text there is started over)."""
    if isinstance(piece, str):
        held = target.get(field)
        target[field] = (held if isinstance(held, str) else "") + piece


def assemble_chat(events: list[SseEvent]) -> dict[str, Any] | None:
    """The ``chat.completion`` a Chat Completions stream's chunks add up to: content, refusal
    and tool calls accumulated per choice, the last finish reason, the usage chunk's usage."""
    final: dict[str, Any] | None = None
    choices: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    for chunk in _objects(events):
        if final is None:
            final = {field: chunk.get(field) for field in ("id", "created", "model")}
            final["object"] = "chat.completion"
        if chunk.get("usage") is not None:
            final["usage"] = chunk["usage"]
        for choice in _list(chunk.get("choices")):
            if not isinstance(choice, dict) or not isinstance(choice.get("index", 0), int):
                continue
            index = choice.get("index", 0)
            message = {"role": "assistant", "content": None}
            assembled = choices.setdefault(
                index, {"index": index, "message": message, "finish_reason": None}
            )
            delta = _object(choice.get("delta"))
            if delta.get("role"):
                assembled["message"]["role"] = delta["role"]
            _append(assembled["message"], "content", delta.get("content"))
            _append(assembled["message"], "refusal", delta.get("refusal"))
            for call in _list(delta.get("tool_calls")):
                if isinstance(call, dict) and isinstance(call.get("index"), int):
                    _add_tool_call(calls.setdefault(index, {}), call)
            if choice.get("finish_reason") is not None:
                assembled["finish_reason"] = choice["finish_reason"]
    if final is None:
        return None
    for index, per_call in calls.items():
        choices[index]["message"]["tool_calls"] = [per_call[n] for n in sorted(per_call)]
    final["choices"] = [choices[index] for index in sorted(choices)]
    return final


def _add_tool_call(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    call = calls.setdefault(
        piece["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
    )
    for field in ("id", "type"):
        if piece.get(field):
            call[field] = piece[field]
    function = piece.get("function")
    if isinstance(function, dict):
        _append(call["function"], "name", function.get("name"))
        _append(call["function"], "arguments", function.get("arguments"))


def assemble_response(events: list[SseEvent]) -> Any:
    """A Responses API stream's last response snapshot (``response.completed`` carries the
    whole response; an abandoned stream's is the latest it reached)."""
    final = None
    for event in _objects(events):
        if isinstance(event.get("response"), dict):
            final = event["response"]
    return final


def assemble_message(events: list[SseEvent]) -> dict[str, Any] | None:
    """The Anthropic ``Message`` a stream builds: ``message_start``'s message, each content
    block from its start and deltas (text, tool input JSON, thinking), ``message_delta``'s
    stop reason and usage."""
    message: dict[str, Any] | None = None
    blocks: list[dict[str, Any]] = []
    partial_json: dict[int, str] = {}
    for event in _objects(events):
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message, blocks = dict(event["message"]), []
            continue
        if message is None:
            continue
        index = event.get("index")
        if not isinstance(index, int) or not 0 <= index < len(blocks):
            index = None  # a block never started: what is said of it is skipped
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta" and index is not None:
            delta = _object(event.get("delta"))
            block = blocks[index]
            if delta.get("type") == "input_json_delta":
                partial_json[index] = partial_json.get(index, "") + str(delta.get("partial_json"))
            for field in ("text", "thinking"):
                _append(block, field, delta.get(field))
            if delta.get("type") == "signature_delta":
                block["signature"] = delta.get("signature")
            elif delta.get("type") == "citations_delta":  # as the SDK adds it to a text block
                block["citations"] = [*_list(block.get("citations")), delta.get("citation")]
        elif kind == "content_block_stop" and index in partial_json:
            with contextlib.suppress(*JSON_DECODE_ERRORS):  # a cut input stays as it started
                blocks[index]["input"] = msgspec.json.decode(partial_json.pop(index))
        elif kind == "message_delta":
            message.update(_object(event.get("delta")))
            if isinstance(event.get("usage"), dict):
                message["usage"] = {**_object(message.get("usage")), **event["usage"]}
    if message is None:
        return None
    return {**message, "content": blocks}  # the blocks built here, whatever a delta said


_NOT_JSON: Any = object()


def _python_json(raw: bytes | str) -> Any:
    """``raw`` as Python's ``json`` (the SDK's parser) reads it, or :data:`_NOT_JSON`."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and bad UTF-8 are ValueErrors
        return _NOT_JSON


ASSEMBLERS: dict[str, Assembler] = {
    "model:openai:chat.completions": assemble_chat,
    "model:openai:responses": assemble_response,
    "model:anthropic:messages": assemble_message,
}
"""Which assembler builds the final message of a stream, by the decision's key."""


def assembler_for(key: str) -> Assembler | None:
    """The assembler of a stream whose decision is ``key`` (unnumbered): by the key, or by
    its provider and the operation it ends with, for a path with a prefix of its own (Azure
    keys a chat completion under its deployment:
    ``model:openai:deployments.NAME.chat.completions``)."""
    found = ASSEMBLERS.get(key)
    if found is not None:
        return found
    for known, assembler in ASSEMBLERS.items():
        provider, _, operation = known.rpartition(":")
        if key.startswith(f"{provider}:") and key.endswith(f".{operation}"):
            return assembler
    return None
