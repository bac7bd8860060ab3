"""Concurrent calls of one key: numbered in whatever order threads arrive, matched by input.

A framework that runs an agent's tool calls in a thread pool (LangGraph's ``ToolNode``) calls
``tool:search`` twice at once; which thread is numbered ``#2`` differs from run to run. A
replay (or a resume) whose occurrence was recorded with another input takes the unclaimed
occurrence of the same key recorded with the same input, so thread scheduling is not a
divergence, while a genuinely changed input still is.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable

from loom_runtime import DecisionInputChangedError, FlowContext, Loom

ORDERS = iter([["a", "b"], ["b", "a"]])


def _in_threads(ctx: FlowContext, inputs: list[str], order: list[str]) -> list[str]:
    """Decide ``search`` for each input, each in its own thread, entering in ``order``."""
    turns = {name: threading.Event() for name in inputs}
    results: dict[str, str] = {}

    def call(name: str) -> None:
        turns[name].wait(5)
        results[name] = ctx.decide("search", lambda: f"hits for {name}", input={"q": name})
        following = order.index(name) + 1
        if following < len(order):
            turns[order[following]].set()

    threads = [
        threading.Thread(target=contextvars.copy_context().run, args=(call, name))
        for name in inputs
    ]
    for thread in threads:
        thread.start()
    turns[order[0]].set()
    for thread in threads:
        thread.join(5)
    return [results[name] for name in inputs]


def _flow(loom: Loom, order: Callable[[], list[str]], inputs: list[str]) -> None:
    @loom.flow("parallel-tools")
    def parallel(ctx: FlowContext) -> list[str]:
        return _in_threads(ctx, inputs, order())


def test_threads_arriving_in_another_order_replay_identically(sqlite_url: str) -> None:
    with Loom(sqlite_url) as loom:
        _flow(loom, lambda: next(ORDERS), ["a", "b"])
        run = loom.run("parallel-tools")
        decisions = loom.execution(run.execution_id).decisions
        result = loom.replay(run.execution_id)  # the threads now arrive b first

    assert bytes(decisions["search"].input) == b'{"q":"a"}'
    assert result.identical, result.describe()
    assert result.output == ["hits for a", "hits for b"]


def test_a_changed_input_among_concurrent_calls_still_diverges(sqlite_url: str) -> None:
    inputs = iter([["a", "b"], ["a", "c"]])
    with Loom(sqlite_url) as loom:

        @loom.flow("parallel-tools")
        def parallel(ctx: FlowContext) -> list[str]:
            return _in_threads(ctx, (chosen := next(inputs)), chosen)

        run = loom.run("parallel-tools")
        result = loom.replay(run.execution_id)

    assert not result.identical
    assert any(isinstance(d, DecisionInputChangedError) for d in result.divergences)
