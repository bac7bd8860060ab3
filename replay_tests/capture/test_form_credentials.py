"""A credential in a form body or a multipart text field is never stored (ADR 0024, amended
2026-12-06 "forms").

An attack review sent OAuth token requests the way RFC 6749 has them sent, as
``application/x-www-form-urlencoded`` bodies (``code``, ``code_verifier``, ``client_secret``,
``client_assertion``, ``subject_token``, ``password``, ``refresh_token``), an upload with an
``api_key`` form field beside its file, and OpenWeatherMap's ``?appid=`` and HubSpot's
``?hapikey=`` keys: only JSON bodies and known query names were read for credentials, so
every one lay in the log in clear. Each value below is opaque (no redaction pattern knows
it): the name is what tells, by the rule query parameters are judged by.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom
from replay_tests.capture.raw_log import raw_log


def _secret(name: str) -> str:
    return f"F{zlib.crc32(name.encode())}qq"


GRANTS = [
    {
        "grant_type": "authorization_code",
        "code": _secret("code"),
        "code_verifier": _secret("code_verifier"),
        "redirect_uri": "https://app.example/cb",
        "client_id": "app-id-plain",
        "client_secret": _secret("client_secret"),
    },
    {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "client_assertion": _secret("client_assertion"),
        "subject_token": _secret("subject_token"),
    },
    {"grant_type": "password", "username": "me", "password": _secret("password")},
    {"grant_type": "refresh_token", "refresh_token": _secret("refresh_token")},
]
UPLOAD = {"api_key": _secret("api_key"), "model": "whisper-plain"}
QUERY = {"q": "Paris", "appid": _secret("appid"), "hapikey": _secret("hapikey")}
SECRETS = [_secret(name) for name in ("code", "code_verifier", "client_secret")]
SECRETS += [_secret(name) for name in ("client_assertion", "subject_token", "password")]
SECRETS += [_secret(name) for name in ("refresh_token", "api_key", "appid", "hapikey")]
ASKED = {"scope": "read"}


def build(path: Path) -> Loom:
    loom = Loom(f"sqlite:///{path}")
    inner = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))

    @loom.flow("f")
    def flow(ctx: Any) -> list[int]:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            token = "https://oauth2.example/token"
            statuses = [client.post(token, data={**grant, **ASKED}).status_code for grant in GRANTS]
            files = {"file": ("a.txt", b"file-body-plain")}
            statuses.append(
                client.post("https://api.example/upload", data=UPLOAD, files=files).status_code
            )
            weather = "https://api.openweathermap.org/data/2.5/weather"
            statuses.append(client.get(weather, params=QUERY).status_code)
            return statuses

    return loom


def test_form_and_multipart_credentials_are_in_no_row(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with build(path) as loom:
        run = loom.run("f")
        inputs = [
            msgspec.json.decode(decision.input)
            for decision in loom.execution(run.execution_id).decisions.values()
        ]
        assert loom.replay(run.execution_id).identical
    stored = raw_log(path)
    assert [secret for secret in SECRETS if secret.encode() in stored] == []
    # The control: everything else the requests ask is stored, and read as its fields.
    assert inputs[0]["body"] == {
        "form": [
            ["grant_type", "authorization_code"],
            ["redirect_uri", "https://app.example/cb"],
            ["client_id", "app-id-plain"],
            ["scope", "read"],
        ]
    }
    for plain in (b"whisper-plain", b"file-body-plain", b"Paris", b"token-exchange"):
        assert plain in stored, plain


def test_a_changed_form_field_diverges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "loom.db"
    with build(path) as loom:
        run = loom.run("f")
    monkeypatch.setitem(ASKED, "scope", "admin")
    with build(path) as loom:
        replay = loom.replay(run.execution_id)
    assert not replay.identical
    assert "admin" in replay.describe()


def test_a_form_body_that_is_not_text_is_compared_as_sent() -> None:
    """A body announced as a form that is not UTF-8 is read as any body is (bytes)."""
    from loom_runtime.http_request import request_key_and_input

    headers = {"content-type": "application/x-www-form-urlencoded"}
    request = httpx.Request("POST", "https://h.example/f", content=b"\xff\xfe=1", headers=headers)
    assert request_key_and_input(request, None)[1]["body"] == {"bytes": b"\xff\xfe=1"}
