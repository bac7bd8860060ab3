"""ADR 0024, amended: a request header named as a credential is never stored, whatever its value.

The by-name list held five names; every other credential header was stored unless its value
matched one of the redactor's patterns, and most keys match none (an Azure subscription key
is 32 hex digits, a session token is opaque). Each is sent on a recorded request through the
default (builtin) redactor and must be in no row of the SQLite file, while a plain header
sent beside them is stored (the control).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom

CREDENTIALS = {
    "Ocp-Apim-Subscription-Key": "3f9a0c2b7d6e4f1a8b5c9d0e2f4a6b8c",  # Azure AI services, Bing
    "PRIVATE-TOKEN": "glpat-Ab3dEfGh1JkLmN0pQrSt",  # GitLab
    "X-Auth-Token": "8d7f6e5a4b3c2d1e0f9a8b7c6d5e4f3a",
    "x-amz-security-token": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ",
    "x-functions-key": "Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5",  # Azure Functions
    "X-Api-Token": "b8c6d4e2f0a9b7c5d3e1f0a2b4c6d8e0",
}
PLAIN = {"X-Trace": "plain-trace-id", "X-Keyboard-Layout": "dvorak"}


def build(url: str) -> Loom:
    loom = Loom(url)

    @loom.flow("call")
    def call(ctx: Any, credential: str) -> int:  # its name: the flow's input is stored too
        headers = {credential: CREDENTIALS[credential], **PLAIN}
        inner = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get("https://api.example/search", headers=headers).status_code

    return loom


def _rows(path: Path) -> str:
    with sqlite3.connect(path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return repr([db.execute(f'SELECT * FROM "{table}"').fetchall() for table in tables])


@pytest.mark.parametrize("name", sorted(CREDENTIALS))
def test_a_credential_header_is_in_no_row(tmp_path: Path, name: str) -> None:
    """Named as a credential (a word of its name is key, token, secret, auth...): left out of
    the stored request, with the builtin redactor that does not recognise its value."""
    path = tmp_path / "loom.db"
    with build(f"sqlite:///{path}") as loom:
        run = loom.run("call", credential=name)
        (decision,) = loom.execution(run.execution_id).decisions.values()
    rows = _rows(path)
    assert CREDENTIALS[name] not in rows
    assert "plain-trace-id" in rows  # the control: the request is stored
    stored = msgspec.json.decode(decision.input)["headers"]
    assert stored == {"accept": "*/*", "x-keyboard-layout": "dvorak", "x-trace": "plain-trace-id"}
