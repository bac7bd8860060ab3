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
    "X-Authorization": "7f3a9c0d1e2b4a5968778695a4b3c2d1",  # review 6 Dec: not the word "auth"
    "Authentication": "a1b2c3d4e5f60718293a4b5c6d7e8f90",
    "X-Hub-Signature-256": "sha256=0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "X-TrackerToken": "c0ffee00c0ffee00c0ffee00c0ffee00",  # Pivotal Tracker: glued words
    "X-Honeycomb-Team": "hcaik_01abcdefghijklmnopqrstuvwx",  # Honeycomb's API key
}
PLAIN = {
    "X-Trace": "plain-trace-id",
    "X-Keyboard-Layout": "dvorak",
    "X-Max-Tokens": "512",  # a word ending in "tokens" is a count, not a credential
}


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
    assert stored == {"accept": "*/*"} | {plain.lower(): value for plain, value in PLAIN.items()}


SIGNED = {
    "X-Goog-Signature": "5d2f6b7c8a9e0f1d2c3b4a59687766554433221100ffeeddccbbaa99",  # GCS
    "X-Goog-Credential": "signer@project.iam.gserviceaccount.com/20261206/auto/storage",
}
FUNCTION_KEY = "Zm9vYmFyYmF6cXV4Q29kZUtleUF6dXJlRnVuY3Rpb25z"  # Azure Functions' ?code=
OAUTH_CODE = "SplxlOBeZQQYbYS6WxSbIA"  # an OAuth callback's ?code=, beside its state
PRESIGNED = (
    "https://bucket.s3.amazonaws.com/asset.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIDEXAMPLE%2F20261206%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Signature=9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
)


def test_signed_urls_and_their_redirects_are_in_no_row(tmp_path: Path) -> None:
    """Query parameters that sign a URL or carry a function key (GCS's, Azure Functions'
    ``code``) are left out like AWS's; a redirect to a presigned URL (a release download)
    is stored with its signature left out of ``location``, while the live caller follows
    the whole URL and a replay follows the stored one to the same recorded answer."""
    path = tmp_path / "loom.db"
    followed: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        if request.url.host == "api.example":
            return httpx.Response(302, headers={"location": PRESIGNED})
        followed.append(str(request.url))
        return httpx.Response(200, json={"asset": True})

    loom = Loom(f"sqlite:///{path}")

    @loom.flow("signed")
    def signed(ctx: Any) -> list[int]:
        transport = loom_runtime.transport(httpx.MockTransport(serve))
        with httpx.Client(transport=transport, follow_redirects=True) as client:
            return [
                client.get("https://storage.example/o", params=SIGNED).status_code,
                client.get("https://api.example/releases/1").status_code,
                client.get(
                    "https://fn.azurewebsites.net/api/hook?code=" + FUNCTION_KEY
                ).status_code,
                client.get(f"https://app.example/callback?code={OAUTH_CODE}&state=xyz").status_code,
            ]

    with loom:
        run = loom.run("signed")
        assert run.output == [200, 200, 200, 200]
        assert PRESIGNED in followed  # live: the whole signed URL
        rows = _rows(path)
        for secret in [
            *SIGNED.values(),
            "9e8d7c6b5a4f3e2d",
            "AKIDEXAMPLE",
            FUNCTION_KEY,
            OAUTH_CODE,
        ]:
            assert secret not in rows
        assert "X-Amz-Algorithm" in rows  # the control: the redirect is stored
        assert loom.replay(run.execution_id).identical


def test_an_everyday_code_parameter_is_part_of_the_question(tmp_path: Path) -> None:
    """Review of 6 December: ``code`` left out everywhere hid a changed request (``?code=US``
    asked as ``?code=FR`` replayed "identically", answered with the US reply). It is a
    credential only as Azure Functions' key (its host) or an OAuth callback's (with
    ``state``); a country, product or error code is what is asked."""
    country = {"code": "US"}
    loom = Loom(f"sqlite:///{tmp_path / 'loom.db'}")

    @loom.flow("country")
    def lookup(ctx: Any) -> Any:
        inner = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.get("https://countries.example/v1", params=country).json()

    with loom:
        run = loom.run("country")
        country["code"] = "FR"
        [finding] = loom.replay(run.execution_id).divergences
    assert '"FR"' in str(finding)


SIGNING_TIME: dict[str, Any] = {"n": 0}


def test_signing_times_in_headers_and_a_presigned_query_do_not_diverge(tmp_path: Path) -> None:
    """Review of 6 December: GCS signs with ``x-goog-date``, and a presigned URL carries its
    signing time as ``X-Amz-Date``/``X-Goog-Date`` beside the signature; signed again later,
    an unchanged request diverged on that time. A presigned link in a ``link`` header is
    stored without its signature, as one in ``location`` is."""
    path = tmp_path / "loom.db"
    loom = Loom(f"sqlite:///{path}")

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"link": f'<{PRESIGNED}>; rel="download"'})

    @loom.flow("signed")
    def signed(ctx: Any) -> str:
        SIGNING_TIME["n"] += 1
        when = f"20261206T0{SIGNING_TIME['n']}0000Z"
        with httpx.Client(transport=loom_runtime.transport(httpx.MockTransport(serve))) as client:
            client.get("https://storage.example/b/o", headers={"x-goog-date": when})
            answer = client.get(
                "https://bucket.s3.example/o",
                params={"X-Amz-Date": when, "X-Amz-Signature": "0a1b2c3d4e5f6a7b"},
            )
        SIGNING_TIME["link"] = answer.headers["link"]  # what the caller got, kept out of the log
        return "done"

    with loom:
        run = loom.run("signed")
        assert "9e8d7c6b5a4f3e2d" in str(SIGNING_TIME["link"])  # live: the whole link
        assert "9e8d7c6b5a4f3e2d" not in _rows(path)
        result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


@pytest.mark.parametrize(
    "signed",
    [
        {"sv": "2024-11-04", "st": "2026-12-06T0{n}:00Z", "se": "2026-12-06T1{n}:00Z", "sig": "s"},
        {"Expires": "176500000{n}", "Signature": "s", "Key-Pair-Id": "K1"},  # CloudFront, GCS v2
        {"Policy": "eyJTdGF0ZW1lbnQiOi{n}", "Signature": "s", "Key-Pair-Id": "K1"},  # custom
    ],
    ids=["azure-sas", "expires", "cloudfront-policy"],
)
def test_other_signed_urls_times_do_not_diverge(signed: dict[str, str]) -> None:
    """The second review of 6 December: an Azure SAS's ``st``/``se`` and a CloudFront or GCS
    v2 ``Expires`` are signing times too, beside their signature."""
    from loom_runtime.http_request import credential_query

    def query(n: int) -> list[tuple[str, str]]:
        return [(name, value.format(n=n)) for name, value in signed.items()]

    assert credential_query(query(1), "h.example", None) == credential_query(
        query(2), "h.example", None
    )
