"""Credentials handed to a tool are stored as the HTTP path stores them (ADR 0028, amended).

A review of 6 December found MCP ``call_tool`` arguments and ``@tool`` arguments named as
credentials (``token``, ``auth``, ``secret``, ``private_key``, ``credentials``) stored in
clear, though the HTTP transport marks the same JSON fields; a resource URI's userinfo and
signing query parameters stored whole in the input, though the key leaves them out; and
``authorization``/``bearer`` fields in clear on every path. Each value below is opaque (no
redaction pattern knows it), so only the name can tell.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

import loom_runtime
from loom_runtime import Loom
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    from mcp import types
    from mcp.shared import exceptions
else:  # imported by the first test that uses them, not at collection (ADR 0031)
    types = deferred("mcp.types")
    exceptions = deferred("mcp.shared.exceptions")

pytestmark = pytest.mark.xdist_group("mcp-sdk")

NAMES = ["token", "auth", "secret", "session_token", "private_key", "credentials"]
NAMES += ["authorization", "bearer", "access_token", "apiKey"]


def opaque(where: str, name: str) -> str:
    return f"V{where}{sum(map(ord, name)) * 7919}qq"


class Session:
    """Stands in for an MCP ``ClientSession``: what the wrapper stores is its own input."""

    async def call_tool(self, name: str, arguments: Any = None, **_: Any) -> Any:
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    async def read_resource(self, uri: Any, **_: Any) -> Any:
        contents = [types.TextResourceContents(uri=str(uri), text="x")]
        return types.ReadResourceResult(contents=contents)


@loom_runtime.tool
def lookup(args: dict[str, str], token: str) -> str:
    return "ok"


URI = (
    "https://deploy:tok9f8e7d6c5b@files.example/report.pdf"
    "?X-Amz-Signature=9a8b7c6d5e4f&token=qq77opaqueTok&sig=SiGvAlUe123&page=2"
)


def _rows(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def test_credential_named_arguments_and_uri_parts_are_in_no_row(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    session = loom_runtime.wrap_session(Session())
    answer = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
    loom = Loom(f"sqlite:///{path}")

    @loom.flow("agent")
    async def agent(ctx: Any) -> str:
        await session.call_tool("t", {name: opaque("mcp", name) for name in NAMES})
        # And in the request's meta, recorded as part of what is asked (an attack review).
        await session.call_tool("t", {"q": "x"}, meta={n: opaque("meta", n) for n in NAMES})
        lookup({name: opaque("tool", name) for name in NAMES}, token=opaque("tool", "param"))
        await session.read_resource(URI)
        with httpx.Client(transport=loom_runtime.transport(answer)) as http:
            http.post("https://api.example/x", json={n: opaque("http", n) for n in NAMES})
        return "done"

    with loom:
        run = loom.run("agent")
        assert loom.replay(run.execution_id).identical
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = _rows(path)
    found = [
        f"{where}:{name}"
        for where in ("mcp", "meta", "tool", "http")
        for name in [*NAMES, "param"]
        if opaque(where, name).encode() in stored
    ]
    assert found == []
    for secret in ("tok9f8e7d6c5b", "9a8b7c6d5e4f", "qq77opaqueTok", "SiGvAlUe123"):
        assert secret.encode() not in stored, secret
    assert b"page=2" in stored  # the control: the resource's plain query is stored


class Flaky(Session):
    """Times out once (the SDK raises its own ``MCPError`` for that), then answers."""

    calls = 0

    async def call_tool(self, name: str, arguments: Any = None, **_: Any) -> Any:
        Flaky.calls += 1
        if Flaky.calls == 1:
            message = "Timed out after 0.3s waiting for 'tools/call'"
            raise exceptions.MCPError(types.REQUEST_TIMEOUT, message, {"timeout": 0.3})
        return await super().call_tool(name, arguments)


def test_a_timeout_is_a_failure_a_retry_reopens_not_a_recorded_answer(tmp_path: Path) -> None:
    """Review of 6 December: a request timeout (or a closed connection), which the SDK raises
    as an ``MCPError`` with a code of its own, was recorded as the server's answer, so
    ``resume(retry_failed=True)`` handed the reopened run the same timeout for ever."""
    MCPError = exceptions.MCPError
    Flaky.calls = 0

    session = loom_runtime.wrap_session(Flaky())
    loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")

    @loom.flow("agent")
    async def agent(ctx: Any) -> str:
        result = await session.call_tool("slow", {})
        return str(result.content[0].text)

    with loom:
        with pytest.raises(MCPError, match="Timed out"):
            loom.run("agent")
        [summary] = loom.executions()
        [decision] = loom.execution(summary.execution_id).decisions.values()
        assert decision.error_type is not None  # a failure, not a recorded answer
        assert loom.resume(summary.execution_id, retry_failed=True).output == "ok"
    assert Flaky.calls == 2


def test_a_timeout_the_flow_catches_replays_as_the_same_mcp_error(tmp_path: Path) -> None:
    """The review of the change above: recorded as a failure, the timeout came back on
    replay as a ``RecordedComputeError`` (``MCPError`` takes a code), so a flow's ``except
    MCPError`` fallback was not taken and every faithful replay diverged. It is rebuilt from
    its recorded code, message and data."""
    Flaky.calls = 0
    session = loom_runtime.wrap_session(Flaky())
    loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")

    @loom.flow("agent")
    async def agent(ctx: Any) -> str:
        try:
            await session.call_tool("slow", {})
        except exceptions.MCPError as error:
            return f"fallback {error.error.code} {error.error.data}"
        return "answered"

    with loom:
        run = loom.run("agent")
        assert run.output == f"fallback {types.REQUEST_TIMEOUT} {{'timeout': 0.3}}"
        result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


@pytest.mark.parametrize(
    ("uri", "stored"),
    [
        ("notes:///daily/today", "notes:///daily/today"),
        ("mem://", "mem://"),
        ("file:///etc/x?page=2", "file:///etc/x?page=2"),
        ("https://u:pw@files.example/a?sig=S1&page=2", "https://files.example/a?page=2"),
        ("s3x://bucket/o?X-Amz-Signature=abc", "s3x://bucket/o"),
        ("https://user:pw@host.example/o", "https://host.example/o"),  # a location's too
        ("/relative?sig=S1&page=2", "/relative?page=2"),
        # urlsplit refuses a userinfo holding what NFKC folds to a delimiter: cut by hand
        (
            "https://u\uff03:pw@files.example/o?X-Amz-Signature=SIG&page=2",
            "https://files.example/o?page=2",
        ),
        (
            "https://files.example\u2100/o?sig=SIG&page=2#top",
            "https://files.example\u2100/o?page=2#top",
        ),
    ],
)
def test_a_uri_is_stored_as_given_but_for_its_credentials(uri: str, stored: str) -> None:
    """The review of the change above: every URI went through ``urlunsplit``, which drops
    the empty authority of a scheme ``urllib`` does not know (``notes:///x`` became
    ``notes:/x``), in what the flow was handed back live."""
    from loom_runtime.http_request import url_without_credentials as stored_uri

    assert stored_uri(uri) == stored


@pytest.mark.parametrize(
    "uri",
    [
        "https://deploy:tok9f8e\t7d6c5b@files.example/report.pdf",
        "https://files.example/report.pdf?X-Amz-Signature=9a8b7c\n6d5e4f&page=2",
    ],
)
def test_a_credential_split_by_a_tab_or_line_break_is_still_cut(uri: str) -> None:
    """The third review of 6 December: ``urlsplit`` drops tabs and line breaks before it
    parses, so the parts it found were not in the text and nothing was cut from it."""
    from loom_runtime.http_request import url_without_credentials as stored_uri

    stored = stored_uri(uri)
    assert "tok9f8e" not in stored and "9a8b7c" not in stored, stored


def test_a_resource_key_of_a_uri_urlsplit_refuses_names_no_credential() -> None:
    """A URI whose userinfo holds what NFKC folds to a delimiter made ``urlsplit`` raise a
    bare ``ValueError`` out of ``read_resource``'s key; the key is cut by hand instead,
    without userinfo or query, as for any URI."""
    from loom_runtime.mcp_session import resource_name

    key = resource_name("https://u\uff03:pw@files.example/o?sig=SIG&page=2")
    assert key == "https://files.example/o"
