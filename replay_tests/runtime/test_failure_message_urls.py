"""A recorded failure's message keeps no credential of a URL it quotes (ADR 0024).

A tool or a decision that fails with an HTTP client's error records ``str(error)``, which
quotes the request's URL: ``Server error '503 Service Unavailable' for url
'https://api.example.com/weather?q=Paris&key=...'``. The same request sent through loom's
transport is stored without its credential query parameters and userinfo, but the failure's
message kept them, in clear, since no pattern of the redactor knows a bare ``key=`` (an
attack review of capture). A URL in a failure message is stored as a request's URL is.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from loom_runtime import FlowContext, Loom, tool

SECRET = "9f3b2c71d4e8a6b05c1d2e3f4a5b6c7d"


def _stored(path: Path) -> bytes:
    """The database file and its write-ahead log, as bytes: what an attacker with the file has."""
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _down(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"error": "busy"})


@tool
def weather(city: str) -> object:
    with httpx.Client(transport=httpx.MockTransport(_down)) as client:
        url = f"https://user:{SECRET}P@api.example.com/weather"
        response = client.get(url, params={"q": city, "key": f"{SECRET}K"})
        response.raise_for_status()
        return response.json()


@pytest.mark.parametrize("where", ["tool", "decide", "flow"])
def test_a_failure_quoting_a_url_is_stored_without_its_credentials(
    tmp_path: Path, where: str
) -> None:
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}") as loom:

        @loom.flow("forecast")
        def forecast(ctx: FlowContext, city: str) -> object:
            if where == "flow":
                return weather.__wrapped__(city)  # the flow itself fails with the error
            try:
                if where == "tool":
                    return weather(city)
                return ctx.decide("weather", lambda: weather.__wrapped__(city))
            except httpx.HTTPStatusError:
                return "unavailable"

        try:
            run = loom.run("forecast", city="Paris")
        except httpx.HTTPStatusError:
            [summary] = loom.executions()
            execution_id = summary.execution_id
        else:
            execution_id = run.execution_id
        execution = loom.execution(execution_id)
        messages = [d.message for d in execution.decisions.values() if d.message] + [
            execution.error[1] if execution.error else ""
        ]
        assert any("api.example.com/weather?q=Paris" in m for m in messages), messages
        assert loom.replay(execution_id).identical
    stored = _stored(path)
    assert b"api.example.com/weather?q=Paris" in stored  # the control: the message is stored
    assert SECRET.encode() not in stored
