"""``wrap(client)``: an OpenAI or Anthropic client whose calls in a flow are decisions (ADR 0025).

``wrap(openai.OpenAI())`` returns a client of the same class, made with the SDK's own public
option ``with_options(http_client=..., max_retries=0)``: its own default HTTP client class
sends through the recording transport of ADR 0024 with the ``model`` profile
(:mod:`loom_runtime.providers`).
Inside a flow each call is a ``model`` decision; replay hands the SDK the recorded response,
and the SDK builds its own types from it (``ChatCompletion``, ``Message``, stream chunks, the
``.stream(...)`` helpers) with no network. Outside a flow the transport passes every request
through untouched. The SDK's retries are off because loom retries inside the decision
(``retry``), so the attempts are one decision, not one each; a client derived from the wrapped
one (``with_options``, ``copy``) is wrapped alike, a ``max_retries`` it is given counted by
loom's retries, not the SDK's.

The SDK is never imported here: a client is recognised by the ``module:qualname`` of its class
or of a base class (:data:`WRAPPERS`), so ``import loom_runtime`` stays free of SDKs.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from loom_runtime.backoff import Backoff
from loom_runtime.errors import UnsupportedClientError
from loom_runtime.http_transport import Library, http_package, library
from loom_runtime.providers import ModelProfile

C = TypeVar("C")

Wrapper = Callable[[Any, Backoff | None], Any]


def wrap(client: C, *, retry: Backoff | None = Backoff()) -> C:  # noqa: B008 (frozen)
    """``client``, recording each call made inside a flow as a ``model`` decision.

    Accepts ``openai.OpenAI``, ``openai.AsyncOpenAI``, ``anthropic.Anthropic``,
    ``anthropic.AsyncAnthropic`` and their subclasses (Azure's included) and returns a client
    of the same class (the SDK's ``with_options``); an ``mcp.ClientSession`` gives a
    :class:`~loom_runtime.mcp_session.RecordedSession` (:func:`wrap_session`). ``retry``
    retries 408, 409, 429, 5xx, timeouts and dropped connections inside the one decision
    (``None``: no retry); a stream is retried only before its first byte reached the caller.
    Outside a flow the same failures are retried as often as ``client`` would have (its
    ``max_retries``; the wrapped client's own is 0), pausing as ``retry`` does. A client
    derived from the wrapped one (``with_options``, ``copy``) records alike with its SDK
    retries off; given ``max_retries=N``, it retries N times, in a flow and outside, pausing
    as ``retry`` does.
    """
    for cls in type(client).__mro__:
        wrapper = WRAPPERS.get(f"{cls.__module__}:{cls.__qualname__}")
        if wrapper is not None:
            wrapped: C = wrapper(client, retry)
            return wrapped
    raise UnsupportedClientError(
        f"wrap() records openai.OpenAI, openai.AsyncOpenAI, anthropic.Anthropic and "
        "anthropic.AsyncAnthropic clients and mcp.ClientSession sessions, not a "
        f"{type(client).__module__}.{type(client).__qualname__}. For another httpx-based SDK "
        "pass it "
        "http_client=httpx.Client(transport=loom_runtime.transport()); record any other call "
        "with ctx.decide(key, compute, input=...)"
    )


def _sdk_client(provider: str, *, asynchronous: bool) -> Wrapper:
    """The wrapper of one provider's sync or async SDK client (same code, one profile)."""

    def wrapper(client: Any, retry: Backoff | None) -> Any:
        profile = ModelProfile(
            provider=provider,
            base_path=client.base_url.path,
            retry=retry,
            retry_outside=_retries(client.max_retries, retry),
        )
        return _wrapped(client, _sending(client, profile, retry, asynchronous=asynchronous))

    return wrapper


@dataclass(frozen=True)
class _Sending:
    """How a wrapped client sends: through loom's transport with ``profile`` over ``inner``,
    in an HTTP client of ``http_client_class`` with ``settings``. Kept for the clients derived
    from it (``with_options``, ``copy``), which send so too, over the same ``inner`` (its
    connection pool): :func:`_derived`."""

    profile: ModelProfile
    pauses: Backoff | None
    """``wrap``'s ``retry``: how a retry count given to a derived client pauses."""
    inner: Any
    package: Library
    http_client_class: Any
    settings: Mapping[str, Any]
    asynchronous: bool

    def http_client(self) -> Any:
        """A new HTTP client sending through a recording transport with :attr:`profile`."""
        made = self.package.async_transport if self.asynchronous else self.package.transport
        return self.http_client_class(transport=made(self.inner, self.profile), **self.settings)


def _sending(
    client: Any, profile: ModelProfile, pauses: Backoff | None, *, asynchronous: bool
) -> _Sending:
    """How ``client``, wrapped, sends: the SDK's own default HTTP client class (its
    timeouts, limits, redirects), through loom's transport over the transport ``client``
    would have used, from the httpx-compatible package the SDK is built on (httpx2 for
    current SDKs, httpx for older ones)."""
    sdk = sys.modules[type(client).__module__.partition(".")[0]]
    http_client_class = sdk.DefaultAsyncHttpxClient if asynchronous else sdk.DefaultHttpxClient
    base = "AsyncClient" if asynchronous else "Client"
    own = _own_http_client(client, base)
    http = http_package(type(own) if own is not None else http_client_class, base)
    if not issubclass(http_client_class, getattr(http, base)):
        # The user's client is of the other package (the SDK takes either): loom's client
        # and transports are of its package, whose requests its transport handles.
        http_client_class = getattr(http, base)
    if own is not None:
        inner: Any = _OwnTransport(own)
    else:
        inner = http.AsyncHTTPTransport() if asynchronous else http.HTTPTransport()
    settings = _settings(own) if own is not None else {}
    return _Sending(
        profile, pauses, inner, library(http), http_client_class, settings, asynchronous
    )


def _wrapped(client: Any, sending: _Sending) -> Any:
    """``client`` copied (the SDK's own ``copy``) to send as ``sending`` says, with the
    SDK's retries off, and its ``with_options``/``copy`` deriving wrapped clients."""
    made = type(client).copy(client, http_client=sending.http_client(), max_retries=0)
    return _deriving(made, sending)


def _deriving(client: Any, sending: _Sending) -> Any:
    """``client``, whose ``with_options`` and ``copy`` (the SDK's one method, under two names)
    are :func:`_derived`: set on the instance, so the client stays of the SDK's class."""
    client.with_options = client.copy = functools.partial(_derived, client, sending)
    return client


def _derived(client: Any, sending: _Sending, /, **options: Any) -> Any:
    """``client.with_options(**options)`` of a wrapped client, wrapped as it is.

    The SDK's own copy keeps loom's HTTP client but takes the ``max_retries`` given: the SDK
    retried again inside a flow, each attempt a decision of its own, and a replay handed back
    the recorded refusal and slept the SDK's pause again (ADR 0026: a replay neither retries
    nor pauses). The copy keeps ``max_retries=0``; a count given is loom's to retry, in a
    flow and outside, pausing as ``wrap``'s ``retry`` does (one HTTP client more, over the
    same connection pool). An HTTP client given is sent through as ``wrap`` sends through a
    client's own (ADR 0026, amended "derived clients")."""
    count = options.pop("max_retries", None)
    counted = isinstance(count, int) and not isinstance(count, bool)
    if counted:
        retries = _retries(count, sending.pauses)
        profile = dataclasses.replace(sending.profile, retry=retries, retry_outside=retries)
        sending = dataclasses.replace(sending, profile=profile)
    derived = type(client).copy(client, **options, max_retries=0)
    if options.get("http_client") is not None:  # the caller's own: loom's sends through it
        sending = _sending(
            derived, sending.profile, sending.pauses, asynchronous=sending.asynchronous
        )
    elif not counted:  # loom's HTTP client, shared as the SDK shares it
        return _deriving(derived, sending)
    return _wrapped(derived, sending)


def _retries(max_retries: int, retry: Backoff | None) -> Backoff | None:
    """How a wrapped client told to retry ``max_retries`` times retries: as many times,
    pausing as ``retry`` does (or by :class:`Backoff`'s defaults); None for 0. Outside a flow
    that is the count of the client it wraps, as the SDK would have retried; the wrapped
    client's own ``max_retries`` is 0, so that inside a flow loom retries within one decision
    (outside one, the transport retries in its place), and a client made with
    ``max_retries=0`` still sends once."""
    if max_retries < 1:
        return None
    pauses = retry if retry is not None else Backoff()
    return dataclasses.replace(pauses, attempts=max_retries + 1)


def _own_http_client(client: Any, base: str) -> Any:
    """``client``'s own HTTP client, for the wrapped client to send as it would: the user's
    ``http_client=`` (a proxy, a corporate CA, headers or a transport of their own, of either
    httpx package) or the SDK's default one (its connection pool, no second TLS context to
    build). None when the SDK keeps no such client where its generator puts it (``_client``);
    loom then sends through a default transport of the SDK's HTTP package."""
    own = getattr(client, "_client", None)
    if own is None or not hasattr(own, "_transport_for_url"):
        return None
    if isinstance(own, getattr(http_package(type(own), base), base)):  # ``base``: (Async)Client
        return own
    return None


def _settings(own: Any) -> dict[str, Any]:
    """What ``own`` applies to a request before its transport sees it (default headers,
    cookies, authentication, event hooks, redirects, timeout), for the wrapped client's HTTP
    client to apply alike: its transport is loom's, so only these decide what reaches
    ``own``'s transport. Not its default query parameters: a query is part of a model
    decision's input, so they would change every recording made without them (and store a
    parameter not known as a credential)."""
    return {
        "headers": own.headers,
        "cookies": own.cookies,
        "auth": own.auth,
        "event_hooks": own.event_hooks,
        "follow_redirects": own.follow_redirects,
        "max_redirects": own.max_redirects,
        "timeout": own.timeout,
        "trust_env": own.trust_env,
    }


class _OwnTransport:
    """Sends each request as ``client`` would: through the transport it picks for the URL
    (its mount for a proxy, else its own transport, with its TLS settings and pool). A
    recording transport of loom's among them passes the request on unrecorded, since the
    wrapped client's is already sending it (``http_transport._SENDING``).

    Closing the wrapped client closes ``client``, as closing a copy the SDK's
    ``with_options`` made closes the HTTP client the copies share."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def _for(self, request: Any) -> Any:
        return self._client._transport_for_url(request.url)

    def handle_request(self, request: Any) -> Any:
        return self._for(request).handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        return await self._for(request).handle_async_request(request)

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        await self._client.aclose()


def _mcp_session(session: Any, retry: Backoff | None) -> Any:
    """An MCP ``ClientSession``: its tool calls and resource reads (ADR 0028). ``retry`` does
    not apply: a tool call is not known to be safe to repeat, so it is recorded as it ended."""
    from loom_runtime.mcp_session import wrap_session  # only reached with mcp installed

    return wrap_session(session)


WRAPPERS: dict[str, Wrapper] = {
    "mcp.client.session:ClientSession": _mcp_session,
    "openai:OpenAI": _sdk_client("openai", asynchronous=False),
    "openai:AsyncOpenAI": _sdk_client("openai", asynchronous=True),
    "anthropic:Anthropic": _sdk_client("anthropic", asynchronous=False),
    "anthropic:AsyncAnthropic": _sdk_client("anthropic", asynchronous=True),
}
"""What ``wrap`` records, by the ``module:qualname`` of the client's class (or a base class):
one entry per SDK client class, so another client (an MCP session) is one more entry."""
