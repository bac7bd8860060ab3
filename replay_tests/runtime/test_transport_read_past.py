"""ADR 0024, amended: a replayed body is read as the live one was: one reader, and no further
than the recording goes.

A response the live caller closed early is recorded as far as it was read (``complete:
false``). Code that now reads it to its end asks for what was never received: its replay
must say so, not hand back the part as if it were the whole. The recording's own reader,
closing where it closed live, still replays identically (the control). And a body iterated a
second time continues where the first iteration stopped, live and replayed alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom, ReadPastRecordingError
from replay_tests.runtime.test_transport import Unreachable

URL = "https://events.example/feed"
KEY = "http:GET events.example/feed"
EVENTS = [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]


class Feed(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield from EVENTS

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in EVENTS:
            yield event


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, stream=Feed())


def build(url: str, inner: Any, *, keep: int | None) -> Loom:
    """Flows reading the feed's first ``keep`` events (None: all of them), sync and async."""
    loom = Loom(url)

    @loom.flow("read")
    def read(ctx: Any) -> list[str]:
        seen: list[str] = []
        with (
            httpx.Client(transport=loom_runtime.transport(inner)) as client,
            client.stream("GET", URL) as response,
        ):
            for chunk in response.iter_bytes():
                seen.append(chunk.decode())
                if len(seen) == keep:
                    break
        return seen

    @loom.flow("twice")
    def twice(ctx: Any) -> list[str]:
        """Takes a piece, then iterates the body again (as an SDK draining it does)."""
        with (
            httpx.Client(transport=loom_runtime.transport(inner)) as client,
            client.stream("GET", URL) as response,
        ):
            pieces = [next(iter(response.stream)).decode()]
            pieces += [piece.decode() for piece in response.stream]
        return pieces

    @loom.flow("aread")
    async def aread(ctx: Any) -> list[str]:
        seen: list[str] = []
        async with (
            httpx.AsyncClient(transport=loom_runtime.async_transport(inner)) as client,
            client.stream("GET", URL) as response,
        ):
            async for chunk in response.aiter_bytes():
                seen.append(chunk.decode())
                if len(seen) == keep:
                    break
        return seen

    return loom


def _run(loom: Loom, flow: str) -> Any:
    if flow == "aread":
        return asyncio.run(loom.arun(flow))
    return loom.run(flow)


def _replay(loom: Loom, flow: str, execution_id: Any) -> Any:
    if flow == "aread":
        return asyncio.run(loom.areplay(execution_id))
    return loom.replay(execution_id)


@pytest.mark.parametrize("flow", ["read", "aread"])
def test_reading_past_where_the_recorded_run_closed_is_reported(sqlite_url: str, flow: str) -> None:
    """Recorded after one event; replayed by code that reads to the end: the flow gets
    :class:`ReadPastRecordingError` naming the decision, and the replay reports it."""
    inner = httpx.MockTransport(answer)
    with build(sqlite_url, inner, keep=1) as loom:
        run = _run(loom, flow)
        (decision,) = loom.execution(run.execution_id).decisions.values()
    assert run.output == ["data: one\n\n"]
    assert msgspec.json.decode(decision.value)["complete"] is False
    with build(sqlite_url, Unreachable(), keep=1) as same:  # the control: closes where it did
        assert _replay(same, flow, run.execution_id).identical
    with build(sqlite_url, Unreachable(), keep=None) as reads_all:
        result = _replay(reads_all, flow, run.execution_id)
    [divergence] = result.divergences
    assert isinstance(divergence, ReadPastRecordingError), result.describe()
    assert repr(KEY) in str(divergence)


def test_a_response_read_to_its_end_replays_to_its_end(sqlite_url: str) -> None:
    """A complete recording read to the end is no divergence: the end is the recorded end."""
    with build(sqlite_url, httpx.MockTransport(answer), keep=None) as loom:
        run = loom.run("read")
    with build(sqlite_url, Unreachable(), keep=None) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == [event.decode() for event in EVENTS]


def test_a_body_iterated_again_continues_on_replay_as_it_did_live(sqlite_url: str) -> None:
    """Live, a second iteration continues the one reader; the replayed body must too, or an
    unchanged flow reads the first piece twice and its output diverges."""
    with build(sqlite_url, httpx.MockTransport(answer), keep=None) as loom:
        run = loom.run("twice")
    assert run.output == [event.decode() for event in EVENTS]
    with build(sqlite_url, Unreachable(), keep=None) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output


def test_reading_past_the_recording_is_reported_when_the_flow_catches_it(
    sqlite_url: str,
) -> None:
    """Code that reads to the end inside ``except Exception`` (a reader that keeps what it
    got) took :class:`ReadPastRecordingError` as one more failure of the network, returned
    the recorded part, and its replay was reported identical (a verdict review). The replay
    cannot answer what the code now reads: that is reported whatever the flow does with it."""
    keep: dict[str, int | None] = {"events": 1}

    def build_catching(inner: Any) -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("read-catching")
        def read_catching(ctx: Any) -> list[str]:
            seen: list[str] = []
            try:
                with (
                    httpx.Client(transport=loom_runtime.transport(inner)) as client,
                    client.stream("GET", URL) as response,
                ):
                    for chunk in response.iter_bytes():
                        seen.append(chunk.decode())
                        if len(seen) == keep["events"]:
                            break
            except Exception:
                pass
            return seen

        return loom

    with build_catching(httpx.MockTransport(answer)) as loom:
        run = loom.run("read-catching")
    with build_catching(Unreachable()) as same:  # the control: closes where it did
        assert same.replay(run.execution_id).identical
    keep["events"] = None
    with build_catching(Unreachable()) as reads_all:
        result = reads_all.replay(run.execution_id)
    assert result.output == run.output  # the flow hid it: the outcome alone looks the same
    assert any(isinstance(d, ReadPastRecordingError) for d in result.divergences), result.describe()


def test_a_body_read_past_twice_is_reported_once(sqlite_url: str) -> None:
    """A flow that catches the read past and reads the body again (as an SDK draining it
    does) got two identical ``ReadPastRecordingError`` findings for one decision (a regression
    review): the same finding is raised again and reported once."""
    keep: dict[str, int | None] = {"events": 1}

    def build_twice(inner: Any) -> Loom:
        loom = Loom(sqlite_url)

        @loom.flow("read-twice")
        def read_twice(ctx: Any) -> str:
            seen: list[str] = []
            with (
                httpx.Client(transport=loom_runtime.transport(inner)) as client,
                client.stream("GET", URL) as response,
            ):
                for _ in range(2 if keep["events"] is None else 1):
                    try:
                        for chunk in response.stream:
                            seen.append(chunk.decode())
                            if len(seen) == keep["events"]:
                                break
                    except ReadPastRecordingError:
                        pass
            return seen[0]

        return loom

    with build_twice(httpx.MockTransport(answer)) as loom:
        run = loom.run("read-twice")
    keep["events"] = None
    with build_twice(Unreachable()) as reads_all:
        result = reads_all.replay(run.execution_id)
    assert [type(d) for d in result.divergences] == [ReadPastRecordingError], result.describe()
