"""``ctx.decide(..., retry=Backoff(...))``: transient failures are retried, not recorded as the
outcome; every retried attempt is in the decision's meta; a replay neither retries nor pauses."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest

from loom_runtime import AsyncFlowContext, FlowContext, Loom
from loom_runtime.backoff import Backoff, retry_after, transient

NO_PAUSE = Backoff(attempts=3, first_pause=0.0, max_pause=0.0)


class RateLimited(Exception):
    """An SDK-shaped error: an HTTP status and the response it came with."""

    def __init__(self, message: str, *, status: int = 429, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status_code = status
        self.response = httpx.Response(status, headers=headers or {})


def flaky(failures: list[Exception], result: object = "ok") -> tuple[Callable[[], Any], list[int]]:
    """A compute that raises each of ``failures`` in turn, then returns ``result``."""
    calls: list[int] = []

    def compute() -> object:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return result

    return compute, calls


def meta_of(loom: Loom, execution_id: object, key: str) -> Any:
    decision = loom.execution(str(execution_id)).decisions[key]
    return None if decision.meta is None else msgspec.json.decode(decision.meta)


def test_transient_failures_are_retried_and_only_the_last_outcome_is_the_decision(
    sqlite_url: str,
) -> None:
    compute, calls = flaky([RateLimited("slow down"), TimeoutError("read timed out")])
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("answer", compute, kind="model", retry=NO_PAUSE)

        run = loom.run("f")
        decision = loom.execution(run.execution_id).decisions["answer"]
        meta = meta_of(loom, run.execution_id, "answer")

    assert run.output == "ok" and len(calls) == 3
    assert decision.error_type is None
    assert meta == {
        "attempts": [
            {"error": f"{__name__}:RateLimited", "message": "slow down", "paused": 0.0},
            {"error": "builtins:TimeoutError", "message": "read timed out", "paused": 0.0},
        ]
    }


def test_a_pause_the_service_asked_for_is_taken_and_recorded(sqlite_url: str) -> None:
    asked = RateLimited("busy", status=503, headers={"retry-after": "0.01"})
    compute, calls = flaky([asked])
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute, retry=Backoff(attempts=2, first_pause=0.0))

        run = loom.run("f")
        meta = meta_of(loom, run.execution_id, "k")

    assert len(calls) == 2
    assert meta["attempts"][0]["paused"] == 0.01


def test_exhausted_retries_record_the_last_failure_with_every_attempt(sqlite_url: str) -> None:
    compute, calls = flaky([ConnectionResetError(f"reset {n}") for n in range(5)])
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute, retry=NO_PAUSE)

        with pytest.raises(ConnectionResetError, match="reset 2"):
            loom.run("f")
        (summary,) = loom.executions()
        execution = loom.execution(summary.execution_id)
        meta = meta_of(loom, summary.execution_id, "k")

    assert len(calls) == 3, "attempts=3 is three calls in all"
    assert execution.decisions["k"].message == "reset 2"
    assert [a["message"] for a in meta["attempts"]] == ["reset 0", "reset 1"]
    assert summary.status == "failed"


@pytest.mark.parametrize(
    "error",
    [ValueError("bad request"), RateLimited("not found", status=404)],
    ids=["not-transient", "http-404"],
)
def test_a_failure_that_is_not_transient_is_recorded_at_once(
    sqlite_url: str, error: Exception
) -> None:
    compute, calls = flaky([error])
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute, retry=NO_PAUSE)

        with pytest.raises(type(error)):
            loom.run("f")
        (summary,) = loom.executions()
        meta = meta_of(loom, summary.execution_id, "k")

    assert len(calls) == 1 and meta is None


def test_retry_on_decides_what_is_transient(sqlite_url: str) -> None:
    compute, calls = flaky([ValueError("flaky parser")])
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide(
                "k", compute, retry=NO_PAUSE, retry_on=lambda e: isinstance(e, ValueError)
            )

        assert loom.run("f").output == "ok"
    assert len(calls) == 2


def test_without_retry_a_transient_failure_is_the_outcome(sqlite_url: str) -> None:
    compute, calls = flaky([TimeoutError("slow")])
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute)

        with pytest.raises(TimeoutError):
            loom.run("f")
    assert len(calls) == 1


def test_an_interrupt_is_never_retried_nor_recorded(sqlite_url: str) -> None:
    compute, calls = flaky([KeyboardInterrupt()])  # type: ignore[list-item]
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute, retry=NO_PAUSE, retry_on=lambda e: True)

        with pytest.raises(KeyboardInterrupt):
            loom.run("f")
        (summary,) = loom.executions()
        execution = loom.execution(summary.execution_id)

    assert len(calls) == 1
    assert execution.decisions == {} and not execution.finished, "left to be resumed"


def test_a_replay_neither_retries_nor_pauses(sqlite_url: str) -> None:
    compute, calls = flaky([RateLimited("busy"), RateLimited("busy")])
    live = True
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            # A pause the size of a test run's timeout: a replay that paused would hang.
            backoff = (
                Backoff(attempts=3, first_pause=0.0)
                if live
                else Backoff(first_pause=600, max_pause=600)
            )
            return ctx.decide("k", compute if live else _never, retry=backoff)

        run = loom.run("f")
        live = False
        result = loom.replay(run.execution_id)

    assert result.identical and result.output == "ok"
    assert len(calls) == 3


def test_a_replay_of_exhausted_retries_raises_the_recorded_failure_without_computing(
    sqlite_url: str,
) -> None:
    compute, _ = flaky([TimeoutError("t1"), TimeoutError("t2")])
    live = True
    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute if live else _never, retry=Backoff(attempts=2))

        with pytest.raises(TimeoutError):
            loom.run("f")
        live = False
        (summary,) = loom.executions()
        result = loom.replay(summary.execution_id)

    assert result.identical


def test_an_async_flow_retries_with_an_async_compute(sqlite_url: str) -> None:
    calls: list[int] = []

    async def compute() -> str:
        calls.append(1)
        await asyncio.sleep(0)
        if len(calls) < 3:
            raise RateLimited("busy", status=500)
        return "done"

    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        async def f(ctx: AsyncFlowContext) -> str:
            return await ctx.decide("k", compute, retry=NO_PAUSE)

        run = loom.run("f")
        meta = meta_of(loom, run.execution_id, "k")

    assert run.output == "done" and len(calls) == 3
    assert len(meta["attempts"]) == 2


def _never() -> str:
    raise AssertionError("a replay must not compute a recorded decision")


# -- what counts as transient ---------------------------------------------------------------


def _raised_from(error: Exception, cause: BaseException) -> Exception:
    try:
        raise error from cause
    except Exception as exc:
        return exc


def _raised_during(error: Exception, context: BaseException) -> Exception:
    try:
        try:
            raise context
        except BaseException:
            raise error from None  # as httpcore translates a socket's error
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError(), True),
        (ConnectionResetError(), True),
        (RateLimited("r", status=429), True),
        (RateLimited("r", status=408), True),
        (RateLimited("r", status=409), True),
        (RateLimited("r", status=502), True),
        (RateLimited("r", status=400), False),
        (RateLimited("r", status=401), False),
        (ValueError(), False),
        (_raised_from(RuntimeError("sdk"), ConnectionRefusedError()), True),
        (_raised_during(RuntimeError("sdk"), ConnectionRefusedError()), True),
        (_raised_during(RuntimeError("sdk"), ValueError()), False),
        (KeyboardInterrupt(), False),
    ],
)
def test_transient_recognises_errors_without_importing_an_sdk(
    error: BaseException, expected: bool
) -> None:
    assert transient(error) is expected


def test_transient_recognises_httpx_errors() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.ConnectError) as refused:
        httpx.get(f"http://127.0.0.1:{port}/")
    request = httpx.Request("GET", "http://127.0.0.1/")
    response = httpx.Response(429, headers={"retry-after": "2"}, request=request)
    status = httpx.HTTPStatusError("429", request=request, response=response)

    assert transient(refused.value)
    assert transient(status) and retry_after(status) == 2.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_what_the_service_asked(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after(RateLimited("r", headers=headers)) == expected


def test_retry_after_is_none_without_a_response() -> None:
    assert retry_after(TimeoutError()) is None


def test_an_async_pause_lets_other_tasks_run(sqlite_url: str) -> None:
    """The async driver awaits the pause: a task gathered beside the retrying decision runs
    while it waits (a blocking sleep would hold the event loop until the retry)."""
    order: list[str] = []

    async def compute() -> str:
        order.append("attempt")
        if order.count("attempt") == 1:
            raise RateLimited("busy", headers={"retry-after": "0.05"})
        return "done"

    async def other() -> None:
        await asyncio.sleep(0)
        order.append("other task")

    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        async def f(ctx: AsyncFlowContext) -> str:
            backoff = Backoff(attempts=2, first_pause=0.0, max_pause=1.0)
            result, _ = await asyncio.gather(ctx.decide("k", compute, retry=backoff), other())
            return result

        assert loom.run("f").output == "done"
    assert order == ["attempt", "other task", "attempt"]
