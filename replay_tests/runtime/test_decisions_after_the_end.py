"""An execution's events end with its end: nothing is stored after ``Completed`` or ``Failed``.

A stream a flow left open when it returned, closed later (kept by an object outside, or
finalised by the garbage collector or the event loop), stored its decision after the end
event; so did a call made through the flow's ``ctx`` by a task that outlived the flow. An
export or a replay made before that late write saw another execution than one made after.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import loom_runtime
from loom_runtime import DecisionAfterEndError, FlowContext, Loom


def _events(loom: Loom, execution_id: Any) -> list[str]:
    return [row.topic.rsplit(".", 1)[-1] for row in loom.log.rows(execution_id)]


def _streaming(request: httpx.Request) -> httpx.Response:
    def body() -> Iterator[bytes]:
        yield b"one "
        yield b"two "
        yield b"three"

    return httpx.Response(200, content=body())


def _flows(loom: Loom, inner: httpx.BaseTransport, kept: list[Any]) -> None:
    client = httpx.Client(transport=loom_runtime.transport(inner))

    @loom.flow("first-piece")
    def first_piece(ctx: FlowContext) -> str:
        response = client.send(client.build_request("GET", "http://svc.test/s"), stream=True)
        first = next(response.iter_bytes()).decode()
        kept.append(response)  # left open: the flow returns with the stream half read
        return first

    @loom.flow("keeps-ctx")
    def keeps_ctx(ctx: FlowContext) -> int:
        kept.append(ctx)
        return int(ctx.decide("asked", lambda: 1))


def test_a_stream_left_open_is_stored_before_the_end_and_not_after(sqlite_url: str) -> None:
    """The part read when the flow returned is stored, marked incomplete, before
    ``Completed``; closing the stream later writes nothing; the replay is identical."""
    kept: list[Any] = []
    with Loom(sqlite_url) as loom:
        _flows(loom, httpx.MockTransport(_streaming), kept)
        run = loom.run("first-piece")
        assert _events(loom, run.execution_id)[-2:] == ["DecisionRecorded", "Completed"]
        kept.pop().close()
        assert _events(loom, run.execution_id)[-1] == "Completed"
        (decision,) = loom.execution(run.execution_id).decisions.values()
        assert b'"complete":false' in bytes(decision.value or b"")
    with Loom(sqlite_url) as fresh:
        _flows(fresh, httpx.MockTransport(pytest.fail), [])
        result = fresh.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == "one "


def test_a_decision_asked_after_the_flow_returned_is_refused_and_stores_nothing(
    sqlite_url: str,
) -> None:
    """A ``ctx`` used after its flow returned (a task or thread that outlived it) raises
    :class:`DecisionAfterEndError` naming the execution and the key; the log is unchanged."""
    kept: list[Any] = []
    with Loom(sqlite_url) as loom:
        _flows(loom, httpx.MockTransport(_streaming), kept)
        run = loom.run("keeps-ctx")
        before = _events(loom, run.execution_id)
        ctx = kept.pop()
        with pytest.raises(DecisionAfterEndError, match="late") as refused:
            ctx.decide("late", lambda: 2)
        assert str(run.execution_id) in str(refused.value)
        assert _events(loom, run.execution_id) == before


def test_a_long_run_does_not_keep_the_decisions_it_has_stored(sqlite_url: str) -> None:
    """The run keeps its open decisions to store them at its end; one already stored (with its
    value: a whole model response) must not be kept until then, or a long run holds every
    answer it ever received."""
    early: list[weakref.ref[Any]] = []

    with Loom(sqlite_url) as loom:

        @loom.flow("many-calls")
        def many_calls(ctx: FlowContext) -> int:
            for n in range(300):
                decision = ctx.open_decision(f"call-{n}")
                decision.record({"answer": "x" * 1000})
                if n < 10:
                    early.append(weakref.ref(decision))
            gc.collect()
            return sum(ref() is not None for ref in early)

        assert loom.run("many-calls").output == 0
