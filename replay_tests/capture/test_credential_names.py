"""A name is a credential's by its head word, not by any word in it (ADR 0024, amended
2026-12-06 "names").

An attack review found parameters and tool arguments that merely hold the word ``token`` or
``auth`` taken for credentials and left out of the compared input: a Google-style
``pageToken`` cursor, a JSON ``page_token``, a ``@tool`` asked about a crypto
``token_symbol`` or an ``auth_level``. Code asking another page, symbol or level replayed
"identically" and was handed the answer recorded for the first. What a credential is named
(``access_token``, ``client_secret``, ``api_key``...) must still never be stored.
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
from loom_runtime.http_request import credential_name
from replay_tests.capture.raw_log import raw_log

CREDENTIALS = [
    *("token", "auth", "secret", "password", "passwd", "apikey", "bearer", "credentials"),
    *("access_token", "id_token", "refresh_token", "auth_token", "session_token", "authToken"),
    *("subject_token", "csrf_token", "github_token", "accessToken", "x-auth-token"),
    *("client_secret", "webhook_secret", "clientSecret", "api_key", "apiKey", "x-api-key"),
    *("private_key", "secret_access_key", "db_password", "new_password", "authorization"),
    *("Authorization", "api_key_2", "password_confirmation", "authorization_code"),
    *("auth_code", "secret_value", "token_hash", "code_verifier", "client_assertion"),
    *("oauth_verifier", "assertion", "basic_auth"),
    "id_token_hint",  # OpenID Connect's logout request: the ID token itself, as a hint
    # The form a credential is held in, after its name (a regression review of the rule):
    *("SecretBinary", "credentials_json", "secret_key_base", "token_data", "api_key_file"),
]
NOT_CREDENTIALS = [
    *("pageToken", "page_token", "nextPageToken", "next_token", "continuation_token"),
    *("syncToken", "resume_token", "cursor_token", "token_symbol", "token_id", "tokenAddress"),
    *("auth_level", "auth_type", "auth_method", "token_type", "secret_id", "SecretId"),
    *("password_policy", "max_tokens", "key", "sort_key", "code", "country_code", "tokens"),
    "login_hint",
    *("user_data", "key_file"),
]


@pytest.mark.parametrize("name", CREDENTIALS)
def test_a_credential_name_is_one(name: str) -> None:
    assert credential_name(name)


@pytest.mark.parametrize("name", NOT_CREDENTIALS)
def test_a_name_that_only_holds_a_credential_word_is_not_one(name: str) -> None:
    assert not credential_name(name)


ASKED = {"cursor": "page-2", "symbol": "ETH", "level": "public"}


@loom_runtime.tool
def token_price(token_symbol: str) -> str:
    return f"price of {token_symbol}"


@loom_runtime.tool
def books_by(author: str, auth_level: str) -> str:
    return f"{author} at {auth_level}"


def _secret(where: str, name: str) -> str:
    """An opaque value (no redaction pattern knows it): only the name can tell."""
    return f"Q{where}{zlib.crc32(name.encode())}zz"


@loom_runtime.tool
def connect(args: dict[str, str]) -> str:
    return "connected"


def build(path: Path, inner: httpx.MockTransport) -> Loom:
    loom = Loom(f"sqlite:///{path}")

    @loom.flow("f")
    def flow(ctx: Any) -> list[Any]:
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            cursor = ASKED["cursor"]
            page = client.get(
                "https://www.googleapis.com/drive/v3/files",
                params={"pageSize": "10", "pageToken": cursor},
            ).json()
            found = client.post(
                "https://api.example/search", json={"q": "x", "page_token": cursor}
            ).json()
            client.post(
                "https://api.example/login", json={n: _secret("http", n) for n in CREDENTIALS}
            )
        connect({n: _secret("tool", n) for n in CREDENTIALS})
        return [
            page,
            found,
            token_price(token_symbol=ASKED["symbol"]),
            books_by("Le Guin", auth_level=ASKED["level"]),
        ]

    return loom


def _answer(request: httpx.Request) -> httpx.Response:
    if request.method == "GET":
        return httpx.Response(200, json={"page": request.url.params["pageToken"]})
    return httpx.Response(
        200, json={"page": msgspec.json.decode(request.content).get("page_token")}
    )


def test_credential_named_fields_and_arguments_are_in_no_row(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with build(path, httpx.MockTransport(_answer)) as loom:
        run = loom.run("f")
        assert loom.replay(run.execution_id).identical
    stored = raw_log(path)
    found = [
        f"{where}:{name}"
        for where in ("http", "tool")
        for name in CREDENTIALS
        if _secret(where, name).encode() in stored
    ]
    assert found == []
    assert b"page-2" in stored and b"ETH" in stored and b"public" in stored  # the control


@pytest.mark.parametrize(
    ("asked", "changed"), [("cursor", "page-7"), ("symbol", "BTC"), ("level", "admin")]
)
def test_a_changed_cursor_symbol_or_level_diverges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: str, changed: str
) -> None:
    path = tmp_path / "loom.db"
    with build(path, httpx.MockTransport(_answer)) as loom:
        run = loom.run("f")
    monkeypatch.setitem(ASKED, asked, changed)
    with build(path, httpx.MockTransport(_answer)) as loom:
        replay = loom.replay(run.execution_id)
    assert not replay.identical
    assert changed in replay.describe(), replay.describe()
