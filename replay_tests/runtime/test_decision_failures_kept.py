"""Every way a computed decision can end is stored, so its key is never used up unrecorded
(ADR 0026, amended 2026-12-05 "kept failures").

A decision's occurrence is numbered when it is asked; if nothing is stored for it, the next
ask of the same key takes the next number (``k#2``) and the replay, asking ``k`` first, finds
it never recorded. Three ends stored nothing: a ``retry_on`` predicate that raised, a value
that cannot be stored (``NotSerialisableError``, after retries that were paid for), and a
timeout that cancelled the decision while it paused between attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from loom_runtime import Backoff, Loom, NotSerialisableError
from loom_runtime.backoff import retry_after


def _loom(tmp_path: Path) -> Loom:
    return Loom(f"sqlite:///{tmp_path / 'loom.db'}")


def test_a_retry_predicate_that_raises_is_the_decision_s_recorded_failure(tmp_path: Path) -> None:
    def broken_predicate(exc: Exception) -> bool:
        raise LookupError("the predicate itself failed")

    def failing() -> str:
        raise ConnectionError("reset")

    with _loom(tmp_path) as loom:

        @loom.flow("f")
        def f(ctx: Any) -> str:
            with contextlib.suppress(LookupError):
                ctx.decide("k", failing, retry=Backoff(attempts=2), retry_on=broken_predicate)
            return str(ctx.decide("k", lambda: "second"))

        run = loom.run("f")
        assert run.output == "second"
        decisions = loom.execution(run.execution_id).decisions
        assert list(decisions) == ["k", "k#2"]
        assert decisions["k"].error_type is not None
        assert loom.replay(run.execution_id).identical


@pytest.mark.parametrize("retried", [False, True], ids=["first-try", "after-retries"])
def test_a_value_that_cannot_be_stored_is_the_decision_s_recorded_failure(
    tmp_path: Path, retried: bool
) -> None:
    calls: list[int] = []

    def unstorable() -> object:
        calls.append(1)
        if retried and len(calls) < 3:
            raise ConnectionError("reset")
        return object()

    with _loom(tmp_path) as loom:

        @loom.flow("f")
        def f(ctx: Any) -> str:
            with contextlib.suppress(NotSerialisableError):
                ctx.decide("k", unstorable, retry=Backoff(attempts=3, first_pause=0, max_pause=0))
            return str(ctx.decide("k", lambda: "fallback"))

        run = loom.run("f")
        assert run.output == "fallback"
        decisions = loom.execution(run.execution_id).decisions
        assert list(decisions) == ["k", "k#2"]
        assert (decisions["k"].meta is not None) is retried  # the paid retries are kept
        assert loom.replay(run.execution_id).identical


class _Unavailable(ConnectionError):
    """A transient failure whose response asks for a 5 s pause (retry-after)."""

    response = httpx.Response(503, headers={"retry-after": "5"})


def test_a_timeout_during_a_retry_s_pause_is_recorded_as_the_cancellation(tmp_path: Path) -> None:
    async def flaky() -> str:
        raise _Unavailable("unavailable")

    with _loom(tmp_path) as loom:

        @loom.flow("f")
        async def f(ctx: Any) -> str:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    ctx.decide("model", flaky, retry=Backoff(attempts=3, max_pause=5)), 0.2
                )
            return str(await ctx.decide("model", lambda: "fallback"))

        run = loom.run("f")
        assert run.output == "fallback"
        decisions = loom.execution(run.execution_id).decisions
        assert list(decisions) == ["model", "model#2"]
        assert loom.replay(run.execution_id).identical


def test_an_unusable_retry_after_ms_falls_back_to_retry_after() -> None:
    """``retry-after-ms: abc`` returned 'nothing asked' without reading a valid
    ``retry-after`` beside it."""
    for millis in ("abc", "-1"):

        class Asked(Exception):
            response = httpx.Response(429, headers={"retry-after-ms": millis, "retry-after": "3"})

        assert retry_after(Asked()) == 3.0


def test_a_tool_result_that_cannot_be_stored_is_the_call_s_recorded_failure(
    tmp_path: Path,
) -> None:
    """The same for a ``@tool``: an agent loop that hands a tool's error back to the model
    caught the refusal and went on, and the replay found the call never recorded."""
    from loom_runtime import tool

    @tool
    def search(query: str) -> object:
        return object()  # not data the log can hold

    with _loom(tmp_path) as loom:

        @loom.flow("agent")
        def agent(ctx: Any) -> str:
            try:
                search("disk")
            except NotSerialisableError as refused:
                return f"error {type(refused).__name__}"
            return "stored"

        run = loom.run("agent")
        assert run.output == "error NotSerialisableError"
        assert list(loom.execution(run.execution_id).decisions) == ["tool:search"]
        assert loom.replay(run.execution_id).identical
