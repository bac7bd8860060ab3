"""ctx.decide: recorded before returned, round-trip types, keyed occurrence matching."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
import pytest
from freezegun import freeze_time

from loom_runtime import DecisionKeyError, FlowContext, Loom


def test_value_returned_live_is_the_decoded_round_trip(loom: Loom) -> None:
    """A tuple comes back as a list on the live run too, exactly as a replay will see it."""
    seen: list[Any] = []

    @loom.flow("f")
    def f(ctx: FlowContext) -> list[Any]:
        value = ctx.decide("pair", lambda: (1, "a"))
        seen.append(value)
        return value

    run = loom.run("f")
    assert seen == [[1, "a"]] and isinstance(seen[0], list)
    assert run.output == [1, "a"]


def test_decision_is_durable_before_the_flow_sees_it(loom: Loom, db_url: str) -> None:
    """When decide returns, the value is committed: another connection already reads it."""
    seen_by_another_reader: list[list[str]] = []

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        value = ctx.decide("k", lambda: "v")
        with Loom(db_url) as reader:
            seen_by_another_reader.append(
                [n.topic for n in reader.log.notifications() if n.topic.endswith("Recorded")]
            )
        return value

    loom.run("f")
    assert seen_by_another_reader == [["loom.execution.DecisionRecorded"]]


def test_typed_decide_returns_the_declared_type(loom: Loom) -> None:
    """``type=`` decodes the stored JSON: a datetime or a Struct comes back as itself."""

    class Hit(msgspec.Struct):
        doc: str
        score: float

    out: dict[str, Any] = {}

    @loom.flow("f")
    def f(ctx: FlowContext) -> None:
        out["hits"] = ctx.decide("s", lambda: [Hit("a", 1.5)], type=list[Hit])
        out["when"] = ctx.now()
        out["id"] = ctx.uuid()
        out["r"] = ctx.random()

    loom.run("f")
    assert out["hits"] == [Hit("a", 1.5)]
    assert isinstance(out["when"], datetime) and out["when"].tzinfo is not None
    assert isinstance(out["id"], UUID)
    assert 0.0 <= out["r"] < 1.0


def test_now_is_recorded_and_replayed(loom: Loom) -> None:
    """ctx.now() under freezegun is the pinned time live, and the same time on replay later."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        return ctx.now().isoformat()

    with freeze_time("2026-01-02T03:04:05Z"):
        run = loom.run("f")
    assert run.output == "2026-01-02T03:04:05+00:00"
    with freeze_time("2030-12-31T00:00:00Z"):
        result = loom.replay(run.execution_id)
    assert result.identical and result.output == run.output


def test_repeated_key_gets_an_occurrence_counter(loom: Loom) -> None:
    """The n-th use of one key is recorded as key#n; a caller's own 'k#2' does not collide."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> list[int]:
        return [
            ctx.decide("k", lambda: 1),
            ctx.decide("k#2", lambda: 2),
            ctx.decide("k", lambda: 3),
        ]

    run = loom.run("f")
    decisions = loom.execution(run.execution_id).decisions
    assert list(decisions) == ["k", "k#2", "k#3"]
    assert run.output == [1, 2, 3]
    assert loom.replay(run.execution_id).identical


def test_gather_matches_by_key_whatever_order_computations_finish(loom: Loom) -> None:
    """Same key used concurrently: numbered at call time, so a replay maps each to its value."""
    delays = [0.03, 0.0, 0.02, 0.01]

    @loom.flow("g")
    async def g(ctx: Any) -> list[str]:
        async def slow(i: int) -> str:
            await asyncio.sleep(delays[i])
            return f"v{i}"

        return list(await asyncio.gather(*(ctx.decide("k", lambda i=i: slow(i)) for i in range(4))))

    run = loom.run("g")
    assert run.output == ["v0", "v1", "v2", "v3"]
    decisions = loom.execution(run.execution_id).decisions
    assert [msgspec.json.decode(decisions[k].value) for k in ("k", "k#2", "k#3", "k#4")] == [
        "v0",
        "v1",
        "v2",
        "v3",
    ]
    # Completion order differed from call order, yet the replay is identical.
    assert list(decisions) != ["k", "k#2", "k#3", "k#4"]
    assert loom.replay(run.execution_id).identical


def test_decide_passed_around_as_a_plain_value(loom: Loom) -> None:
    """``decide=ctx.decide`` is an ordinary bound method: helpers take it as an argument."""

    def helper(decide: Any) -> int:
        return decide("x", lambda: 41) + 1

    @loom.flow("f")
    def f(ctx: FlowContext) -> int:
        return helper(ctx.decide)

    run = loom.run("f")
    assert run.output == 42 and loom.replay(run.execution_id).identical


def test_input_is_recorded_with_the_decision(loom: Loom) -> None:
    """The request a decision was made with is stored beside its value."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        return ctx.decide("model", lambda: "ok", input={"prompt": "hello"}, kind="model")

    run = loom.run("f")
    decision = loom.execution(run.execution_id).decisions["model"]
    assert msgspec.json.decode(decision.input) == {"prompt": "hello"}
    assert decision.kind == "model"


@pytest.mark.parametrize("key", ["", None, 3])
def test_bad_decision_key_is_refused(loom: Loom, key: Any) -> None:
    """A key must be a non-empty str: it is how the replay finds the value."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> None:
        ctx.decide(key, lambda: 1)

    with pytest.raises(DecisionKeyError):
        loom.run("f")


def test_async_compute_in_a_sync_flow_is_refused(loom: Loom) -> None:
    """A coroutine in a sync flow would be stored unawaited: refuse with what to do."""

    async def fetch() -> int:
        return 1

    @loom.flow("f")
    def f(ctx: FlowContext) -> None:
        ctx.decide("k", fetch)

    with pytest.raises(TypeError, match="async def"):
        loom.run("f")


def test_async_flow_inside_a_running_loop_uses_arun(loom: Loom) -> None:
    """From inside an event loop, arun/areplay await the flow; run() says to use them."""

    @loom.flow("a")
    async def a(ctx: Any) -> str:
        return await ctx.decide("k", lambda: "v")

    async def main() -> None:
        run = await loom.arun("a")
        assert run.output == "v"
        assert (await loom.areplay(run.execution_id)).identical

    asyncio.run(main())
    assert datetime.now(UTC)  # the loop closed cleanly


class _Text(str):
    """A str subclass, as frameworks return (LangChain's message text is one)."""


class _Score(float):
    """A float subclass (numpy's float64 is one)."""


def test_str_and_number_subclasses_are_recorded_as_their_base(loom: Loom) -> None:
    """A framework's str or float subclass is plain data: recorded as its base type, not
    refused after the (billed) call was made, and replayed equal."""

    @loom.flow("subclasses")
    def flow(ctx: FlowContext) -> dict[str, Any]:
        text = ctx.decide("answer", lambda: _Text("restart the pool"))
        return {"text": text, "score": ctx.decide("score", lambda: _Score(0.5)), "n": _Text("x")}

    run = loom.run("subclasses")
    assert run.output == {"text": "restart the pool", "score": 0.5, "n": "x"}
    assert type(run.output["text"]) is str
    assert loom.replay(run.execution_id).identical
