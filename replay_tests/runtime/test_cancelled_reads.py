"""A stream the flow cancels while reading it (a timeout around the iteration) replays as cancelled.

``asyncio.wait_for(read_the_stream(), 10)`` with a fallback on ``TimeoutError`` is how an agent
bounds a slow model's stream. The live read was cancelled waiting for its next piece; the
recording kept what had been read (incomplete), and a replay handed those pieces over and then
raised :class:`ReadPastRecordingError` where the live read had been cancelled, so the replay of
the unchanged flow was a divergence. A read cancelled this way is recorded as cancelled: a replay
hands over the same pieces, then waits where the live read waited, for the flow's own timeout to
cancel it again (ADR 0026, amended "cancelled reads").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

import loom_runtime
from loom_runtime import Loom, ReadPastRecordingError
from loom_runtime.context import replay_wait
from replay_tests.runtime.test_cancelled_calls import Unreachable, started_then_cancelled

URL = "http://feed.test/events"
KEY = "http:GET feed.test/events"


class Stalls(httpx.AsyncByteStream):
    """Two pieces at once, then nothing for 5 s (the flow gives up long before), then a third."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"one;"
        yield b"two;"
        await asyncio.sleep(5)
        yield b"three;"


class StallingFeed(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Stalls())


def _flows(loom: Loom, inner: httpx.AsyncBaseTransport, *, timeout: float = 0.3) -> None:
    @loom.flow("read-with-timeout")
    async def read_with_timeout(ctx: Any) -> str:
        read: list[str] = []

        async def read_all(response: httpx.Response) -> None:
            async for piece in response.aiter_raw():
                read.append(piece.decode())

        async with (
            httpx.AsyncClient(transport=loom_runtime.async_transport(inner)) as client,
            client.stream("GET", URL) as response,
        ):
            try:
                await asyncio.wait_for(read_all(response), timeout)
            except TimeoutError:
                return f"gave up after {''.join(read)}"
        return f"read {''.join(read)}"


def _record(url: str) -> Any:
    with Loom(url) as loom:
        _flows(loom, StallingFeed())
        run = asyncio.run(loom.arun("read-with-timeout"))
        decision = loom.execution(run.execution_id).decisions[KEY]
    return run, decision


def test_a_stream_read_cancelled_by_a_timeout_replays_to_the_same_fallback(
    sqlite_url: str,
) -> None:
    run, decision = _record(sqlite_url)
    assert run.output == "gave up after one;two;"
    with Loom(sqlite_url) as fresh:
        _flows(fresh, Unreachable())
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert result.identical, result.describe()
    assert result.output == run.output
    recorded = msgspec.json.decode(decision.value)
    assert recorded["text"] == "one;two;" and recorded["complete"] is False
    assert 0.2 < recorded["cancelled_after"] < 5


@pytest.mark.waits  # the replay waits its 1.6 s bound, idle
def test_a_cancelled_read_that_nothing_cancels_on_replay_is_a_divergence(
    sqlite_url: str,
) -> None:
    """Replayed with a timeout far longer than the live read lasted, nothing cancels the
    replayed read in time: after a bound derived from the recorded time (twice it, plus a
    second) the read fails as one past the recording, instead of hanging. It says so: the
    plain "read past" message blamed code reading more than the recorded run did."""
    run, decision = _record(sqlite_url)
    with Loom(sqlite_url) as fresh:
        _flows(fresh, Unreachable(), timeout=60)
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert not result.identical
    assert ReadPastRecordingError.__name__ in result.describe()
    # The bound comes from the time the live read ran (~0.3 s: 1.6 s), which a loaded
    # machine stretches; so it is read back from the recording, not assumed.
    bound = replay_wait(msgspec.json.decode(decision.value)["cancelled_after"])
    assert f"nothing cancelled this run's read within {bound:g} s" in result.describe()


def test_a_read_cancelled_that_stops_the_run_stores_nothing_for_the_call(sqlite_url: str) -> None:
    """A cancellation the flow does not catch stops the run (ADR 0026): the response is not
    stored (it was, as read, when the stream's close stored it), so a resume asks again."""
    with Loom(sqlite_url) as loom:

        @loom.flow("no-fallback")
        async def no_fallback(ctx: Any) -> str:
            inner = StallingFeed()
            async with (
                httpx.AsyncClient(transport=loom_runtime.async_transport(inner)) as client,
                client.stream("GET", URL) as response,
            ):
                return "".join([piece.decode() async for piece in response.aiter_raw()])

        execution_id = asyncio.run(started_then_cancelled(loom, "no-fallback", after=0.3))
        assert loom.execution(execution_id).decisions == {}


@pytest.mark.parametrize("bad", [-1.0, "soon"])
def test_a_tampered_cancellation_time_is_refused(sqlite_url: str, bad: object) -> None:
    """The recorded time bounds how long a replay waits: a negative or non-number one is not
    a recorded response."""
    from loom_runtime.http_transport import RecordedResponse

    stored = {"status": 200, "headers": [], "text": "x", "complete": False, "cancelled_after": bad}
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(stored, RecordedResponse)


def test_a_stream_read_cut_by_a_step_timeout_replays_to_the_same_fallback(loom: Loom) -> None:
    """A timeout around a step: a call that took most of it, then a streamed read cut soon
    after its first pieces (a model's reply streamed inside a step's budget). A replay answers
    the first call at once, so the flow's timer fires as late into the run as it did live, but
    the read waited only twice its own short time and a second, and every replay of the
    unchanged flow reported ``ReadPastRecordingError`` (a regression review). It waits, as a
    cut call does, for a timer of the loop due by the live cut's time in the run."""

    _timed_read(loom, "step-read", limit=1.6, before=1.45)
    run = loom.run("step-read")
    assert run.output == "fallback after one;two;"
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()


def test_a_stream_whose_read_raises_cancelled_error_itself_replays_identical(
    loom: Loom,
) -> None:
    """A body whose read raises ``CancelledError`` of its own (a stream closed upstream), not
    the flow's timeout, was stored as a read the flow cut, so its replay waited for a timeout
    that never came and reported ``ReadPastRecordingError`` (a regression review). It is
    stored as what the read raised, and a replay raises it again at once."""

    class ClosedUpstream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b"one;"
            await asyncio.sleep(0)
            raise asyncio.CancelledError("stream closed upstream")

    class Closes(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, stream=ClosedUpstream())

    @loom.flow("read-raises")
    async def read_raises(ctx: Any) -> str:
        got: list[str] = []
        async with httpx.AsyncClient(transport=loom_runtime.async_transport(Closes())) as client:
            try:
                async with client.stream("GET", URL) as response:
                    async for piece in response.aiter_raw():
                        got.append(piece.decode())
            except asyncio.CancelledError as cancelled:
                return f"caught {cancelled} after {''.join(got)}"
        return "read " + "".join(got)

    run = loom.run("read-raises")
    assert run.output == "caught stream closed upstream after one;"
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


def test_a_read_cut_by_a_step_timeout_ends_its_replay_under_a_frozen_clock(loom: Loom) -> None:
    """Under ``freeze_time(tick=False)`` no timer fires: a replayed read cut by a timeout
    waited with a plain sleep, and the replay never ended (a regression review; cut calls
    already ended, ADR 0026 "frozen clock"). It waits as a cut call does, ended by a clock
    seen standing still."""
    import threading

    from freezegun import freeze_time

    _timed_read(loom, "frozen-read", limit=0.3)
    run = loom.run("frozen-read")
    ended: list[object] = []

    def replay() -> None:
        with freeze_time("2026-12-07", tick=False):
            ended.append(loom.replay(run.execution_id))

    thread = threading.Thread(target=replay, daemon=True)
    thread.start()
    thread.join(30)
    assert ended, "the replay did not end within 30 s"


class _Stalling(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Stalls())


def _timed_read(loom: Loom, name: str, *, limit: float, before: float | None = None) -> None:
    """Flow ``name``: a step under ``asyncio.timeout(limit)`` that first waits ``before``
    seconds in a decision (if given), then reads the stalling stream until the step's
    timeout cuts the read; it returns what it read."""

    @loom.flow(name)
    async def timed_read(ctx: Any) -> str:
        got: list[str] = []
        async with httpx.AsyncClient(transport=loom_runtime.async_transport(_Stalling())) as client:
            try:
                async with asyncio.timeout(limit):
                    if before is not None:
                        await ctx.decide("first", lambda: asyncio.sleep(before, "a"))
                    async with client.stream("GET", URL) as response:
                        async for piece in response.aiter_raw():
                            got.append(piece.decode())
            except TimeoutError:
                return "fallback after " + "".join(got)
        return "read " + "".join(got)
