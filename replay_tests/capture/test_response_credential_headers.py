"""A credential in a response header is stored redacted (ADR 0024, amended 2026-12-06
"response headers").

An attack review logged in to an OpenStack Keystone-like API, which answers with its token in
``X-Subject-Token``; APIs also answer ``X-Auth-Token``, ``Authorization`` or an STS session's
``X-Amz-Security-Token``. Only ``set-cookie`` was left out of a stored response, so each token
lay in the log in clear. Each value below is opaque (no redaction pattern knows it): the
header's name is what tells, by the rule a request header is judged by.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

import loom_runtime
from loom_runtime import Loom
from replay_tests.capture.raw_log import raw_log

TOKEN = "gAAAAABmZ3k9QeTs1Lx7vW2pR8nB4cY6dK0jH5fG3aM1sN9uV7oP2qI8rE6tW4yU"
CREDENTIALS = {
    "x-subject-token": TOKEN + "1",
    "x-auth-token": TOKEN + "2",
    "authorization": TOKEN + "3",
    "x-amz-security-token": TOKEN + "4",
    "proxy-authorization": TOKEN + "5",
}
MARK = "[REDACTED:credential-header]"  # http_transport.CREDENTIAL_HEADER_MARK
PLAIN = {"x-request-id": "req-plain-7f3a", "www-authenticate": "Bearer realm=plain"}


def build(path: Path, inner: httpx.MockTransport, seen: list[dict[str, str]]) -> Loom:
    """The flow hands the headers it got to ``seen``: its output would be redacted itself."""
    loom = Loom(f"sqlite:///{path}")

    @loom.flow("login")
    def login(ctx: Any) -> int:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            response = client.post("https://keystone.example/v3/auth/tokens", json={"u": "me"})
            seen.append({name: response.headers[name] for name in [*CREDENTIALS, *PLAIN]})
            return response.status_code

    return loom


def test_a_credential_response_header_is_in_no_row_and_replays_redacted(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    answer = httpx.MockTransport(
        lambda request: httpx.Response(201, headers={**CREDENTIALS, **PLAIN}, json={"ok": 1})
    )
    live: list[dict[str, str]] = []
    with build(path, answer, live) as loom:
        run = loom.run("login")
    assert live == [{**CREDENTIALS, **PLAIN}]  # live: the caller gets the token itself
    stored = raw_log(path)
    assert [name for name, value in CREDENTIALS.items() if value.encode() in stored] == []
    assert all(value.encode() in stored for value in PLAIN.values())  # the control

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise AssertionError("a replay sends nothing")

    replayed: list[dict[str, str]] = []
    with build(path, httpx.MockTransport(unreachable), replayed) as loom:
        assert loom.replay(run.execution_id).identical
    # The caller still gets each header on replay, holding the marker, as a value the
    # redactor marked replays marked.
    assert replayed == [{**dict.fromkeys(CREDENTIALS, MARK), **PLAIN}]
