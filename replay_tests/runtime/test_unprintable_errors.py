"""Failures whose ``str`` cannot be taken are stored, and rebuilt, like any other.

Core review of 6 December: an HTTP error class whose ``__str__`` formats a status it sets
(``f"HTTP status {self.status:d}"``) could not be rebuilt from its message; the check of the
rebuilt error's ``str`` ran outside the ``try`` guarding its constructor, so a faithful replay
raised ``TypeError`` and a resume stored the healthy execution as failed. An exception whose
``__str__`` raises was never stored at all: the flow saw the ``__str__``'s error in place of
the exception its compute raised, and a flow raising one stayed ``running``.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from loom_runtime import FlowContext, Loom


class HttpError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status

    def __str__(self) -> str:
        return f"HTTP status {self.status:d}"


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


class _Crash(BaseException):
    """Ends the process's run the way a kill would: not stored, so resume goes on."""


def _fetch() -> str:
    raise HttpError(503)


def _unprintable() -> str:
    raise Unprintable("x")


@pytest.mark.parametrize("compute", [_fetch, _unprintable], ids=["status-str", "raising-str"])
def test_a_caught_failure_replays_and_resumes_as_caught(loom: Loom, compute: object) -> None:
    crash = [True]

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        try:
            value = ctx.decide("fetch", compute)  # type: ignore[arg-type]
        except (HttpError, Unprintable) as caught:
            value = f"fallback after {type(caught).__name__}"
        if crash and crash.pop():
            raise _Crash
        return value

    with pytest.raises(_Crash):
        loom.run("f")
    (summary,) = loom.executions()
    resumed = loom.resume(summary.execution_id)
    expected = "fallback after HttpError" if compute is _fetch else "fallback after Unprintable"
    assert resumed.output == expected
    assert (
        loom.execution(summary.execution_id)
        .decisions["fetch"]
        .error_type.endswith("HttpError" if compute is _fetch else "Unprintable")
    )
    assert loom.replay(summary.execution_id).identical


def test_a_flow_raising_an_unprintable_error_ends_failed(loom: Loom) -> None:
    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        ctx.decide("k", lambda: 1)
        raise Unprintable("x")

    with pytest.raises(Unprintable):
        loom.run("f")
    (summary,) = loom.executions()
    assert summary.status == "failed"
    assert loom.replay(summary.execution_id).identical


class Registered(Exception):
    """A class whose subclasses register themselves: no replay may add one."""

    registry: ClassVar[list[type]] = []

    def __init_subclass__(cls) -> None:
        Registered.registry.append(cls)

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status

    def __str__(self) -> str:
        return f"status {self.status:d}"


def test_a_class_with_subclass_hooks_is_not_subclassed_on_replay(loom: Loom) -> None:
    """Control for the stand-in subclass: a class running code for each subclass gets none;
    the failure is rebuilt as loom's RecordedComputeError (the replay then diverges)."""

    def compute() -> str:
        raise Registered(429)

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        try:
            return ctx.decide("k", compute)
        except Exception as caught:
            return type(caught).__name__

    run = loom.run("f")
    assert run.output == "Registered"
    assert not loom.replay(run.execution_id).identical
    assert Registered.registry == []
