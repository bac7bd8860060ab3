"""ADR 0024, amended 2026-12-05 ("fields"): a credential in a JSON body or a query parameter is
never stored, as one in a header is not.

A header named as a credential was left out, but the same credential sent as a JSON field (an
OAuth token request in Auth0's style: ``{"client_secret": ...}``), in a model call's
``extra_body``, or as a query parameter outside a short list of exact names was stored in
clear: the redactor reads each string alone, so a random key beside its name matched nothing.
Each is recorded through the default (builtin) redactor and must be in no row, while the
request's other fields are stored (the control), and the replay is identical.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import msgspec

import loom_runtime
from loom_runtime import Loom

SECRET = "Zx9Qm2Lk7Vb4Nc8Rt1Yw6Hs3Jd5Fg0Pa"


def _rows(path: Path) -> str:
    with sqlite3.connect(path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return repr([db.execute(f'SELECT * FROM "{table}"').fetchall() for table in tables])


def build(url: str) -> Loom:
    loom = Loom(url)
    inner = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))

    @loom.flow("token")
    def token(ctx: Any) -> int:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            body = {
                "grant_type": "client_credentials",
                "client_id": "app",
                "client_secret": SECRET + "J",
                "nested": [{"password": SECRET + "P", "passwordHint": 7}],
                "apiKey": SECRET + "K",
                "max_tokens": 5,
            }
            return client.post("https://auth.example/oauth/token", json=body).status_code

    @loom.flow("query")
    def query(ctx: Any) -> int:
        params = {"client_secret": SECRET + "Q", "subscription-key": SECRET + "S", "page": "2"}
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get("https://api.example/x", params=params).status_code

    return loom


def _recorded_input(path: Path, flow: str) -> Any:
    """The stored input of ``flow``'s one request, recorded into ``path`` and replayed
    identically (a redaction that differed between record and replay would diverge)."""
    with build(f"sqlite:///{path}") as loom:
        run = loom.run(flow)
        (decision,) = loom.execution(run.execution_id).decisions.values()
        assert loom.replay(run.execution_id).identical
    return msgspec.json.decode(decision.input)


def test_credential_fields_of_a_json_body_are_in_no_row(tmp_path: Path) -> None:
    body = _recorded_input(tmp_path / "loom.db", "token")["body"]["json"]
    assert SECRET not in _rows(tmp_path / "loom.db")
    assert body["client_id"] == "app" and body["max_tokens"] == 5  # the control
    assert body["nested"][0]["passwordHint"] == 7  # not a string: nothing to hide
    assert body["client_secret"].startswith("[REDACTED:")


def test_credential_query_parameters_are_in_no_row(tmp_path: Path) -> None:
    query = _recorded_input(tmp_path / "loom.db", "query")["query"]
    assert SECRET not in _rows(tmp_path / "loom.db")
    assert query == [["page", "2"]]  # the control


def test_a_credential_field_of_a_model_call_is_not_in_its_input() -> None:
    """A wrapped SDK's request body is the model decision's input: an ``extra_body`` holding
    an ``api_key`` was stored in clear beside the messages."""
    from loom_runtime.providers import ModelProfile

    profile = ModelProfile(provider="openai", base_path="/v1", retry=None)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "api_key": SECRET}
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions", json=body)
    key, stored = profile.key_and_input(request, None)
    assert key == "model:openai:chat.completions"
    assert SECRET not in repr(stored)
    assert stored == {**body, "api_key": stored["api_key"]}  # the control: the rest is kept
