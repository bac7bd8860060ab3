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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from loom_runtime import Loom


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
