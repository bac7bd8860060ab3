"""A response's ``content-length`` reaches the flow as it reaches code without loom.

Capture review of 6 December: the header was never stored (a body stored decoded no longer
has its encoded length), and the live response was rebuilt from what is stored, so inside a
flow a HEAD request, or a plain download, had none: ``int(r.headers["content-length"])``
raised ``KeyError`` only when recorded. It is kept now unless the response had a
``content-encoding``, and a replay hands it back; one that contradicts the stored body is
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


def test_a_content_length_contradicting_the_stored_body_is_refused() -> None:
    from loom_runtime.http_transport import RecordedResponse, replayed

    forged = {"status": 200, "headers": [["content-length", "7"]], "text": "four"}
    with pytest.raises(RecordedValueError, match="content-length"):
        replayed("k", forged, RecordedResponse, expected="a response", not_stored=frozenset())
