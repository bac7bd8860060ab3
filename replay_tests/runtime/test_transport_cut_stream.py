"""A body the connection cuts mid-stream replays its chunks, then the error (ADR 0024, amended
"cut body").

A streaming caller that kept what arrived before the cut (an agent reading events until the
connection drops) got its chunks live, then the transport's error. The failure was recorded
as the decision's, and a replay raised it when the request was sent: before the first chunk.
The same flow, unchanged, replayed with another output and was reported diverged (an attack
review of capture). The response is stored as read, with what reading it raised after, and a
replay hands out the same chunks, then raises the same error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

import loom_runtime
from loom_runtime import FlowContext, Loom


class _Cut(httpx.SyncByteStream, httpx.AsyncByteStream):
    """Two events, then the connection drops (what httpx's transport raises)."""

    def __iter__(self) -> Iterator[bytes]:
        yield b"data: one\n\n"
        yield b"data: two\n\n"
        raise httpx.ReadError("connection reset by peer")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:  # the same two chunks and the same error
            yield chunk


def _served(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, stream=_Cut())


def _unreachable(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the network was called on replay: {request.url}")


def _loom(url: str, handler: object, *, is_async: bool) -> Loom:
    loom = Loom(url)
    inner = httpx.MockTransport(handler)  # type: ignore[arg-type]

    def kept(got: list[str], error: httpx.ReadError) -> list[str]:
        return [*got, f"cut: {error} ({error.request.method} {error.request.url.host})"]

    if is_async:

        @loom.flow("feed")
        async def afeed(ctx: FlowContext) -> list[str]:
            got: list[str] = []
            transport = loom_runtime.async_transport(inner)
            async with httpx.AsyncClient(transport=transport) as client:
                try:
                    async with client.stream("GET", "https://events.example.com/feed") as r:
                        async for chunk in r.aiter_bytes():
                            got.append(chunk.decode())
                except httpx.ReadError as error:
                    return kept(got, error)
            return got

    else:

        @loom.flow("feed")
        def feed(ctx: FlowContext) -> list[str]:
            got: list[str] = []
            with httpx.Client(transport=loom_runtime.transport(inner)) as client:
                try:
                    with client.stream("GET", "https://events.example.com/feed") as r:
                        for chunk in r.iter_bytes():
                            got.append(chunk.decode())
                except httpx.ReadError as error:
                    return kept(got, error)
            return got

    return loom


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_body_cut_mid_stream_replays_its_chunks_then_the_error(
    tmp_path: Path, is_async: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with _loom(url, _served, is_async=is_async) as loom:
        output = loom.run("feed").output
    assert output == [
        "data: one\n\n",
        "data: two\n\n",
        "cut: connection reset by peer (GET events.example.com)",
    ]
    with _loom(url, _unreachable, is_async=is_async) as fresh:
        [summary] = fresh.executions()
        result = fresh.replay(summary.execution_id)
        assert result.identical, result.describe()
        assert result.output == output
