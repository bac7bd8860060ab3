"""A compressed request body is compared and stored as what it says (ADR 0024, amended).

gzip writes the time it compressed into its header, so an unchanged flow posting a gzipped
body (a log or OTLP exporter, a bulk API) never replayed identically, and its stored input was
one line of base64 no diff could read, with any credential field inside it unmarked (review
of 6 December). A changed body still diverges (the control).
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import DecisionInputChangedError, Loom
from replay_tests.runtime.test_transport import Unreachable

BODY = {"events": ["disk full", "restarted"], "api_token": "opaque-9f8e7d6c5b4a"}
CLOCK = {"mtime": 1_000}


def compress(data: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        CLOCK["mtime"] += 1  # a later second, as each run compresses later
        return gzip.compress(data, mtime=CLOCK["mtime"])
    return zlib.compress(data)


def build(url: str, inner: httpx.BaseTransport, encoding: str, body: Any = BODY) -> Loom:
    loom = Loom(url)

    @loom.flow("ship")
    def ship(ctx: Any) -> int:
        content = compress(json.dumps(body).encode(), encoding)
        headers = {"content-encoding": encoding, "content-type": "application/json"}
        with httpx.Client(transport=loom_runtime.transport(inner)) as client:
            return client.post(
                "https://logs.example/v1", content=content, headers=headers
            ).status_code

    return loom


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_replays_identically_and_is_stored_as_its_json(
    sqlite_url: str, encoding: str
) -> None:
    with build(sqlite_url, httpx.MockTransport(lambda r: httpx.Response(202)), encoding) as loom:
        run = loom.run("ship")
        (decision,) = loom.execution(run.execution_id).decisions.values()
    stored = msgspec.json.decode(decision.input)
    assert stored["body"] == {
        "json": {"events": ["disk full", "restarted"], "api_token": "[REDACTED:credential-field]"}
    }
    assert stored["headers"]["content-encoding"] == encoding
    with build(sqlite_url, Unreachable(), encoding) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_changed_compressed_body_still_diverges(sqlite_url: str) -> None:
    with build(sqlite_url, httpx.MockTransport(lambda r: httpx.Response(202)), "gzip") as loom:
        run = loom.run("ship")
    changed = {**BODY, "events": ["disk full"]}
    with build(sqlite_url, Unreachable(), "gzip", body=changed) as fresh:
        [finding] = fresh.replay(run.execution_id).divergences
    assert isinstance(finding, DecisionInputChangedError)
    assert '-        "restarted"' in finding.diff


def test_every_gzip_member_is_compared_and_trailing_bytes_are_not_dropped() -> None:
    """The review of the change above: only a body's first gzip member was inflated, so a
    request whose second member changed (what a server reads: it inflates them all) compared
    equal, and bytes after a member were ignored. Every member is read; anything else after
    them leaves the body compared as sent."""
    from loom_runtime.http_request import _decoded

    first = gzip.compress(b'{"op": "transfer", ', mtime=1)
    assert _decoded(first + gzip.compress(b'"amount": 5}', mtime=2), "gzip") == (
        b'{"op": "transfer", "amount": 5}'
    )
    trailing = gzip.compress(b"{}", mtime=1) + b"junk"
    assert _decoded(trailing, "gzip") == trailing


def test_many_gzip_members_inflate_in_one_pass() -> None:
    """The third review of 6 December: each member copied everything inflated so far and the
    input left, quadratic in the members (4,096 members of 8 KiB: 25 s). Counted, not timed:
    each inflater is handed a window of the input, not all that is left of it."""
    import zlib as real_zlib

    from loom_runtime import http_request

    members = b"".join(gzip.compress(bytes(range(256)) * 4, mtime=1) for _ in range(2000))
    fed: list[int] = []

    original = real_zlib.decompressobj

    class Counting:
        def __init__(self, wbits: int) -> None:
            self._inner = original(wbits)

        def decompress(self, data: Any, max_length: int = 0) -> bytes:
            fed.append(len(data))
            return self._inner.decompress(data, max_length)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    http_request.zlib.decompressobj = Counting  # type: ignore[assignment]
    try:
        assert http_request._decoded(members, "gzip") == bytes(range(256)) * 4 * 2000
    finally:
        http_request.zlib.decompressobj = original
    # Each call is handed a bounded window, never the whole rest (which each member's
    # inflater copied back), and the calls are about one a member.
    assert max(fed) <= 64 * 1024 and len(fed) <= 2 * 2000, (max(fed), len(fed))
