"""A replay hands an async flow's recorded answers back in the order they were recorded.

Live, concurrent calls finish in whatever order the world answers them, and the log records
that order. A replay answers every call at once, so without more, tasks finished in the order
they were started: code that acts on which call finished first (``asyncio.as_completed``,
``asyncio.wait(return_when=FIRST_COMPLETED)``, a ``TaskGroup`` whose failing task cancels its
siblings) took another path on every replay and was reported as diverging when nothing had
changed (ADR 0002, amended "completion order").
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest
from freezegun import freeze_time

import loom_runtime
from loom_runtime import Loom, ReplayResult, context, tool
from loom_runtime.execution import Decision
from loom_runtime.recorded_order import SETTLE_PASSES, RecordedOrder, completion_order

pytestmark = pytest.mark.xdist_group("completion_order")

DELAYS = {"slow": 0.05, "fast": 0.0}
"""Live, the call started first ("slow") finishes last. Calls are started as tasks in a fixed
order: ``as_completed`` of bare coroutines starts them in a set's (arbitrary) order."""


def _started(ctx: Any) -> list[asyncio.Future[str]]:
    """The calls "slow" and "fast" as decisions, started as tasks in that order."""

    async def ask(name: str) -> str:
        await asyncio.sleep(DELAYS[name])
        return name

    return [
        asyncio.ensure_future(ctx.decide(name, lambda n=name: ask(n))) for name in ("slow", "fast")
    ]


def _hedged(loom: Loom, *, interrupted: Callable[[], bool] = lambda: False) -> None:
    """Flow "hedged": two calls started together, used as they finish; ``interrupted()``
    says whether the process stops right after (as a kill would)."""

    @loom.flow("hedged")
    async def hedged(ctx: Any) -> list[str]:
        calls = _started(ctx)
        order = [await finished for finished in asyncio.as_completed(calls)]
        if interrupted():
            raise KeyboardInterrupt  # the process stops here
        await ctx.decide("answer", lambda: "+".join(order), input=order)
        return order


def test_as_completed_replays_in_the_recorded_order(loom: Loom) -> None:
    _hedged(loom)
    run = loom.run("hedged")
    assert run.output == ["fast", "slow"]  # the control: live, the later call finished first
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == ["fast", "slow"]


def test_the_first_completed_wins_and_the_loser_is_cancelled_again(loom: Loom) -> None:
    @loom.flow("race")
    async def race(ctx: Any) -> str:
        done, pending = await asyncio.wait(_started(ctx), return_when=asyncio.FIRST_COMPLETED)
        for loser in pending:
            loser.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        winner = done.pop().result()
        return str(await ctx.decide("use", lambda: f"used {winner}", input=winner))

    run = loom.run("race")
    assert run.output == "used fast"
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == "used fast"


def test_a_task_group_s_failure_cancels_the_sibling_only_after_it_answered(loom: Loom) -> None:
    """Live, the sibling's call finished before the failing one failed; on replay it must be
    answered before the failure cancels it, or its recorded decision goes unused."""

    @loom.flow("group")
    async def group(ctx: Any) -> str:
        async def failing() -> str:
            await asyncio.sleep(0.05)
            raise ValueError("the slow call failed")

        async def quick() -> str:
            await asyncio.sleep(0)  # asks after one pass of the loop: live, long before
            return str(await ctx.decide("quick", lambda: "quick"))

        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(ctx.decide("failing", failing))
                tasks.create_task(quick())
        except ExceptionGroup as failed:
            return f"failed: {failed.exceptions[0]}"
        return "no failure"

    run = loom.run("group")
    assert run.output == "failed: the slow call failed"
    assert list(loom.execution(run.execution_id).decisions) == ["quick", "failing"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_gathered_calls_and_the_clock_between_them_replay_identically(loom: Loom) -> None:
    """A sync call (the clock) inside concurrent tasks is handed out when asked; it must
    not hold back the calls recorded after it."""

    @loom.flow("mixed")
    async def mixed(ctx: Any) -> list[str]:
        async def one(i: int) -> str:
            async def compute() -> str:
                await asyncio.sleep(0.05 * (3 - i))  # gaps a loaded machine keeps in order
                return f"v{i}"

            ctx.now()
            return str(await ctx.decide("k", compute))

        calls = [asyncio.ensure_future(one(i)) for i in range(3)]
        return [await finished for finished in asyncio.as_completed(calls)]

    run = loom.run("mixed")
    assert run.output == ["v2", "v1", "v0"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_hedging_call_started_after_a_timeout_is_waited_for(loom: Loom) -> None:
    """Live, the first call had not answered within the timeout, so a second was started, and
    answered first. On replay the first call's answer waits for the second, which the flow
    starts only when its timer fires: a pending timer must keep the answer waiting."""

    @loom.flow("backup")
    async def backup(ctx: Any) -> list[str]:
        async def ask(name: str, delay: float) -> str:
            await asyncio.sleep(delay)
            return name

        first = asyncio.ensure_future(ctx.decide("first", lambda: ask("first", 0.3)))
        done, _ = await asyncio.wait([first], timeout=0.1)
        if done:
            return [first.result()]
        second = asyncio.ensure_future(ctx.decide("second", lambda: ask("second", 0.0)))
        return [await finished for finished in asyncio.as_completed([first, second])]

    run = loom.run("backup")
    assert run.output == ["second", "first"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def _ends(replay: Callable[[], ReplayResult]) -> ReplayResult:
    """``replay()``'s result, or a failure (not a hung suite) when it does not end: run on a
    daemon thread, which a hung replay cannot keep the process alive with."""
    outcome: list[ReplayResult | BaseException] = []

    def run() -> None:
        try:
            outcome.append(replay())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert outcome, "the replay did not end within 30 s"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def test_a_replay_whose_code_no_longer_asks_an_earlier_call_still_ends(loom: Loom) -> None:
    """The answer held back for a call recorded earlier is given up on when nothing can ask
    that call any more: the replay ends, and reports the divergence."""
    _hedged(loom)
    run = loom.run("hedged")

    with Loom(loom.settings.url) as changed:

        @changed.flow("hedged")
        async def hedged(ctx: Any) -> list[str]:  # the fast call is gone
            value = await ctx.decide("slow", lambda: "slow")
            return [str(value)]

        result = _ends(lambda: changed.replay(run.execution_id))
    assert result.output == ["slow"]  # answered, after the watch gave up on "fast"
    assert not result.identical
    assert {type(found).__name__ for found in result.divergences} >= {"UnusedDecisionsError"}


def test_a_divergent_replay_under_a_frozen_clock_still_ends(loom: Loom) -> None:
    """Giving up on an earlier call must not wait for a clock: a frozen one never moves."""
    _hedged(loom)
    run = loom.run("hedged")
    with Loom(loom.settings.url) as changed:

        @changed.flow("hedged")
        async def hedged(ctx: Any) -> list[str]:
            value = await ctx.decide("slow", lambda: "slow")
            return [str(value)]

        with freeze_time("2026-01-01"):
            result = _ends(lambda: changed.replay(run.execution_id))
    assert result.output == ["slow"]
    assert not result.identical


def test_recorded_http_calls_replay_in_the_order_they_finished(loom: Loom) -> None:
    """The calls an SDK makes through the recording transport are ordered as decisions are."""

    async def answer(request: httpx.Request) -> httpx.Response:
        name = request.url.path.strip("/")
        await asyncio.sleep(DELAYS[name])
        return httpx.Response(200, json={"name": name})

    def build(target: Loom, inner: httpx.AsyncBaseTransport) -> None:
        @target.flow("fetch")
        async def fetch(ctx: Any) -> list[str]:
            transport = loom_runtime.async_transport(inner)
            async with httpx.AsyncClient(transport=transport, base_url="http://models") as client:
                calls = [asyncio.ensure_future(client.get(f"/{n}")) for n in ("slow", "fast")]
                order = [(await done).json()["name"] for done in asyncio.as_completed(calls)]
            await ctx.decide("answer", lambda: "+".join(order), input=order)
            return order

    build(loom, httpx.MockTransport(answer))
    run = loom.run("fetch")
    assert run.output == ["fast", "slow"]

    async def unreachable(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"a replay sent {request.url}")

    with Loom(loom.settings.url) as fresh:
        build(fresh, httpx.MockTransport(unreachable))
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()


def test_recorded_async_tools_replay_in_the_order_they_finished(loom: Loom) -> None:
    @tool
    async def lookup(name: str) -> str:
        await asyncio.sleep(DELAYS[name])
        return name

    @loom.flow("tools")
    async def tools(ctx: Any) -> list[str]:
        calls = [asyncio.ensure_future(lookup(name)) for name in ("slow", "fast")]
        order = [await done for done in asyncio.as_completed(calls)]
        await ctx.decide("answer", lambda: "+".join(order), input=order)
        return order

    run = loom.run("tools")
    assert run.output == ["fast", "slow"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_resume_hands_the_recorded_answers_out_in_their_order(loom: Loom) -> None:
    """A resume answers the recorded part of an execution as a replay does: an interrupted
    run whose calls finished in another order than they started goes on with that order."""
    stop = [True]
    _hedged(loom, interrupted=lambda: stop[0])
    with pytest.raises(KeyboardInterrupt):
        loom.run("hedged")
    (summary,) = loom.executions()
    stop[0] = False
    run = loom.resume(summary.execution_id)
    assert run.output == ["fast", "slow"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_woken_answer_is_not_overtaken_by_a_later_one_asked_meanwhile(loom: Loom) -> None:
    """Live A, B, C finish B, A, C. On replay B's answer wakes A, whose task resumes only on
    the loop's next pass; C, asking in between, must still wait for A."""
    delays = {"A": 0.02, "B": 0.01, "C": 0.03}

    @loom.flow("three")
    async def three(ctx: Any) -> list[str]:
        async def call(name: str) -> str:
            await asyncio.sleep(delays[name])
            return name

        tasks = [asyncio.ensure_future(ctx.decide(n, lambda n=n: call(n))) for n in "ABC"]
        order = [await finished for finished in asyncio.as_completed(tasks)]
        await ctx.decide("order", lambda: "".join(order), input=order)
        return order

    run = loom.run("three")
    assert run.output == ["B", "A", "C"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


@pytest.mark.parametrize("frozen", [False, True], ids=["clock", "frozen-clock"])
def test_a_far_timer_does_not_hold_a_divergent_replay(loom: Loom, frozen: bool) -> None:
    """An agent loop inside ``asyncio.timeout(300)`` keeps a timer pending throughout. A
    replay of code that no longer makes a recorded call must report it at once, not wait for
    a timer that is minutes away (or, with a frozen clock, never fires)."""

    @loom.flow("agent")
    async def agent(ctx: Any) -> list[str]:
        async with asyncio.timeout(300):
            out = []
            for i in range(3):
                await ctx.decide("moderate", lambda: "ok")
                out.append(str(await ctx.decide("step", lambda i=i: f"s{i}")))
            return out

    run = loom.run("agent")
    with Loom(loom.settings.url) as changed:

        @changed.flow("agent")
        async def agent_without_moderation(ctx: Any) -> list[str]:
            async with asyncio.timeout(300):
                return [str(await ctx.decide("step", lambda i=i: f"s{i}")) for i in range(3)]

        started = time.monotonic()
        with freeze_time("2026-01-01") if frozen else contextlib.nullcontext():
            result = _ends(lambda: changed.replay(run.execution_id))
        assert time.monotonic() - started < 3
    assert result.output == ["s0", "s1", "s2"]
    assert {type(found).__name__ for found in result.divergences} == {"UnusedDecisionsError"}


def test_a_sync_tool_on_a_worker_thread_hands_its_answer_out_through_the_loop(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync tool run by ``asyncio.to_thread`` is answered on the worker thread; what that
    answer wakes belongs to the flow's loop, which asyncio's debug mode enforces (a future
    completed from another thread raised there, and the replay never ended)."""

    @tool
    def lookup(name: str) -> str:
        return f"looked up {name}"

    @loom.flow("mixed")
    async def mixed(ctx: Any) -> list[str]:
        async def threaded() -> str:
            await asyncio.sleep(0.01)
            return await asyncio.to_thread(lookup, "x")

        async def slow() -> str:
            await asyncio.sleep(0.1)
            return "b"

        return list(await asyncio.gather(threaded(), ctx.decide("b", slow)))

    run = loom.run("mixed")
    assert run.output == ["looked up x", "b"]
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    result = _ends(lambda: loom.replay(run.execution_id))
    assert result.identical, result.describe()


def test_a_decision_awaited_on_a_helper_s_own_loop_is_answered_at_once(loom: Loom) -> None:
    """A sync helper run by ``asyncio.to_thread`` that runs its own loop (``asyncio.run``: a
    sync wrapper of an async SDK) awaits a decision there. That loop is not the flow's and is
    closed moments later: the order must not take it for the flow's (the replay raised "Event
    loop is closed"), and its call, which cannot wait its turn, is answered at once."""

    @loom.flow("helper")
    async def helper(ctx: Any) -> list[str]:
        def sync_helper() -> str:
            async def inner() -> str:
                return str(await ctx.decide("a", lambda: "A"))

            return asyncio.run(inner())

        first = await asyncio.to_thread(sync_helper)
        ctx.now()
        return [first, str(await ctx.decide("b", lambda: "B"))]

    run = loom.run("helper")
    assert run.output == ["A", "B"]
    result = _ends(lambda: loom.replay(run.execution_id))
    assert result.identical, result.describe()


def test_a_coarse_clock_is_not_taken_for_a_frozen_one(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``time.monotonic()`` ticks every 15.6 ms on some platforms, so two passes of the loop
    often read the same time. Taken for a frozen clock, it made the watch ignore the timer
    that starts the backup call, and the hedging replay diverged."""
    tick = 0.015625
    monkeypatch.setattr(
        asyncio.base_events.BaseEventLoop,
        "time",
        lambda self: math.floor(time.monotonic() / tick) * tick,
    )
    test_a_hedging_call_started_after_a_timeout_is_waited_for(loom)


def test_a_task_busy_on_the_loop_before_its_call_keeps_its_turn(loom: Loom) -> None:
    """A task that yields to the loop many times before its call (a queue pipeline, an async
    iterator over data in memory) is on its way to it: the watch must not give up on its
    turn while other tasks of the loop are busy (it did after 100 passes)."""

    @loom.flow("busy")
    async def busy(ctx: Any) -> list[str]:
        async def slow() -> str:
            await asyncio.sleep(0.3)
            return "late"

        async def working() -> str:
            for _ in range(300):
                await asyncio.sleep(0)
            return str(await ctx.decide("early", lambda: "early"))

        async def waiting() -> str:
            return str(await ctx.decide("late", slow))

        tasks = [asyncio.ensure_future(working()), asyncio.ensure_future(waiting())]
        return [await finished for finished in asyncio.as_completed(tasks)]

    run = loom.run("busy")
    assert run.output == ["early", "late"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_call_computed_again_live_takes_its_turn_when_it_answers(loom: Loom) -> None:
    """``replay(live={"tool"})`` (a counterfactual is one) computes the tool calls again. The
    answers recorded after one must wait for its live answer, as they did live; it was
    counted handed out when asked, and they overtook it."""
    delays = {"A": 0.06, "B": 0.02, "C": 0.04}
    kinds = {"A": "model", "B": "tool", "C": "model"}

    @loom.flow("kinds")
    async def mixed_kinds(ctx: Any) -> list[str]:
        async def call(name: str) -> str:
            await asyncio.sleep(delays[name])
            return name

        tasks = [
            asyncio.ensure_future(ctx.decide(n, lambda n=n: call(n), kind=kinds[n])) for n in "ABC"
        ]
        order = [await finished for finished in asyncio.as_completed(tasks)]
        await ctx.decide("order", lambda: "".join(order), input=order)
        return order

    run = loom.run("kinds")
    assert run.output == ["B", "C", "A"]
    result = loom.replay(run.execution_id, live={"tool"})
    assert result.identical, result.describe()


def test_a_live_call_that_fails_takes_its_turn_too(loom: Loom) -> None:
    """Computed again live, Z now fails sooner than it answered. Its failure is an answer:
    it waits for X and Y, recorded before it, as a value would (it overtook them)."""
    replaying = [False]

    @loom.flow("failing")
    async def failing(ctx: Any) -> list[str]:
        async def call(name: str, delay: float) -> str:
            if replaying[0] and name == "Z":
                await asyncio.sleep(0.01)
                raise RuntimeError("Z is down now")
            await asyncio.sleep(delay)
            return name

        calls = (("X", 0.05, "tool"), ("Y", 0.06, "model"), ("Z", 0.07, "tool"))
        tasks = [
            asyncio.ensure_future(ctx.decide(n, lambda n=n, d=d: call(n, d), kind=k))
            for n, d, k in calls
        ]
        out = []
        for finished in asyncio.as_completed(tasks):
            try:
                out.append(await finished)
            except RuntimeError as error:
                out.append(type(error).__name__)
        return out

    run = loom.run("failing")
    assert run.output == ["X", "Y", "Z"]
    replaying[0] = True
    result = loom.replay(run.execution_id, live={"tool"})
    assert result.output == ["X", "Y", "RuntimeError"]


@pytest.mark.waits
def test_a_divergent_replay_beside_an_application_s_busy_task_ends(loom: Loom) -> None:
    """An application task always ready on the loop (one that does blocking I/O between its
    yields spends almost no CPU) is not the flow's: the watch waits for busy tasks at most
    once a replay, a few seconds, and the replay reports its divergence (it never ended)."""
    replaying = [False]

    @loom.flow("app")
    async def app_flow(ctx: Any) -> list[str]:
        names = "BD" if replaying[0] else "ABCD"
        tasks = [asyncio.ensure_future(ctx.decide(n, lambda n=n: n.lower())) for n in names]
        return [str(await finished) for finished in asyncio.as_completed(tasks)]

    async def application() -> ReplayResult:
        stop = False

        async def busy() -> None:
            while not stop:
                time.sleep(0.005)  # blocking I/O, little CPU
                await asyncio.sleep(0)

        beside = asyncio.create_task(busy())
        try:
            run = await loom.arun("app")
            replaying[0] = True
            return await loom.areplay(run.execution_id)
        finally:
            stop = True
            await beside

    result = _ends(lambda: asyncio.run(application()))
    assert "UnusedDecisionsError" in {type(found).__name__ for found in result.divergences}


TIMEOUT = 0.05
"""The timeout around the call that never answers in time ("slow", 0.5 s); its sibling
answers at 0.15 s, after the timeout: live, the timeout comes first."""


def _timed_out_first(loom: Loom, call: Callable[[str, float], Any], *, block: bool = False) -> str:
    """Flow "timeouts": ``call(name, seconds)`` twice at once, "slow" under ``TIMEOUT``
    (``wait_for``, or with ``block`` an ``asyncio.timeout`` block); what each ended with, in
    the order they ended."""

    @loom.flow("timeouts")
    async def timeouts(ctx: Any) -> list[str]:
        ended: list[str] = []

        async def timed() -> None:
            try:
                if block:
                    async with asyncio.timeout(TIMEOUT):
                        ended.append(await call("slow", 0.5))
                else:
                    ended.append(await asyncio.wait_for(call("slow", 0.5), TIMEOUT))
            except TimeoutError:
                ended.append("timed out")

        async def sibling() -> None:
            ended.append(await call("sibling", 0.15))

        await asyncio.gather(timed(), sibling())
        await ctx.decide("answer", lambda: "+".join(ended), input=ended)
        return ended

    return "timeouts"


async def _after(name: str, seconds: float) -> str:
    await asyncio.sleep(seconds)
    return name


def _decided(name: str, seconds: float, *, kind: str | None = None) -> Any:
    """``name`` decided in the running flow, answered after ``seconds``."""
    ctx = loom_runtime.current_context()
    assert ctx is not None
    return ctx.decide(name, lambda: _after(name, seconds), kind=kind)


@pytest.mark.parametrize("through", ["decide", "tool", "http"])
def test_a_call_cancelled_by_a_timeout_replays_where_it_was_cancelled(
    loom: Loom, through: str
) -> None:
    """A cancellation is stored when the flow next asks something, after a sibling that
    finished later; the replay cancels it again at its own timeout, and the sibling's answer
    waits for that, as it came after it live (it replayed first: a false divergence)."""

    @tool
    async def lookup(name: str, seconds: float) -> str:
        return await _after(name, seconds)

    async def answer(request: httpx.Request) -> httpx.Response:
        name, seconds = request.url.path.strip("/").split("/")
        return httpx.Response(200, json={"name": await _after(name, float(seconds))})

    transport = loom_runtime.async_transport(httpx.MockTransport(answer))

    async def fetch(name: str, seconds: float) -> str:
        async with httpx.AsyncClient(transport=transport, base_url="http://tools") as client:
            return str((await client.get(f"/{name}/{seconds}")).json()["name"])

    def call(name: str, seconds: float) -> Any:
        if through == "decide":
            return _decided(name, seconds)
        return lookup(name, seconds) if through == "tool" else fetch(name, seconds)

    flow = _timed_out_first(loom, call)
    run = loom.run(flow)
    assert run.output == ["timed out", "sibling"]  # the control: live, the timeout came first
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == ["timed out", "sibling"]


def test_a_call_cancelled_inside_a_timeout_block_replays_where_it_was_cancelled(
    loom: Loom,
) -> None:
    """``asyncio.timeout`` cancels the awaiting task itself, not a task of its own, and the
    cancellation is stored as late as ``wait_for``'s."""
    run = loom.run(_timed_out_first(loom, _decided, block=True))
    assert run.output == ["timed out", "sibling"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def _decision(index: int, meta: bytes | None, *, failed: bool = True) -> Decision:
    return Decision(
        f"k{index}",
        None,
        msgspec.Raw(b"null"),
        None if failed else msgspec.Raw(b"1"),
        "asyncio.exceptions:CancelledError" if failed else None,
        "cancelled after 0.050 s" if failed else None,
        None if meta is None else msgspec.Raw(meta),
    )


def test_a_cancellation_is_ranked_at_the_point_its_meta_names_and_nothing_else() -> None:
    """The meta is untrusted (a bundle's): only a count of the decisions stored before the
    call's own moves it; anything else leaves it where it was stored, as a log from before
    the field was recorded does (none of these may raise)."""
    keys = [f"k{index}" for index in range(6)]

    def order(meta: bytes | None, *, failed: bool = True) -> list[str]:
        decisions = {key: _decision(index, None, failed=False) for index, key in enumerate(keys)}
        decisions["k4"] = _decision(4, meta, failed=failed)
        return completion_order(keys, decisions)

    assert order(b'{"cancelled_after_decisions": 1}') == ["k0", "k4", "k1", "k2", "k3", "k5"]
    assert order(b'{"cancelled_after_decisions": 0, "attempts": []}')[0] == "k4"
    for ignored in (
        None,  # no meta: a log from before the field
        b'{"attempts": []}',
        b'{"cancelled_after_decisions": 4}',  # its own place or later: not before it
        b'{"cancelled_after_decisions": 9}',
        b'{"cancelled_after_decisions": -1}',
        b'{"cancelled_after_decisions": true}',
        b'{"cancelled_after_decisions": 1.0}',
        b'{"cancelled_after_decisions": "1"}',
        b'[{"cancelled_after_decisions": 1}]',
        b"not json",
        b"[" * 100_000,
    ):
        assert order(ignored) == keys, ignored
    assert order(b'{"cancelled_after_decisions": 1}', failed=False) == keys  # only a failure


def test_calls_cancelled_at_one_point_keep_the_order_they_were_stored_in() -> None:
    keys = ["a", "b", "c", "d"]
    decisions = {key: _decision(index, None, failed=False) for index, key in enumerate(keys)}
    point = b'{"cancelled_after_decisions": 1}'
    decisions["c"], decisions["d"] = _decision(2, point), _decision(3, point)
    assert completion_order(keys, decisions) == ["a", "c", "d", "b"]


@pytest.mark.parametrize("timeout", [None, 3.0], ids=["no-timer", "a-timer-due"])
def test_a_streamed_hedge_whose_loser_was_cancelled_replays_at_once(
    loom: Loom, timeout: float | None
) -> None:
    """Two streamed requests; the first whose headers arrive wins and the other is cancelled.
    The winner is stored when its body has been read, after the loser's cancellation, and
    only the winner's answer makes the flow cancel the loser: ranked before the winner, the
    loser waited out its whole bound and then diverged (with a timer of the flow due within
    5 s, which the watch waits for, even once it no longer waited for the loser itself)."""

    async def answer(request: httpx.Request) -> httpx.Response:
        name, seconds = request.url.path.strip("/").split("/")
        await asyncio.sleep(float(seconds))
        return httpx.Response(200, content=name.encode())

    transport = loom_runtime.async_transport(httpx.MockTransport(answer))

    @loom.flow("hedge")
    async def hedge(ctx: Any) -> str:
        async with httpx.AsyncClient(transport=transport, base_url="http://models") as client:

            async def call(path: str) -> httpx.Response:
                return await client.send(client.build_request("GET", path), stream=True)

            calls = [asyncio.ensure_future(call(p)) for p in ("/loser/2.0", "/winner/0.1")]
            done, pending = await asyncio.wait(
                calls, return_when=asyncio.FIRST_COMPLETED, timeout=timeout
            )
            for loser in pending:
                loser.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            winner = done.pop().result()
            body = await winner.aread()
            await winner.aclose()
            return body.decode()

    run = loom.run("hedge")
    assert run.output == "winner"
    started = time.perf_counter()
    result = _ends(lambda: loom.replay(run.execution_id))
    assert result.identical, result.describe()
    assert time.perf_counter() - started < 1.0  # it waited out the loser's bound (~5 s)


def test_a_replay_that_no_longer_awaits_the_timed_out_call_does_not_wait_out_its_bound(
    loom: Loom,
) -> None:
    awaited = [True]
    forgotten: list[asyncio.Future[Any]] = []

    @loom.flow("forgets")
    async def forgets(ctx: Any) -> list[str]:
        ended: list[str] = []

        async def timed() -> None:
            call = ctx.decide("slow", lambda: _after("slow", 5))
            if not awaited[0]:  # the code changed: the call is started and never awaited
                forgotten.append(asyncio.ensure_future(call))
                return
            try:
                ended.append(await asyncio.wait_for(call, 0.5))
            except TimeoutError:
                ended.append("timed out")

        async def sibling() -> None:
            ended.append(await ctx.decide("sibling", lambda: _after("sibling", 0.6)))

        await asyncio.gather(timed(), sibling())
        return ended

    run = loom.run("forgets")
    awaited[0] = False
    started = time.perf_counter()
    result = _ends(lambda: loom.replay(run.execution_id))
    assert not result.identical  # the output lost "timed out"
    assert time.perf_counter() - started < 1.0  # the sibling waited out the bound (~2 s)


def test_a_divergent_race_with_a_recorded_cancellation_ends_under_a_frozen_clock(
    loom: Loom,
) -> None:
    """A frozen clock fires no timer: the replay's timeout never cancels the recorded call
    again, so the sibling's turn never came (the watch waited for the call without limit)."""

    @loom.flow("race")
    async def race(ctx: Any) -> list[str]:
        async def timed() -> str:
            try:
                return str(await asyncio.wait_for(ctx.decide("slow", lambda: _after("s", 5)), 0.05))
            except TimeoutError:
                return "timed out"

        tasks = [
            asyncio.ensure_future(timed()),
            asyncio.ensure_future(ctx.decide("sibling", lambda: _after("sibling", 0.15))),
        ]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if tasks[0] in done:  # live: the timeout came first
            return [tasks[0].result(), str(await tasks[1])]
        tasks[0].cancel()
        await asyncio.gather(tasks[0], return_exceptions=True)
        return [str(tasks[1].result()), "gave up"]

    run = loom.run("race")
    assert run.output == ["timed out", "sibling"]
    assert loom.replay(run.execution_id).identical
    with freeze_time("2026-01-01"):
        result = _ends(lambda: loom.replay(run.execution_id))
    assert not result.identical


def test_a_recorded_call_computed_live_and_cancelled_again_is_not_overtaken(loom: Loom) -> None:
    """``replay(live={"retrieval"})``: the call that timed out runs live and times out again;
    its sibling, recorded after the timeout, must wait until the flow has seen it."""

    def call(name: str, seconds: float) -> Any:
        return _decided(name, seconds, kind="retrieval" if name == "slow" else None)

    run = loom.run(_timed_out_first(loom, call))
    assert run.output == ["timed out", "sibling"]
    result = loom.replay(run.execution_id, live={"retrieval"})
    assert result.output == ["timed out", "sibling"], result.describe()


def test_a_call_settled_on_a_helper_s_loop_is_handed_out_on_the_flow_s() -> None:
    """A call awaited on a helper's own loop (``asyncio.run`` on a worker thread) and
    cancelled there settles on the flow's loop: the helper's loop may close before any pass
    of its own would have handed it out, and the answers after it then waited for the watch
    to give up on it."""

    async def flow_loop() -> asyncio.Future[None] | None:
        order = RecordedOrder(["a", "b"])
        order.bind()

        async def cancelled_there() -> None:
            order.settle("a")

        def helper() -> None:  # its loop closed as soon as its coroutine ended
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(cancelled_there())
            finally:
                loop.close()

        await asyncio.to_thread(helper)
        for _ in range(SETTLE_PASSES + 2):
            await asyncio.sleep(0)
        return order.turn("b")

    assert asyncio.run(flow_loop()) is None  # "b" goes: "a" was handed out


def test_a_held_cancellation_does_not_wait_for_a_timer_long_after_its_live_moment(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded as cancelled after 30 s (stubbed, to run fast), replayed by code that now
    awaits the sibling first and cancels the call itself, inside an ``asyncio.timeout(60)``:
    that far timer is not the one that cancelled it live. A version that waited for any
    timer due before the held call's bound (61 s) let this divergent replay wait half of it
    (a review found it; reverted)."""
    recorded_cancellation = context.cancellation
    monkeypatch.setattr(context, "cancellation", lambda elapsed: recorded_cancellation(30.0))
    changed = [False]

    @loom.flow("far")
    async def far(ctx: Any) -> list[str]:
        ended: list[str] = []
        async with asyncio.timeout(60):
            slow = asyncio.ensure_future(_decided("slow", 5.0))
            if not changed[0]:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(slow, 0.05)
                ended.append("timed out")
            ended.append(await _decided("sibling", 0.1))
            slow.cancel()
            await asyncio.gather(slow, return_exceptions=True)
        return ended

    run = loom.run("far")
    assert run.output == ["timed out", "sibling"]
    monkeypatch.undo()
    changed[0] = True
    started = time.perf_counter()
    result = _ends(lambda: loom.replay(run.execution_id))
    assert time.perf_counter() - started < 5.0
    assert not result.identical


def test_answers_of_one_pass_replay_identical_however_far_their_code_is(loom: Loom) -> None:
    """Two gathered tasks answered in one pass (no I/O); the first takes two more steps before
    it acts. A first fix of the case below (an answer acted on a step away, overtaken by the
    next: ADR 0002 "timers together", left) made another task's turn wait a few passes, and
    this shape, whose live answers came in one pass, then diverged on every replay and its
    resume failed (a regression review): the live gap is not recorded, so it was undone."""

    @loom.flow("one-pass")
    async def one_pass(ctx: Any) -> list[str]:
        marks: list[str] = []

        async def first() -> None:
            await ctx.decide("a", lambda: 1)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            marks.append("A")

        async def second() -> None:
            await ctx.decide("b", lambda: 2)
            marks.append("B")

        await asyncio.gather(first(), second())
        return list(await ctx.decide("marks", lambda: list(marks), input=list(marks)))

    run = loom.run("one-pass")
    for _ in range(3):
        result = loom.replay(run.execution_id)
        assert result.identical, result.describe()


def test_two_timeouts_that_fire_together_replay_in_their_stored_order(loom: Loom) -> None:
    """Two calls under one 30 ms timeout each, both cut, collected as they finish:
    ``as_completed`` starts its tasks in a set's order, so the replay's timers fired in
    another order than the live run's, and about half of the unchanged replays swapped the
    two fallbacks (a fuzz review). A call cancelled again waits, before the flow sees it,
    for the cancellations stored before it to have been seen."""

    @loom.flow("two-timeouts")
    async def two_timeouts(ctx: Any) -> list[str]:
        async def call(key: str) -> str:
            try:
                async with asyncio.timeout(0.03):
                    return str(await ctx.decide(key, lambda: asyncio.sleep(0.3, key)))
            except TimeoutError:
                return f"{key} timed out"

        return [await finished for finished in asyncio.as_completed([call("a"), call("b")])]

    runs = [loom.run("two-timeouts") for _ in range(3)]
    for run in runs:
        for _ in range(3):
            result = loom.replay(run.execution_id)
            assert result.identical, (run.output, result.describe())


def test_timeouts_that_fired_apart_are_not_put_back_in_the_stored_order(loom: Loom) -> None:
    """Only cancellations whose timers fired together live wait for each other on replay:
    recorded with a's timeout at 30 ms and b's at 60 ms, code whose timeouts are swapped (b
    now times out first, live too) must diverge. The first form of the fix above waited for
    every earlier cancellation, and replayed such a change identical (a regression review)."""
    timeouts = {"a": 0.03, "b": 0.06}

    @loom.flow("apart")
    async def apart(ctx: Any) -> list[str]:
        async def call(key: str) -> str:
            try:
                async with asyncio.timeout(timeouts[key]):
                    return str(await ctx.decide(key, lambda: asyncio.sleep(0.5, key)))
            except TimeoutError:
                return f"{key} timed out"

        tasks = [asyncio.ensure_future(call(key)) for key in ("a", "b")]
        order = [await finished for finished in asyncio.as_completed(tasks)]
        return list(await ctx.decide("order", lambda: order, input=order))

    run = loom.run("apart")
    assert run.output == ["a timed out", "b timed out"]
    assert loom.replay(run.execution_id).identical  # the control: the unchanged code
    timeouts.update(a=0.06, b=0.03)
    for _ in range(3):
        assert not loom.replay(run.execution_id).identical


@pytest.mark.parametrize("shape", ["wait_for", "shield", "ensure_future", "one more await"])
def test_an_answer_acted_on_a_step_away_is_not_overtaken_by_one_that_came_later(
    loom: Loom, shape: str
) -> None:
    """Live, "a" answered at once and "b", asked by another task, 20 ms later, so the code
    acting on "a" ran first even a step or two away from the task that took it
    (``wait_for``'s own task on Python 3.11, ``shield``, ``ensure_future``, one more
    ``await``). A replay has both answers at hand: "b" was handed out as soon as "a" was
    taken, and its code ran first, so every replay of the unchanged flow diverged. Each
    answer now keeps how many loop passes after the one before it, taken by another task, it
    came live, and the replay hands it out no sooner. The control: code that now acts on "a"
    only after a timer of its own (live, "b" first) still diverges."""
    acting = {"after": 0.0}

    @loom.flow("a-step-away")
    async def a_step_away(ctx: Any) -> list[str]:
        marks: list[str] = []

        async def first() -> None:
            call = ctx.decide("a", lambda: asyncio.sleep(0, 1))
            if shape == "wait_for":
                await asyncio.wait_for(call, 1)
            elif shape == "shield":
                await asyncio.shield(call)
            elif shape == "ensure_future":
                await asyncio.ensure_future(call)
            else:
                await call
                await asyncio.sleep(0)
            if acting["after"]:
                await asyncio.sleep(acting["after"])
            marks.append("A")

        async def second() -> None:
            await ctx.decide("b", lambda: asyncio.sleep(0.02, 2))
            marks.append("B")

        await asyncio.gather(first(), second())
        return list(await ctx.decide("marks", lambda: list(marks), input=list(marks)))

    run = loom.run("a-step-away")
    assert run.output == ["A", "B"]
    decisions = loom.execution(run.execution_id).decisions
    assert b'"answered_after_passes"' in bytes(decisions["b"].meta or b"")
    for _ in range(3):
        result = loom.replay(run.execution_id)
        assert result.identical, result.describe()
    acting["after"] = 0.05
    assert loom.run("a-step-away").output == ["B", "A"]  # live, the change shows
    assert not loom.replay(run.execution_id).identical


def test_a_caller_s_meta_of_the_spacing_s_name_is_replaced_not_stored_twice(
    loom: Loom, tmp_path: Any
) -> None:
    """A caller that gives an open decision a meta field named as the spacing's own had it
    stored twice in one JSON object, which a bundle's reader refuses (a regression review):
    export succeeded and replay_bundle failed. The spacing's value replaces the caller's."""

    @loom.flow("meta-named-alike")
    async def meta_named_alike(ctx: Any) -> list[str]:
        marks: list[str] = []

        async def first() -> None:
            await asyncio.wait_for(ctx.decide("a", lambda: asyncio.sleep(0, 1)), 1)
            marks.append("A")

        async def second() -> None:
            opened = ctx.open_decision("b")
            await asyncio.sleep(0.02)
            opened.record("v", meta={"answered_after_passes": "mine", "model": "m"})
            marks.append("B")

        await asyncio.gather(first(), second())
        return marks

    run = loom.run("meta-named-alike")
    meta = bytes(loom.execution(run.execution_id).decisions["b"].meta or b"")
    assert meta.count(b'"answered_after_passes"') == 1, meta
    assert msgspec.json.decode(meta)["model"] == "m"
    bundle = loom.export(run.execution_id, tmp_path / "run.json")
    result = loom.replay_bundle(bundle)
    assert result.identical, result.describe()
