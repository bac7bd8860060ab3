"""httpx transports that record each request a flow makes as a decision of kind ``"http"``.

``httpx.Client(transport=loom_runtime.transport())`` (and ``AsyncClient`` with
:func:`async_transport`) is how an SDK loom does not wrap by name is recorded: any client that
accepts an ``http_client`` sends its requests through it (ADR 0024).

Inside a running flow (:func:`~loom_runtime.context.recorder`) a request is an
:class:`~loom_runtime.context.OpenDecision`:

* the key names the call, ``http:<METHOD> <host[:port]><path>``: never the query string or
  credentials; the flow context numbers a repeated key (``#2``) in program order;
* the input is the canonical request: method, URL without userinfo or query, the query
  parameters, the headers and the body (JSON when it parses, else text, else bytes). Headers
  and parameters that carry credentials, or that the log's redactor flags, are never part of
  it, nor are the headers that describe the client software or the connection rather than the
  request (so upgrading an SDK does not make every replay diverge);
* the value is the response (:class:`RecordedResponse`), stored when its body has been read
  to the end, or when it is closed before that (``complete=False``, with what was read). The
  caller receives the body as it arrives, so a streamed response streams live.

A recorded key answers from the log with a response rebuilt from it, and the inner transport
is never called. A transport error is recorded as the decision's failure and raised again on
replay as the same ``httpx`` error. Outside a flow, a request goes straight to the inner
transport, and so does one that another recording transport is already sending (a user's
transport between two of loom's): a request is recorded once, by the outermost.

The exchange is shared with wrapped SDK clients (ADR 0025): a :class:`Profile` says what a
decision stores (``http``: :class:`RecordedResponse`; ``model``: :mod:`loom_runtime.providers`)
and whether transient failures are retried inside it. The transport and body classes are made
per httpx-compatible package (:func:`library`: ``httpx`` or its fork ``httpx2``), since a
client accepts only its own package's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from operator import attrgetter, methodcaller
from types import ModuleType
from typing import Annotated, Any, Final, NamedTuple, NoReturn, Protocol

import msgspec

from loom_runtime.backoff import Attempt, Backoff
from loom_runtime.context import (
    REFUSALS,
    AsyncFlowContext,
    FlowContext,
    OpenDecision,
    cancelling,
    current_context,
    note_finding,
    raised_again,
    rebuild_error,
    recorder,
    replay_wait,
)
from loom_runtime.driver import Pending, Steps, adrive, drive
from loom_runtime.errors import (
    MissingExtraError,
    OverrideTypeError,
    ReadPastRecordingError,
    RecordedValueError,
)
from loom_runtime.execution import Decision, error_message_of, error_type_of
from loom_runtime.http_request import (
    KIND,
    credential_header,
    path_without_secrets,
    request_key_and_input,
    url_without_credentials,
)
from loom_runtime.recorded_order import bounded_wait, step_timer
from loom_runtime.redaction import Redactor

try:
    import httpx
except ImportError as exc:  # the http extra is not installed
    raise MissingExtraError(
        extra="http", missing="httpx", needed_by="recording HTTP (loom_runtime.transport)"
    ) from exc

RESPONSE_HEADERS_NOT_STORED = frozenset({"set-cookie", "content-encoding"})
"""``set-cookie`` is a credential; the body is stored decoded, so its encoding no longer
describes it (nor its ``content-length``, then: :func:`stored_headers`)."""


class BodyFailure(msgspec.Struct, frozen=True, kw_only=True):
    """What reading a response's body raised after the part stored (a connection cut
    mid-stream): its class as ``module:qualname`` and its message, as a decision's failure
    is recorded, and rebuilt the same way (:func:`~loom_runtime.context.rebuild_error`)."""

    error_type: str
    message: str


class RecordedResponse(msgspec.Struct, frozen=True, kw_only=True):
    """An HTTP response as the log keeps it.

    The body is decoded (no ``content-encoding``) and stored as ``text`` when it is UTF-8,
    else as ``data`` (bytes, base64 in the JSON): either way byte for byte. ``chunks`` are the
    sizes of the pieces it arrived in, so a replay hands the caller the same pieces.
    ``complete`` is false when the caller closed the response before reading it to the end;
    the body is then what was read.
    """

    status: int
    headers: list[tuple[str, str]]
    text: str | None = None
    data: bytes | None = None
    chunks: list[Annotated[int, msgspec.Meta(ge=0)]] = msgspec.field(default_factory=list)
    """Never below 0: a negative size stepped back over the body, so a replay handed the client
    text the stored body (what an audit shows) does not hold."""
    complete: bool = True
    cancelled_after: Annotated[float, msgspec.Meta(ge=0)] | None = None
    """Set when the flow cancelled the read (a timeout around it) while it waited for more:
    seconds from the request to the cancellation. A replay then waits after the body, for the
    flow's timeout to cancel it again (:func:`~loom_runtime.context.replay_wait`)."""
    failed: BodyFailure | None = None
    """Set when reading the body failed after what is stored (the connection cut): a replay
    hands out the stored pieces, then raises it, where the live caller got it."""

    def pieces(self) -> list[bytes]:
        """The body in the pieces it arrived in. A body the redactor shortened or lengthened
        no longer fits the sizes: what is left after them is one more piece."""
        body = self.text.encode("utf-8") if self.text is not None else self.data or b""
        pieces, start = [], 0
        for size in self.chunks:
            pieces.append(body[start : start + size])
            start += size
        pieces.append(body[start:])
        return [piece for piece in pieces if piece]


HTTP_PACKAGES = ("httpx", "httpx2")
"""The httpx-compatible packages a recording transport can be made for (:func:`library`)."""

RETRIED_STATUSES = frozenset({408, 409, 429})
"""Statuses a profile with a retry policy retries (and every 5xx): a timeout, a conflict, a
rate limit and a server error say "ask again later", not "this request is wrong"."""

MESSAGE_LIMIT = 500
"""Characters of a refused attempt's body kept in its :class:`Attempt` (enough for the
provider's error message, not a whole HTML error page)."""


class Recording(Protocol):
    """A live response's body as the caller reads it, stored once: when it ends, when it is
    closed before that, or as a failure when reading it fails."""

    headers: list[tuple[str, str]]

    def add(self, chunk: bytes) -> None: ...

    def finish(self, *, complete: bool) -> None: ...

    def cancel(self) -> None:
        """The flow cancelled the read while it waited for more (a timeout around it): what was
        read is stored, marked cancelled, once the flow goes on (``OpenDecision.defer``), with
        where in the run the cut came (``OpenDecision.cut_point``)."""
        ...

    def raised(self, cancelled: asyncio.CancelledError) -> None:
        """The read raised ``cancelled`` itself (a stream closed upstream), not the flow's
        timeout: what was read and that error are stored once the flow goes on, and a replay
        raises it there again at once (ADR 0026, amended "raised, not cut")."""
        ...

    def fail(self, error: Exception) -> Exception:
        """Store the failure; returns the error the caller sees (``error`` or a loom error)."""
        ...


class Profile(Protocol):
    """What one kind of recorded HTTP call stores: its key and input, its value, its retries.

    Sending, retrying, recording a body as it streams and replaying are the same for every
    call (:func:`_exchange`); a profile says what the decision holds. ``http`` keeps the raw
    response (:class:`HttpProfile`); ``model`` keeps a provider's JSON or its parsed event
    stream (:mod:`loom_runtime.providers`).
    """

    @property
    def kind(self) -> str:
        """The decisions' kind."""
        ...

    @property
    def retry(self) -> Backoff | None:
        """How a transient failure is retried inside the decision (None: not at all)."""
        ...

    @property
    def retry_outside(self) -> Backoff | None:
        """How a transient failure is retried outside any flow (None: sent once, as is)."""
        ...

    def buffered(self, response: httpx.Response) -> bool:
        """Whether ``response``'s body is read whole before the caller gets it (inside the
        retries: a cut body is then retried) rather than handed on as it arrives."""
        ...

    def key_and_input(
        self, request: httpx.Request, redactor: Redactor | None
    ) -> tuple[str, object]: ...

    def replayed(self, key: str, value: Any) -> Replayed:
        """The response rebuilt from a recorded value (plain JSON data, untrusted)."""
        ...

    def recording(
        self, decision: OpenDecision, response: httpx.Response, call: Call
    ) -> Recording: ...


_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("loom_http_sending", default=False)
"""True while a recording transport sends a request live: a recording transport reached
beneath it (a wrapped client wrapped again, a client over :func:`transport` wrapped, or a
user's transport around :func:`transport` under a wrapped client) passes the request on
instead of recording it again. A request is recorded once, by the outermost
recording transport, whatever lies between the two; a replay answers it there and never
reaches the inner one, which would otherwise hold a decision no replay asks for."""


def _named(request: httpx.Request) -> str:
    """A request as a warning names it: method, host and path (never the query, nor a secret
    in the path: credentials)."""
    url = request.url
    return f"{request.method} {url.host}{path_without_secrets(url.host, url.path)}"


class _RecordingTransport:
    """Records each request made inside a flow; passes requests outside one (or inside
    another recording transport's send, :data:`_SENDING`) to ``inner``.

    Made a transport of its package by :func:`library` (an SDK on httpx2 refuses an httpx
    transport, and the reverse)."""

    def __init__(self, inner: httpx.BaseTransport, profile: Profile, library: Library) -> None:
        self._inner = inner
        self._profile = profile
        self._library = library

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if _SENDING.get():
            return self._inner.handle_request(request)
        ctx = recorder(_named(request))
        if ctx is None:  # outside a flow, or a part of a decision computed live
            retry = self._profile.retry_outside
            if retry is None:
                return self._inner.handle_request(request)
            request.read()  # sent again on a retry
            call = Call(retry, self._library)
            steps = _attempts(
                lambda: self._inner.handle_request(request),
                _SYNC,
                call,
                "request",
                self._profile.buffered,
            )
            return drive(steps, _never_pending)
        request.read()

        def send() -> httpx.Response:
            sending = _SENDING.set(True)
            try:
                return self._inner.handle_request(request)
            finally:
                _SENDING.reset(sending)

        steps = _exchange(ctx, request, send, _SYNC, self._profile, self._library)
        return drive(steps, _never_pending)

    def close(self) -> None:
        self._inner.close()


class _AsyncRecordingTransport:
    """The async twin of :class:`_RecordingTransport`, for an ``AsyncClient``."""

    def __init__(self, inner: httpx.AsyncBaseTransport, profile: Profile, library: Library) -> None:
        self._inner = inner
        self._profile = profile
        self._library = library

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if _SENDING.get():
            return await self._inner.handle_async_request(request)
        ctx = recorder(_named(request))
        if ctx is None:  # outside a flow, or a part of a decision computed live
            retry = self._profile.retry_outside
            if retry is None:
                return await self._inner.handle_async_request(request)
            await request.aread()  # sent again on a retry
            call = Call(retry, self._library)
            inner = self._inner
            return await adrive(
                _attempts(
                    lambda: inner.handle_async_request(request),
                    _ASYNC,
                    call,
                    "request",
                    self._profile.buffered,
                )
            )
        await request.aread()

        async def send() -> httpx.Response:
            sending = _SENDING.set(True)
            try:
                return await self._inner.handle_async_request(request)
            finally:
                _SENDING.reset(sending)

        return await adrive(_exchange(ctx, request, send, _ASYNC, self._profile, self._library))

    async def aclose(self) -> None:
        await self._inner.aclose()


def transport(inner: httpx.BaseTransport | None = None) -> httpx.BaseTransport:
    """A transport for ``httpx.Client(transport=...)`` that records requests made in a flow.

    ``inner`` sends what is not answered from the log (default: ``httpx.HTTPTransport()``).
    An ``httpx2`` transport as ``inner`` makes it one for an ``httpx2.Client`` (the package
    current OpenAI and Anthropic SDKs send through).
    """
    inner = inner if inner is not None else httpx.HTTPTransport()
    return library(http_package(type(inner), "BaseTransport")).transport(inner, HTTP)


def async_transport(inner: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncBaseTransport:
    """As :func:`transport`, for ``httpx.AsyncClient(transport=...)``."""
    inner = inner if inner is not None else httpx.AsyncHTTPTransport()
    return library(http_package(type(inner), "AsyncBaseTransport")).async_transport(inner, HTTP)


def http_package(cls: type, base: str) -> ModuleType:
    """The httpx-compatible package (``httpx``, ``httpx2``) whose class ``base`` (``Client``,
    ``BaseTransport``...) ``cls`` extends; ``httpx`` when neither's does. Found by identity,
    not by ``__module__``, which SDKs rewrite on the classes they re-export."""
    for name in HTTP_PACKAGES:
        package = sys.modules.get(name)
        if package is not None and issubclass(cls, getattr(package, base)):
            return package
    return httpx


class Call:
    """One live call: when it started and the attempts it retried, for the decision's meta,
    and the HTTP library it speaks (whose errors are its transport errors)."""

    def __init__(self, retry: Backoff | None, library: Library) -> None:
        self.library = library
        self.started = time.perf_counter()
        self.attempts: list[Attempt] = []
        self._retry = retry
        self._pauses = retry.pauses() if retry is not None else iter(())

    def pause(self, *, asked: float | None) -> float | None:
        """The pause before the next attempt, or None when no attempt is left."""
        planned = next(self._pauses, None)
        if planned is None or self._retry is None:
            return None
        return self._retry.pause(planned, asked=asked)

    def retried(self, *, error: str, message: str, paused: float) -> None:
        self.attempts.append(Attempt(error=error, message=message[:MESSAGE_LIMIT], paused=paused))

    def meta(self) -> dict[str, object]:
        """The attempts retried before the outcome (nothing when there were none)."""
        if not self.attempts:
            return {}
        return {
            "attempts": [msgspec.to_builtins(attempt) for attempt in self.attempts],
            "retries": len(self.attempts),
        }


def _exchange(
    ctx: FlowContext | AsyncFlowContext,
    request: httpx.Request,
    send: Callable[[], Any],
    io: _Io,
    profile: Profile,
    library: Library,
) -> Steps[httpx.Response]:
    """One request as a decision, for either twin: the recorded response, or the live one
    with a body that records itself (``send`` returns an awaitable in the async twin).

    With a retry policy, a transport error or a refusal that says "later" (429, 5xx...) is
    retried inside the one decision, each attempt kept for its meta; the last outcome (a
    response, even a final 429, or the error) is what is recorded.
    """
    key, request_input = profile.key_and_input(request, ctx.redactor)
    if io is _SYNC:
        decision = ctx.open_decision(key, input=request_input, kind=profile.kind)
    else:  # handed out in its recorded turn: calls made together end as they did live; one
        # recorded as cancelled (a timeout around it) waits there for the flow's timeout
        decision = yield from ctx.open_decision_in_turn(key, input=request_input, kind=profile.kind)
    if decision.recorded:
        try:
            recorded = profile.replayed(decision.key, decision.value)
        except RecordedValueError as exc:
            if not ctx.overridden(decision.key):
                raise
            raise OverrideTypeError(
                key=decision.key, type=exc.expected, problem=exc.problem
            ) from exc
        # A read cancelled live ends its replayed body where it was cancelled, whole or not;
        # one the connection cut raises there what the live read raised.
        failure = None if recorded.failed is None else _rebuilt(decision.key, recorded.failed)
        cut = (
            None
            if failure is not None or (recorded.complete and recorded.cancelled_after is None)
            else decision.key
        )
        body = library.replayed_body(recorded.pieces, cut, recorded.cancelled_after, failure)
        return library.respond(recorded.status, recorded.headers, body)
    call = Call(profile.retry, library)
    try:
        response = yield from _attempts(send, io, call, decision.key, profile.buffered)
    except Exception as exc:
        decision.fail(exc, meta=call.meta())
        raise
    except asyncio.CancelledError as cancelled:  # stored if the flow goes on
        decision.ended_in(cancelled, time.perf_counter() - call.started, meta=call.meta())
        raise
    if call.attempts:
        # What the retries kept must be storable before the body is handed out: an
        # attempt's refusal text naming a secret under mode="refuse" refused the answer's
        # meta once the body was read, and nothing was stored. The refusal is the outcome,
        # as a compute's is (ADR 0026, amended "refused failures, reviewed").
        try:
            decision.encode_meta(call.meta())
        except REFUSALS as refused:
            with contextlib.suppress(Exception):
                yield from _settle(decision.key, io.read(response))  # frees the connection
            decision.fail(refused)
            raise
    recording = profile.recording(decision, response, call)
    # A stream the flow leaves open is stored, as read so far, before the execution ends.
    decision.at_end = functools.partial(recording.finish, complete=False)
    body = io.body(library)(response, recording)
    return library.respond(response.status_code, recording.headers, body)


def _rebuilt(key: str, failed: BodyFailure) -> BaseException:
    """The error a body's read raised live, rebuilt as a recorded decision's failure is (a
    ``CancelledError`` it raised itself as that class)."""
    rebuilt = rebuild_error(
        Decision(key, KIND, _NO_INPUT, error_type=failed.error_type, message=failed.message)
    )
    return raised_again(rebuilt, key)


_NO_INPUT = msgspec.Raw(b"null")


def _attempts(
    send: Callable[[], Any],
    io: _Io,
    call: Call,
    what: str,
    buffered: Callable[[httpx.Response], bool] = lambda response: False,
) -> Steps[httpx.Response]:
    """Send until a response that is not a refusal saying "later", or until ``call``'s policy
    has no attempt left: its last response, or the error that ended it. A transport error is
    retried; any other error, and a refusal with no attempt left, ends the call.

    A response ``buffered`` says is read whole (not a stream) is read here, so a body the
    connection cuts is retried like a dropped connection, as the SDK retries it unwrapped."""
    while True:
        try:
            response = yield from _settle(what, send())
            status = response.status_code
            if status not in RETRIED_STATUSES and status < 500 and buffered(response):
                yield from _settle(what, io.read(response))
        except Exception as exc:
            transient = isinstance(exc, call.library.transport_error)
            pause = call.pause(asked=None) if transient else None
            if pause is None:
                raise
            call.retried(error=_qualname(exc), message=str(exc), paused=pause)
        else:
            if status not in RETRIED_STATUSES and status < 500:
                return response
            pause = call.pause(asked=_asked_pause(response.headers))
            if pause is None:
                return response
            try:  # the refusal's text, for the audit (and to free the connection)
                read = yield from _settle(what, io.read(response))
                message = bytes(read).decode("utf-8", "replace")
            except call.library.transport_error as exc:
                message = str(exc)
            call.retried(error=f"http {status}", message=message, paused=pause)
        yield from _settle(what, io.sleep(pause))


def _settle(what: str, value: Any) -> Steps[Any]:
    """``value``, awaited first when the async twin returned an awaitable."""
    if inspect.isawaitable(value):
        value = yield Pending(what, value)
    return value


def _asked_pause(headers: httpx.Headers) -> float | None:
    """The pause a refusal asked for: ``retry-after-ms`` (OpenAI, Anthropic) or
    ``retry-after`` in seconds; None when neither is a number (an HTTP date is not honoured:
    the planned pause is taken)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, ValueError):
            continue
    return None


def _qualname(error: Exception) -> str:
    return f"{type(error).__module__}:{type(error).__qualname__}"


def replayed(
    key: str, value: object, type: Any, *, expected: str, not_stored: frozenset[str]
) -> Replayed:
    """A recorded value (plain JSON data) as the response ``type`` (a :class:`RecordedResponse`
    or a model response) a replay hands the client.

    A value that does not fit ``type``, or that holds a header the recording never stores
    (``not_stored``), was not written by loom's recording (a tampered row or bundle): a typed
    error naming the key. Such a header is refused, not dropped: ``content-encoding`` would
    make the client inflate the recorded body (a small row, gigabytes in memory),
    ``set-cookie`` would fill its cookie jar. A ``content-length`` is handed back as the
    stored body's length (:func:`_replayed_length`).
    """
    try:
        recorded = msgspec.convert(value, type)
    except msgspec.ValidationError as exc:
        raise RecordedValueError(key=key, expected=expected, problem=str(exc)) from exc
    headers = list(recorded.headers)
    for index, (name, header) in enumerate(headers):
        if name.lower() in not_stored:
            problem = f"it holds the header {name!r}, which a recording never stores"
            raise RecordedValueError(key=key, expected=expected, problem=problem)
        if name.lower() == "content-length":
            headers[index] = (name, _replayed_length(key, expected, header, recorded))
    return Replayed(
        recorded.status,
        headers,
        recorded.pieces(),
        recorded.complete,
        recorded.cancelled_after,
        getattr(recorded, "failed", None),  # a model response keeps none (its failure is)
    )


def _replayed_length(key: str, expected: str, value: str, recorded: Any) -> str:
    """A recorded ``content-length`` as a replay hands it back: the stored body's length for a
    whole body (the redactor may have made it shorter or longer than the one the server
    measured, so a recording holds the server's), as recorded for none (a HEAD's, a 304's)
    or a body read only in part. One that is no number was not recorded: refused."""
    if not value.isdigit():
        problem = f"its content-length {value!r} is no length"
        raise RecordedValueError(key=key, expected=expected, problem=problem)
    stored = sum(map(len, recorded.pieces()))
    partial = not recorded.complete or getattr(recorded, "failed", None) is not None
    return value if stored == 0 or partial else str(stored)


class HttpProfile:
    """The ``http`` profile: the raw response, byte for byte (ADR 0024); no retries (an SDK's
    own retries are each a request, so each a decision)."""

    kind = KIND
    retry: Backoff | None = None
    retry_outside: Backoff | None = None

    def buffered(self, response: httpx.Response) -> bool:
        """Never: the raw body reaches the caller as it arrives (ADR 0024)."""
        return False

    def key_and_input(
        self, request: httpx.Request, redactor: Redactor | None
    ) -> tuple[str, object]:
        return request_key_and_input(request, redactor)

    def replayed(self, key: str, value: Any) -> Replayed:
        return replayed(
            key,
            value,
            RecordedResponse,
            expected="a recorded HTTP response",
            not_stored=RESPONSE_HEADERS_NOT_STORED,
        )

    def recording(self, decision: OpenDecision, response: httpx.Response, call: Call) -> Recording:
        return _Recording(decision, response, call)


HTTP = HttpProfile()


def stored_headers(
    response: httpx.Response, not_stored: frozenset[str] = RESPONSE_HEADERS_NOT_STORED
) -> list[tuple[str, str]]:
    """A response's headers as the caller receives them (and, with :func:`headers_to_store`,
    as a decision stores them). ``content-length`` is kept unless the body was encoded: the
    stored body is then decoded and the length no longer its; left out always, a HEAD
    request's or a download's size was missing inside a flow only."""
    dropped = not_stored | _ENCODED_LENGTH if "content-encoding" in response.headers else not_stored
    return [
        (name.lower(), value)
        for name, value in response.headers.multi_items()
        if name.lower() not in dropped
    ]


_ENCODED_LENGTH: Final = frozenset({"content-length"})


URL_HEADERS = frozenset({"location", "content-location"})
"""Response headers holding a URL, stored without its credential query parameters (and
``link``, whose ``<URL>`` parts are)."""
_LINKED = re.compile(r"<([^<>]*)>")


CREDENTIAL_HEADER_MARK = "[REDACTED:credential-header]"
"""What a response header named as a credential (:func:`credential_header`: a login's
``x-subject-token``, an ``x-auth-token``, an STS ``x-amz-security-token``) is stored as."""


def headers_to_store(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` as a decision stores them: a URL a response names (a redirect to a
    presigned download) without its signature, a credential header's value as
    :data:`CREDENTIAL_HEADER_MARK`. The live caller gets the whole URL (its client follows
    it) and the credential (it logs in with it); a replay follows the stored URL, whose
    request is keyed and compared without those parameters all the same
    (:func:`request_key_and_input`), and gets the header with the marker, as a value the
    redactor marked replays marked (the header stays: code that reads it does not fail)."""
    return [(name, _stored_header(name, value)) for name, value in headers]


def _stored_header(name: str, value: str) -> str:
    """One response header's value as :func:`headers_to_store` stores it."""
    if credential_header(name):
        return CREDENTIAL_HEADER_MARK
    if name in URL_HEADERS:
        return url_without_credentials(value)
    if name == "link":  # its ``<URL>`` parts
        return _LINKED.sub(lambda url: f"<{url_without_credentials(url[1])}>", value)
    return value


class _Recording:
    """The ``http`` profile's recording: the body's bytes, in the pieces they arrived in."""

    def __init__(self, decision: OpenDecision, response: httpx.Response, call: Call) -> None:
        self.headers = stored_headers(response)
        self._decision = decision
        self._started = call.started
        self._status = response.status_code
        self._chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    def finish(self, *, complete: bool) -> None:
        """Store the response with what was read (once: a later call does nothing)."""
        if not self._decision.settled:
            self._decision.record(self._value(complete=complete))

    def cancel(self) -> None:
        cancelled_after = round(time.perf_counter() - self._started, 3)
        value = self._value(complete=False, cancelled_after=cancelled_after)
        self._decision.defer(value, meta=self._decision.cut_point())

    def raised(self, cancelled: asyncio.CancelledError) -> None:
        failed = BodyFailure(
            error_type=error_type_of(cancelled),
            message=self._decision.stored_message(error_message_of(cancelled)),
        )
        self._decision.defer(self._value(complete=False, failed=failed))

    def _value(
        self,
        *,
        complete: bool,
        cancelled_after: float | None = None,
        failed: BodyFailure | None = None,
    ) -> RecordedResponse:
        body = b"".join(self._chunks)
        try:
            text, data = body.decode("utf-8"), None
        except UnicodeDecodeError:
            text, data = None, body
        return RecordedResponse(
            status=self._status,
            headers=headers_to_store(self.headers),
            text=text,
            data=data,
            chunks=[len(chunk) for chunk in self._chunks],
            complete=complete,
            cancelled_after=cancelled_after,
            failed=failed,
        )

    def fail(self, error: Exception) -> Exception:
        """The response as read, and what reading it raised after (a connection cut
        mid-stream), stored as the decision's value: a caller that kept the chunks before the
        cut gets them again on replay, then the error (ADR 0024, amended "cut body")."""
        if not self._decision.settled:
            failed = BodyFailure(error_type=error_type_of(error), message=error_message_of(error))
            self._decision.record(self._value(complete=False, failed=failed))
        return error


class _SyncBody:
    """The live body: each decoded chunk passed on as it arrives, and recorded."""

    def __init__(self, response: httpx.Response, recording: Recording) -> None:
        self._response = response
        self._recording = recording
        # One reader of the live body, however often it is iterated: an SDK that stops at
        # its stream's last event and then drains the rest iterates it a second time.
        self._chunks = response.iter_bytes()

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._chunks:
                self._recording.add(chunk)
                yield chunk
        except Exception as exc:
            raised = self._recording.fail(exc)
            if raised is exc:
                raise
            raise raised from exc
        self._recording.finish(complete=True)

    def close(self) -> None:
        try:
            self._response.close()
        finally:
            self._recording.finish(complete=False)


class _AsyncBody:
    """The async twin of :class:`_SyncBody`."""

    def __init__(self, response: httpx.Response, recording: Recording) -> None:
        self._response = response
        self._recording = recording
        self._chunks = response.aiter_bytes()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._chunks:
                self._recording.add(chunk)
                yield chunk
        except Exception as exc:
            raised = self._recording.fail(exc)
            if raised is exc:
                raise
            raise raised from exc
        except asyncio.CancelledError as cancelled:  # stored if the flow goes on
            if cancelling():  # a timeout around the read
                self._recording.cancel()
            else:  # the read raised it itself
                self._recording.raised(cancelled)
            raise
        self._recording.finish(complete=True)

    async def aclose(self) -> None:
        try:
            await self._response.aclose()
        finally:
            self._recording.finish(complete=False)


class _ReplayedBody:
    """A recorded body, handed out in the pieces it arrived in, to a sync or async client.

    One reader, however often it is iterated, as the live body (:class:`_SyncBody`) has: a
    second iteration (an SDK draining a stream it stopped reading) continues where the first
    stopped instead of starting over, or an unchanged flow would read a piece twice.

    A body the live caller closed early (``cut``: its decision's key) ends where that caller
    stopped reading, not where the response ended: a reader asking for more than that gets
    :class:`ReadPastRecordingError`, never the part passed off as the whole. A reader that
    stops where the live one did (and closes) never asks.

    A read the live flow cancelled while it waited for more (``cancelled_after``: a timeout
    around the read) waits there again, unanswered, for the flow's own timeout to cancel it;
    if nothing does within :func:`~loom_runtime.context.replay_wait`'s bound, the replay
    took another path and the read fails as one past the recording.
    """

    def __init__(
        self,
        pieces: list[bytes],
        cut: str | None,
        cancelled_after: float | None,
        failure: BaseException | None = None,
    ) -> None:
        self._pieces = iter(pieces)
        self._cut = cut
        self._cancelled_after = cancelled_after
        self._failure = failure
        """What the live read raised after the last piece (a connection cut), raised there."""

    def __iter__(self) -> Iterator[bytes]:
        yield from self._pieces
        self._ended()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece
        if self._cancelled_after is not None and self._cut is not None:
            bound = replay_wait(self._cancelled_after)
            ctx = current_context()  # a step's timer due later in the run: waited for too
            until = None if ctx is None else ctx.cut_until(self._cut)
            more = None if until is None else step_timer(until)
            # Ended by a frozen clock too (freezegun's tick=False), where a sleep hung.
            await bounded_wait(asyncio.get_running_loop(), bound, more=more)
            raise note_finding(ReadPastRecordingError(key=self._cut, waited=bound))
        self._ended()

    def _ended(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._cut is not None:
            raise note_finding(ReadPastRecordingError(key=self._cut))


class Replayed(NamedTuple):
    """A recorded response as a profile rebuilds it: status, headers, body in pieces, and
    whether that body is whole (false: the live caller closed it before its end)."""

    status: int
    headers: list[tuple[str, str]]
    pieces: list[bytes]
    complete: bool
    cancelled_after: float | None = None
    failed: BodyFailure | None = None


class Library(NamedTuple):
    """The httpx-compatible package a client speaks: ``httpx``, or ``httpx2``, the fork with
    the same API the OpenAI and Anthropic SDKs moved to. A client checks that a response's
    body is its own package's byte stream, so a transport answers with that package's
    response and body classes (:func:`library`)."""

    response: Callable[..., httpx.Response]
    transport_error: type[Exception]
    sync_body: Callable[[httpx.Response, Recording], httpx.SyncByteStream]
    async_body: Callable[[httpx.Response, Recording], httpx.AsyncByteStream]
    replayed_body: Callable[
        [list[bytes], str | None, float | None, BaseException | None], httpx.SyncByteStream
    ]
    transport_class: Callable[[Any, Profile, Library], httpx.BaseTransport]
    async_transport_class: Callable[[Any, Profile, Library], httpx.AsyncBaseTransport]

    def respond(self, status: int, headers: list[tuple[str, str]], body: Any) -> httpx.Response:
        """A response of this package with ``headers`` as a recording holds them (text), for
        the live caller and a replay alike.

        Handed to the response as UTF-8 bytes, which the client decodes back to the same text
        (httpx tries ASCII, then UTF-8): given text, httpx encodes it as ASCII and a header
        that is not (a latin-1 filename, as servers send) would fail the call.
        """
        encoded = [(name.encode(), value.encode()) for name, value in headers]
        return self.response(status, headers=encoded, stream=body)

    def transport(self, inner: Any, profile: Profile) -> httpx.BaseTransport:
        """A recording transport of this package over ``inner`` (one of its transports)."""
        return self.transport_class(inner, profile, self)

    def async_transport(self, inner: Any, profile: Profile) -> httpx.AsyncBaseTransport:
        """The async twin of :meth:`transport`."""
        return self.async_transport_class(inner, profile, self)


@functools.cache
def library(module: ModuleType) -> Library:
    """The :class:`Library` of ``module`` (``httpx`` or ``httpx2``): loom's transports and
    body classes made subclasses of its own."""
    sync_stream, async_stream = module.SyncByteStream, module.AsyncByteStream
    return Library(
        response=module.Response,
        transport_error=module.TransportError,
        sync_body=type("SyncBody", (_SyncBody, sync_stream), {}),
        async_body=type("AsyncBody", (_AsyncBody, async_stream), {}),
        replayed_body=type("ReplayedBody", (_ReplayedBody, sync_stream, async_stream), {}),
        transport_class=type("RecordingTransport", (_RecordingTransport, module.BaseTransport), {}),
        async_transport_class=type(
            "AsyncRecordingTransport", (_AsyncRecordingTransport, module.AsyncBaseTransport), {}
        ),
    )


HTTPX = library(httpx)


class _Io(NamedTuple):
    """What differs between the twins besides sending: reading a refused response before
    retrying, pausing, and which live body the caller receives."""

    read: Callable[[httpx.Response], Any]
    sleep: Callable[[float], Any]
    body: Callable[[Library], Callable[[httpx.Response, Recording], Any]]


_SYNC = _Io(read=methodcaller("read"), sleep=time.sleep, body=attrgetter("sync_body"))
_ASYNC = _Io(read=methodcaller("aread"), sleep=asyncio.sleep, body=attrgetter("async_body"))


def _never_pending(pending: Pending) -> NoReturn:
    """A sync transport returns a response, never an awaitable."""
    raise TypeError(f"the inner transport of {pending.what!r} returned an awaitable")
