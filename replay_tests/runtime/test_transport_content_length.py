"""A response's ``content-length`` reaches the flow as it reaches code without loom.

Capture review of 6 December: the header was never stored (a body stored decoded no longer
has its encoded length), and the live response was rebuilt from what is stored, so inside a
flow a HEAD request, or a plain download, had none: ``int(r.headers["content-length"])``
raised ``KeyError`` only when recorded. It is kept now unless the response had a
``content-encoding``, and a replay gives the stored body's length (a body the redactor
changed is shorter or longer than the one the server measured); one that is no number is
refused as tampered.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import loom_runtime
from loom_runtime import FlowContext, Loom, RecordedValueError


def _server(request: httpx.Request) -> httpx.Response:
    if request.method == "HEAD":
        return httpx.Response(200, headers={"content-length": "1048576"})
    if request.url.path == "/gzipped":
        import gzip

        body = gzip.compress(b"y" * 500)
        return httpx.Response(200, content=body, headers={"content-encoding": "gzip"})
    return httpx.Response(200, content=b"x" * 1000)


def _sizes(ctx: FlowContext) -> list[str | None]:
    with httpx.Client(transport=loom_runtime.transport(httpx.MockTransport(_server))) as client:
        head = client.head("https://files.example/model.bin")
        body = client.get("https://files.example/model.bin")
        gzipped = client.get("https://files.example/gzipped")
        return [
            head.headers.get("content-length"),
            body.headers.get("content-length"),
            gzipped.headers.get("content-length"),
        ]


def test_a_content_length_is_seen_live_and_replayed(tmp_path: Path) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        loom.flow("f")(_sizes)
        run = loom.run("f")
        # gzipped: its encoded length describes no stored byte, so it is gone, live and replayed
        assert run.output == ["1048576", "1000", None]
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
        assert replayed.output == run.output


def test_a_body_the_redactor_changed_replays_with_its_stored_length(tmp_path: Path) -> None:
    """Third regression review: a token response's body is redacted before it is stored, so
    its recorded length no longer described it, and the first form refused every such
    recording as altered. A replay gives the stored body's length."""
    token = "ghp_" + "a" * 36

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"access_token": token, "token_type": "bearer"})

    def login(ctx: FlowContext) -> int:
        with httpx.Client(transport=loom_runtime.transport(httpx.MockTransport(server))) as c:
            return c.get("https://login.example/oauth/token").status_code

    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        loom.flow("f")(login)
        run = loom.run("f")
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()


def test_a_content_length_that_is_no_number_is_refused_and_another_is_the_body_s() -> None:
    from loom_runtime.http_transport import RecordedResponse, replayed

    def replay(length: str) -> list[tuple[str, str]]:
        recorded = {"status": 200, "headers": [["content-length", length]], "text": "four"}
        return list(
            replayed(
                "k", recorded, RecordedResponse, expected="a response", not_stored=frozenset()
            ).headers
        )

    with pytest.raises(RecordedValueError, match="content-length"):
        replay("lots")
    assert replay("7") == [("content-length", "4")]
    assert replay("4") == [("content-length", "4")]
