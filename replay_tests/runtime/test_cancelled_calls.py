"""An async call the flow cancels (a timeout around it) is recorded, and replays as cancelled.

``await asyncio.wait_for(client.get(...), 0.1)`` with a fallback on ``TimeoutError`` is a
common agent pattern. The cancelled call took its occurrence of the key but stored nothing
(``CancelledError`` is not an ``Exception``), so only the fallback's call was in the log, and
a replay of the unchanged flow failed: its first call found nothing recorded. A cancelled call
is now recorded as such; on replay it waits, unanswered, to be cancelled again by the flow's
own timeout, so the flow takes the path it took live.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any

import httpx
import pytest

import loom_runtime
from loom_runtime import CancellationNotRepeatedError, Loom, ReplayDivergence


def _flows(loom: Loom, inner: httpx.AsyncBaseTransport, *, timeout: float = 0.2) -> None:
    @loom.flow("with-fallback")
    async def with_fallback(ctx: Any) -> str:
        async with httpx.AsyncClient(transport=loom_runtime.async_transport(inner)) as client:
            try:
                reply = await asyncio.wait_for(client.get("http://svc.test/answer"), timeout)
            except TimeoutError:
                reply = await client.get("http://svc.test/answer")  # the same call, again
                return f"fallback: {reply.text}"
            return f"first: {reply.text}"


class SlowFirst(httpx.AsyncBaseTransport):
    """Answers the first request after 5 s (the flow gives up long before), the rest at once."""

    def __init__(self) -> None:
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        if self.sent == 1:
            await asyncio.sleep(5)
        return httpx.Response(200, text=f"answer {self.sent}")


class Unreachable(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError("a replay sent a request")


def test_a_call_cancelled_by_a_timeout_is_recorded_and_replays_as_cancelled(
    sqlite_url: str,
) -> None:
    with Loom(sqlite_url) as loom:
        _flows(loom, SlowFirst())
        run = asyncio.run(loom.arun("with-fallback"))
        decisions = loom.execution(run.execution_id).decisions
    assert run.output == "fallback: answer 2"
    first = decisions["http:GET svc.test/answer"]
    assert first.error_type == "asyncio.exceptions:CancelledError"
    with Loom(sqlite_url) as fresh:
        _flows(fresh, Unreachable())
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert result.identical, result.describe()
    assert result.output == run.output


@pytest.mark.waits  # the replay waits its 1.4 s bound, idle
def test_a_recorded_cancellation_nothing_cancels_on_replay_is_a_divergence(
    sqlite_url: str,
) -> None:
    """Replayed with a timeout far longer than the call took live to be cancelled, nothing
    cancels the replayed call in time: after waiting a bound derived from the recorded time,
    the replay reports a divergence rather than hanging."""
    with Loom(sqlite_url) as loom:
        _flows(loom, SlowFirst())
        run = asyncio.run(loom.arun("with-fallback"))
    with Loom(sqlite_url) as fresh:
        _flows(fresh, Unreachable(), timeout=60)
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert not result.identical
    with pytest.raises(ReplayDivergence):
        result.raise_for_divergence()
    assert "cancelled" in result.describe()


def _fallback_flow(*, timeout: float | None, caught: type[Exception]) -> Any:
    """A flow asking a slow decision (under ``timeout``, if any) that returns "fallback" when
    the call raises ``caught``."""

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late answer"

    async def flow(ctx: Any) -> str:
        try:
            asked = ctx.decide("slow", slow)
            return await (asked if timeout is None else asyncio.wait_for(asked, timeout))
        except caught:
            return "fallback"

    return flow


def test_a_recorded_cancellation_the_flow_catches_is_still_a_divergence(
    sqlite_url: str,
) -> None:
    """The recorded run's timeout cancelled the call; the new code has no timeout and catches
    ``Exception`` around it. Nothing cancelled the replayed call, so after its bound the
    recorded cancellation was raised into the flow, which caught it and returned its fallback:
    "identical", where live the new code would have waited for the answer. A recorded
    cancellation nothing repeats is now a divergence of its own, caught or not."""

    with Loom(sqlite_url) as loom:
        loom.flow("timed")(_fallback_flow(timeout=0.05, caught=TimeoutError))
        run = asyncio.run(loom.arun("timed"))
    assert run.output == "fallback"
    with Loom(sqlite_url) as fresh:
        fresh.flow("timed")(_fallback_flow(timeout=None, caught=Exception))
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert not result.identical
    assert "cancelled" in result.describe(), result.describe()
    assert result.output == "fallback"  # the flow's own path, as before


def test_a_frozen_clock_that_keeps_the_timeout_from_firing_is_no_divergence(
    sqlite_url: str,
) -> None:
    """Under freezegun no timer fires: the replayed call's bound is taken as passed once the
    clock is seen standing still (ADR 0026, "frozen clock"). The first form of the
    divergence above called that a code change, so an unchanged flow with a catch-all
    fallback diverged under a frozen clock (a regression review). Only a bound that passed on
    a moving clock is the code's."""
    from freezegun import freeze_time

    with Loom(sqlite_url) as loom:
        loom.flow("guarded")(_fallback_flow(timeout=0.05, caught=Exception))
        run = loom.run("guarded")
        assert loom.replay(run.execution_id).identical  # the control: a moving clock
        with freeze_time("2026-12-07"):
            result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def _other_paths(loom: Loom) -> None:
    """The same pattern through an awaited ``ctx.decide`` compute and an async ``@tool``."""
    calls = {"compute": 0, "tool": 0}

    async def slow_first(name: str) -> str:
        calls[name] += 1
        if calls[name] == 1:
            await asyncio.sleep(5)
        return f"{name} {calls[name]}"

    @loom_runtime.tool
    async def search(query: str) -> str:
        return await slow_first("tool")

    @loom.flow("decide-with-fallback")
    async def decide_with_fallback(ctx: Any) -> list[str]:
        answers = []
        for ask in (
            lambda: ctx.decide("compute", lambda: slow_first("compute")),
            lambda: search("q"),
        ):
            try:
                answers.append(await asyncio.wait_for(ask(), 0.2))
            except TimeoutError:
                answers.append(f"fallback: {await ask()}")
        return answers


@pytest.mark.parametrize("driver", ["decide", "tool"])
def test_an_awaited_decide_or_tool_cancelled_by_a_timeout_replays_as_cancelled(
    sqlite_url: str, driver: str
) -> None:
    with Loom(sqlite_url) as loom:
        _other_paths(loom)
        run = asyncio.run(loom.arun("decide-with-fallback"))
        decisions = loom.execution(run.execution_id).decisions
    assert run.output == ["fallback: compute 2", "fallback: tool 2"]
    key = {"decide": "compute", "tool": "tool:search"}[driver]
    assert decisions[key].error_type == "asyncio.exceptions:CancelledError"
    with Loom(sqlite_url) as fresh:
        _other_paths(fresh)  # its computes would answer at once: the log answers instead
        result = asyncio.run(fresh.areplay(run.execution_id))
    assert result.identical, result.describe()
    assert result.output == run.output


def test_a_run_stopped_by_the_cancellation_stores_nothing_for_the_call_and_resumes(
    sqlite_url: str,
) -> None:
    """A cancellation the flow does not catch stops the run (ADR 0026): nothing is stored for
    the call, the execution is left unfinished, and a resume computes the call again."""
    calls = {"n": 0}

    async def slow_first() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            await asyncio.sleep(5)
        return f"answer {calls['n']}"

    with Loom(sqlite_url) as loom:

        @loom.flow("no-fallback")
        async def no_fallback(ctx: Any) -> str:
            return str(await ctx.decide("slow", slow_first))

        execution_id = asyncio.run(started_then_cancelled(loom, "no-fallback", after=0.2))
        assert loom.execution(execution_id).decisions == {}
        resumed = asyncio.run(loom.aresume(execution_id))
    assert resumed.output == "answer 2"


async def started_then_cancelled(loom: Loom, flow: str, *, after: float) -> Any:
    """Start ``flow`` and cancel its task ``after`` seconds (the run stops: nothing catches
    the cancellation); the id of the execution it leaves unfinished."""
    task = asyncio.ensure_future(loom.arun(flow))
    await asyncio.sleep(after)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (unfinished,) = [e for e in loom.executions() if e.flow == flow]
    return unfinished.execution_id


class _TakenMeanwhile(list[Any]):
    """The pending stores of cancellations, one of which another thread stores between this
    thread's look (``while pending:``, the second look at the list) and its pop."""

    def __init__(self, pending: list[Any]) -> None:
        super().__init__(pending)
        self.looks = 0

    def __len__(self) -> int:
        self.looks += 1
        if self.looks == 2 and super().__len__() == 1:
            super().__len__()  # the other thread: it looks, pops and stores it first
            self.pop(0)()
            return 1  # what this thread saw, an instant before
        return super().__len__()


def test_a_cancellation_another_thread_stored_first_is_not_popped_again(loom: Loom) -> None:
    """Threads of one flow (sync tools on worker threads) each store the pending
    cancellations as they ask their next decision: one finding the list emptied between its
    look and its pop raised IndexError into the flow."""

    @loom.flow("taken")
    async def taken(ctx: Any) -> str:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.decide("slow", lambda: asyncio.sleep(5)), 0.01)
        ctx._cancellations = _TakenMeanwhile(ctx._cancellations)
        return str(await ctx.decide("next", lambda: "went on"))

    run = loom.run("taken")
    assert run.output == "went on"
    assert loom.execution(run.execution_id).decisions["slow"].error_type is not None  # stored
    assert loom.replay(run.execution_id).identical


def test_a_sync_cancellation_without_a_message_replays_without_one(loom: Loom) -> None:
    """``task.cancel()`` with no message raises ``CancelledError()`` (no args); the replay
    raised ``CancelledError("")``, so a flow that recorded ``e.args`` diverged (a regression
    review)."""

    async def cancelled() -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(0)
        return "never"

    @loom.flow("no-message")
    def no_message(ctx: Any) -> str:
        try:
            ctx.decide("inner", lambda: asyncio.run(cancelled()))
        except asyncio.CancelledError as cancellation:
            return f"{ctx.decide('after', lambda: 'went on')}: {cancellation.args!r}"
        return "not cancelled"

    run = loom.run("no-message")
    assert run.output == "went on: ()"
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def _cancelled_inside() -> str:
    """A sync compute that ends in ``asyncio.CancelledError``: ``asyncio.run`` of a task that
    something cancels (here itself) raises it into the caller."""

    async def cancelled() -> str:
        asyncio.current_task().cancel("user pressed stop")  # type: ignore[union-attr]
        await asyncio.sleep(0)
        return "never"

    return asyncio.run(cancelled())


@pytest.mark.parametrize("retry", [None, loom_runtime.Backoff(attempts=2, first_pause=0)])
def test_a_sync_compute_that_raises_cancelled_error_the_flow_catches_replays(
    loom: Loom, retry: loom_runtime.Backoff | None
) -> None:
    """A plain decide (no ``retry=``) of a sync flow computed on a path of its own that caught
    only ``Exception``: a compute ending in ``CancelledError`` (a ``BaseException``) stored
    nothing, so when the flow caught it and went on, its replay failed as unrecorded (noted
    by a regression review). It is stored as the ``retry=`` path stores it, once the flow goes
    on (ADR 0026, "cancelled")."""

    @loom.flow("sync-cancelled")
    def sync_cancelled(ctx: Any) -> str:
        try:
            ctx.decide("inner", _cancelled_inside, retry=retry)
        except asyncio.CancelledError as cancelled:
            said = str(cancelled) if retry is None else "?"  # the plain path keeps its words
            return f"{ctx.decide('after', lambda: 'went on')}: {said}"
        return "not cancelled"

    run = loom.run("sync-cancelled")
    assert run.output == ("went on: user pressed stop" if retry is None else "went on: ?")
    stored = loom.execution(run.execution_id).decisions
    assert stored["inner"].error_type == "asyncio.exceptions:CancelledError", stored
    # Its own words on either path: the retry= path stored the "cancelled after" form of a
    # call an async flow's timeout cut, which no timeout of a sync flow's did.
    assert stored["inner"].message == "user pressed stop", stored
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.divergences
    assert replayed.output == run.output


def test_an_async_compute_that_raises_cancelled_error_itself_replays_identical(
    loom: Loom,
) -> None:
    """An awaited compute that raises ``CancelledError`` of its own (a client library's way to
    say a stream was closed upstream), not cancelled by the flow: it was stored as a
    cancellation by the flow's timeout, so its replay waited for a timeout that never comes
    and reported ``CancellationNotRepeatedError`` (an older item of a verdict review). Only a
    task the flow cancelled is cancelling; this one is stored with its own message, as a sync
    compute's is, and raised again at once on replay."""

    async def closed_upstream() -> str:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("stream closed upstream")

    @loom.flow("async-cancelled-itself")
    async def cancelled_itself(ctx: Any) -> str:
        try:
            await ctx.decide("inner", closed_upstream)
        except asyncio.CancelledError as cancelled:
            return f"{await ctx.decide('after', lambda: 'went on')}: {cancelled}"
        return "not cancelled"

    run = loom.run("async-cancelled-itself")
    assert run.output == "went on: stream closed upstream"
    stored = loom.execution(run.execution_id).decisions["inner"]
    assert (stored.error_type, stored.message) == (
        "asyncio.exceptions:CancelledError",
        "stream closed upstream",
    )
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


@loom_runtime.tool
async def _closed_upstream_tool() -> str:
    await asyncio.sleep(0)
    raise asyncio.CancelledError("stream closed upstream")


class _ClosesUpstream(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("stream closed upstream")


@pytest.mark.parametrize("call", ["tool", "http"])
def test_a_recorded_call_that_raises_cancelled_error_itself_replays_identical(
    loom: Loom, call: str
) -> None:
    """The fix above covered ``ctx.decide``; a ``@tool`` and the httpx transport (and an MCP
    call, the same code) still stored a ``CancelledError`` the call raised itself as the
    flow's cut, so the unchanged flow's replay waited for a timeout that never came and
    diverged (a regression review). Each now stores it as raised, and its replay raises it
    again at once."""

    async def ask() -> str:
        if call == "tool":
            return await _closed_upstream_tool()
        transport = loom_runtime.async_transport(_ClosesUpstream())
        async with httpx.AsyncClient(transport=transport) as client:
            return (await client.get("http://svc.test/feed")).text

    @loom.flow(f"{call}-cancelled-itself")
    async def cancelled_itself(ctx: Any) -> str:
        try:
            return await ask()
        except asyncio.CancelledError as cancelled:
            return f"caught: {cancelled}"

    run = loom.run(f"{call}-cancelled-itself")
    assert run.output == "caught: stream closed upstream"
    (stored,) = loom.execution(run.execution_id).decisions.values()
    assert stored.message == "stream closed upstream", stored
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output


def test_a_timeout_around_several_calls_cuts_the_last_again_on_replay(loom: Loom) -> None:
    """``asyncio.timeout`` around a step of two calls: the first took most of the time, the
    second was cut soon after it started. A replay answers the first at once, so the flow's
    timer fires as long after the start as it did live, but the second waited for it only
    twice its own short run plus a second, and every replay of the unchanged flow reported
    ``CancellationNotRepeatedError`` (a regression review). A cut now also records when, in
    the run, it came, and the replay waits for a timer of the loop due by then. The control:
    code that no longer times the step out diverges after the call's own short bound, not
    after the live run's time (the first form waited that long: a second review)."""
    limit: dict[str, float | None] = {"step": 1.6}

    @loom.flow("step-timeout")
    async def step_timeout(ctx: Any) -> str:
        try:
            async with asyncio.timeout(limit["step"]):
                await ctx.decide("first", lambda: asyncio.sleep(1.45, "a"))
                return str(await ctx.decide("second", lambda: asyncio.sleep(30, "b")))
        except TimeoutError:
            return "fallback"

    run = loom.run("step-timeout")
    assert run.output == "fallback"
    for _ in range(2):
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
    limit["step"] = None  # the timeout removed
    diverged = loom.replay(run.execution_id)
    [waited] = [
        d.waited for d in diverged.divergences if isinstance(d, CancellationNotRepeatedError)
    ]
    assert waited < 1.6, waited  # twice the cut call's ~0.15 s and a second, no timer to wait for


def test_a_step_timer_armed_by_another_task_after_the_wait_began_is_waited_for(
    loom: Loom,
) -> None:
    """A watchdog task created after the step's task cancels the step at 1.6 s. On replay the
    step's first call is answered at once, so its cut call began to wait before the watchdog
    had armed its sleep: the first form of the longer wait looked for a timer only then, found
    none, and every replay of the unchanged flow diverged (a regression review). The wait asks
    again as its bound passes."""

    @loom.flow("watchdog")
    async def watchdog(ctx: Any) -> str:
        task = asyncio.ensure_future(_long_then_stuck(ctx))

        async def dog() -> None:
            await asyncio.sleep(1.6)
            task.cancel()

        return await _watched(task, dog())

    run = loom.run("watchdog")
    assert run.output == "watchdog"
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()


def test_a_loop_that_does_not_list_its_timers_is_waited_on_for_the_whole_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvloop lists no timers (no ``_scheduled``): the first form read that as "no timer" and
    cut the wait short, so unchanged step-timeout flows diverged under uvloop (a regression
    review). Such a loop is waited on until the window's end, as any timer may be there; the
    control, an asyncio loop with no timer due, ends the wait."""
    import time

    from loom_runtime import recorded_order

    async def asked() -> tuple[float | None, float | None]:
        until = time.perf_counter() + 2.0
        listed = recorded_order.step_timer(until)()
        monkeypatch.setattr(recorded_order.asyncio, "get_running_loop", lambda: object())
        return listed, recorded_order.step_timer(until)()

    listed, unlisted = asyncio.run(asked())
    assert listed is None  # asyncio's loop, no timer due: no longer wait
    assert unlisted is not None and 1.5 < unlisted <= 2.0, unlisted


def test_a_raised_cancellation_the_code_no_longer_catches_is_reported_not_raised(
    loom: Loom,
) -> None:
    """A tool that raised ``CancelledError`` itself, caught live; code that no longer catches
    it let the replayed cancellation out of ``loom.replay()`` itself (a regression review): a
    test calling it saw its own task cancelled. It is the replay's changed outcome."""
    catching = {"on": True}

    @loom.flow("stops-catching")
    async def stops_catching(ctx: Any) -> str:
        if not catching["on"]:
            return await _closed_upstream_tool()
        try:
            return await _closed_upstream_tool()
        except asyncio.CancelledError:
            return "caught"

    run = loom.run("stops-catching")
    assert run.output == "caught"
    catching["on"] = False
    replayed = loom.replay(run.execution_id)
    assert not replayed.identical
    assert "CancelledError" in replayed.describe(), replayed.describe()


def test_a_polling_watchdog_cuts_the_call_again_and_a_heartbeat_wait_ends_with_the_window(
    loom: Loom,
) -> None:
    """A watchdog that polls a deadline every 0.1 s makes a new timer each tick, so the one
    that cuts the call is armed after the wait's bound first passed. A third form of the
    longer wait counted only the timers pending then (to keep a heartbeat beside a removed
    timeout from stretching a divergent replay), and every replay of such an unchanged flow
    diverged (a fifth regression review). Any timer counts again; the price, pinned here: a
    heartbeat beside a removed timeout keeps the divergent replay waiting until the run is as
    far as the live cut (1.6 s here, plus a second), never longer."""
    watched = {"on": True}

    @loom.flow("polling-watchdog")
    async def polling_watchdog(ctx: Any) -> str:
        task = asyncio.ensure_future(_long_then_stuck(ctx))
        deadline = asyncio.get_running_loop().time() + 1.6

        async def dog() -> None:
            while asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)  # a poll, and a heartbeat once nothing is watched
            if watched["on"]:
                task.cancel()

        return await _watched(task, dog())

    run = loom.run("polling-watchdog")
    assert run.output == "watchdog"
    for _ in range(2):
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
    watched["on"] = False  # the watchdog still polls, but no longer cuts the step
    started = time.perf_counter()
    assert not loom.replay(run.execution_id).identical
    assert time.perf_counter() - started < 4.0  # the 2.6 s window and some slack, not 30 s


async def _watched(task: asyncio.Future[str], dog: Coroutine[Any, Any, None]) -> str:
    """``task``'s answer, or "watchdog" when ``dog``, run beside it, cancels it."""
    guard = asyncio.ensure_future(dog)
    try:
        return await task
    except asyncio.CancelledError:
        return "watchdog"
    finally:
        guard.cancel()


async def _long_then_stuck(ctx: Any) -> str:
    """A step of two calls: one that takes 1.45 s, then one that would take 30 s."""
    await ctx.decide("first", lambda: asyncio.sleep(1.45, "a"))
    return str(await ctx.decide("second", lambda: asyncio.sleep(30, "b")))
