"""ADR 0024, amended: tracing and signing headers describe the telemetry, not the request.

Tracers add a fresh trace id to every outgoing request (W3C ``traceparent``, Sentry's
``sentry-trace`` and ``baggage``, Datadog, Zipkin B3, AWS X-Ray), before the transport sees
it, and are usually on in production and off in a test. Kept in the input, every replay of
such a request diverged. A header that is not tracing still diverges (the control).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import DecisionInputChangedError, Loom
from replay_tests.runtime.test_transport import Unreachable


def tracing() -> dict[str, str]:
    """What tracers add to one request: ids drawn afresh every time."""
    trace, span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return {
        "traceparent": f"00-{trace}-{span}-01",
        "tracestate": f"dd=s:1;t.tid:{span}",
        "baggage": f"sentry-trace_id={trace},sentry-environment=production",
        "sentry-trace": f"{trace}-{span}-1",
        "x-datadog-trace-id": str(uuid.uuid4().int % 10**19),
        "x-datadog-parent-id": str(uuid.uuid4().int % 10**19),
        "x-b3-traceid": trace,
        "b3": f"{trace}-{span}-1",
        "x-amzn-trace-id": f"Root=1-{trace[:8]}-{trace[8:]}",
        # Request signing (AWS SigV4, Azure Storage): its time, its body's hash, a request id
        # (the signature itself is a credential, left out as such). Review of 6 December.
        "x-amz-date": f"20261206T{uuid.uuid4().int % 240000:06d}Z",
        "x-amz-content-sha256": uuid.uuid4().hex * 2,
        "x-ms-date": f"Sun, 06 Dec 2026 {uuid.uuid4().int % 24:02d}:00:00 GMT",
        "x-ms-client-request-id": str(uuid.uuid4()),
        "date": f"Sun, 06 Dec 2026 {uuid.uuid4().int % 24:02d}:00:00 GMT",
    }


def build(url: str, inner: httpx.BaseTransport, *, traced: bool, tenant: str = "acme") -> Loom:
    loom = Loom(url)

    @loom.flow("call")
    def call(ctx: Any) -> Any:
        headers = {"x-tenant": tenant, **(tracing() if traced else {})}
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get("https://api.example/status", headers=headers).json()

    return loom


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


@pytest.mark.parametrize("traced_on_replay", [True, False])
def test_tracing_headers_do_not_make_a_replay_diverge(
    sqlite_url: str, traced_on_replay: bool
) -> None:
    """Recorded traced; replayed traced with other ids, or not traced at all: identical."""
    with build(sqlite_url, httpx.MockTransport(answer), traced=True) as loom:
        run = loom.run("call")
        (decision,) = loom.execution(run.execution_id).decisions.values()
    assert msgspec.json.decode(decision.input)["headers"] == {"accept": "*/*", "x-tenant": "acme"}
    with build(sqlite_url, Unreachable(), traced=traced_on_replay) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_changed_header_that_is_not_tracing_still_diverges(sqlite_url: str) -> None:
    with build(sqlite_url, httpx.MockTransport(answer), traced=True) as loom:
        run = loom.run("call")
    with build(sqlite_url, Unreachable(), traced=True, tenant="globex") as fresh:
        result = fresh.replay(run.execution_id)
    [finding] = result.divergences
    assert isinstance(finding, DecisionInputChangedError)
    assert '+    "x-tenant": "globex"' in finding.diff
