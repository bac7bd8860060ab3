"""ADR 0002, amended: a flow started from another flow's body outside any decision
(``loom.run``/``arun`` called by the orchestrator's own code) is refused, typed. Nothing
recorded it in the parent: every replay and resume of the parent ran the child again live (its
model calls, a new execution appended), though a replay "never calls compute and never
appends", and an offline replay diverged. Started inside ``ctx.decide``, the child records
into its own execution and the parent records its result: a replay answers it."""

from __future__ import annotations

import pytest

from loom_runtime import AsyncFlowContext, FlowContext, Loom, SubflowOutsideDecisionError


def test_an_async_flow_starting_a_flow_from_its_body_is_refused(loom: Loom) -> None:
    calls: list[str] = []

    @loom.flow("research")
    async def research(ctx: AsyncFlowContext, topic: str) -> str:
        async def model() -> str:
            calls.append(topic)
            return f"answer to {topic}"

        answer: str = await ctx.decide("model", model, input=topic)
        return answer

    @loom.flow("orchestrator")
    async def orchestrator(ctx: AsyncFlowContext, topic: str) -> str:
        sub = await loom.arun("research", topic=topic)
        return str(sub.output)

    with pytest.raises(SubflowOutsideDecisionError, match=r"inside ctx\.decide"):
        loom.run("orchestrator", topic="db")
    assert calls == []
    assert [e.flow for e in loom.executions()] == ["orchestrator"]


def test_a_flow_started_inside_a_decision_replays_without_running_it_again(loom: Loom) -> None:
    """The control and the way out: the same sub-flow started inside ``ctx.decide``."""
    calls: list[str] = []

    @loom.flow("research")
    def research(ctx: FlowContext, topic: str) -> str:
        return str(ctx.decide("model", lambda: calls.append(topic) or f"answer to {topic}"))

    @loom.flow("orchestrator")
    def orchestrator(ctx: FlowContext, topic: str) -> str:
        return str(ctx.decide("research", lambda: loom.run("research", topic=topic).output))

    with pytest.raises(SubflowOutsideDecisionError):

        @loom.flow("body-start")
        def body_start(ctx: FlowContext) -> str:
            return str(loom.run("research", topic="x").output)

        loom.run("body-start")
    run = loom.run("orchestrator", topic="db")
    position = loom.log.position
    assert run.output == "answer to db" and calls == ["db"]
    assert loom.replay(run.execution_id).identical
    assert loom.log.position == position and calls == ["db"]


def test_a_flow_started_while_an_open_decision_waits_for_its_value_is_allowed(
    loom: Loom,
) -> None:
    """An open decision is one of the flow's decisions being computed, its value recorded
    later (a recorded HTTP call's, an in-process service behind it that runs a flow of its
    own): the sub-flow started meanwhile is its value's work, as inside ``ctx.decide``, and
    a replay answers the open decision from the log."""

    @loom.flow("child")
    def child(ctx: FlowContext) -> str:
        return str(ctx.decide("work", lambda: "done"))

    @loom.flow("parent")
    def parent(ctx: FlowContext) -> str:
        opened = ctx.open_decision("sub")
        if opened.recorded:
            return str(opened.value)
        return str(opened.record(loom.run("child").output))

    run = loom.run("parent")
    assert run.output == "done"
    assert loom.replay(run.execution_id).identical
