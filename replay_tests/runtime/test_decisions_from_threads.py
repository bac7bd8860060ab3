"""Decisions a flow's threads record at the same time (a tool pool: LangGraph's ``ToolNode``)
are appended one after another (ADR 0002, amended "threads record one at a time").

Numbering was done under a lock, but recording was not: two threads finishing together each
added an event to the one execution and saved it, and a thread switch between one's new
version and its save let the other's event take that version. The run died with
``OriginatorVersionError`` or ``ExecutionConflictError`` (the execution then refused every
later append). The switch interval is shortened here so that the switch that is rare in
production (every 5 ms of a running thread) falls inside that window on every run.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

import loom_runtime.execution as execution_module
from loom_runtime import DecisionAfterEndError, Loom


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_threads_recording_together_each_append_their_decision(loom: Loom) -> None:
    @loom.flow("pool")
    def pool(ctx: Any, n: int) -> int:
        with ThreadPoolExecutor(8) as threads:
            calls = [threads.submit(ctx.decide, f"t{i}", lambda i=i: i * 2) for i in range(n)]
            return sum(call.result() for call in calls)

    for _ in range(3):
        run = loom.run("pool", n=100)
        assert run.output == 9_900
        assert len(loom.execution(run.execution_id).decisions) == 100
        result = loom.replay(run.execution_id)
        assert result.identical, result.describe()


@pytest.mark.usefixtures("frequent_thread_switches")
def test_threads_recording_failures_together_each_append_theirs(loom: Loom) -> None:
    def failing(i: int) -> int:
        raise ValueError(f"call {i} failed")

    @loom.flow("failures")
    def failures(ctx: Any, n: int) -> int:
        with ThreadPoolExecutor(8) as threads:
            calls = [threads.submit(ctx.decide, f"t{i}", lambda i=i: failing(i)) for i in range(n)]
            return sum(isinstance(call.exception(), ValueError) for call in calls)

    run = loom.run("failures", n=100)
    assert run.output == 100
    result = loom.replay(run.execution_id)
    assert result.identical, result.describe()


def test_a_fork_s_override_asked_by_a_thread_after_the_end_is_refused(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread the flow left running asks an overridden key as the fork ends. The end was
    checked before the lock was taken, so a thread switch there let the override be stored
    after the fork's end event. Here the thread is held at the lock until the fork ended."""
    at_lock = threading.Event()

    class HeldAtTheLock:
        def __init__(self) -> None:
            self._lock = threading.RLock()

        def __enter__(self) -> bool:
            if threading.current_thread().name == "left-running":
                at_lock.set()
                time.sleep(0.2)  # switched out right before taking it
            return self._lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            self._lock.__exit__(*exc)

    refused: list[BaseException] = []

    def ask(ctx: Any) -> None:
        try:
            ctx.decide("o", lambda: 2)
        except DecisionAfterEndError as error:
            refused.append(error)

    @loom.flow("leaves")
    def leaves(ctx: Any) -> int:
        value = ctx.decide("a", lambda: 1)
        threading.Thread(name="left-running", target=ask, args=(ctx,)).start()
        at_lock.wait(5)  # returns while its thread is about to store "o"
        return int(value)

    monkeypatch.setattr(
        execution_module, "threading", SimpleNamespace(RLock=HeldAtTheLock), raising=True
    )
    run = loom.run("leaves")
    time.sleep(0.5)
    at_lock.clear()
    fork = loom.fork(run.execution_id, at=1, override={"o": 99})
    time.sleep(0.5)
    assert len(refused) == 2  # the run's thread and the fork's
    assert list(loom.execution(fork.execution_id).decisions) == ["a"]
