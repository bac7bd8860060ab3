"""Sub-agents and recovery (ADR 0040, amended "sub-agents"): a flow run inside another flow's
decision (``loom.run`` in a compute) is named by that decision, so when a worker dies inside
the child, recovering the parent computes the decision again and finishes the child it had
started, once, instead of starting a second child beside the orphaned first."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import pytest
from typer.testing import CliRunner

from loom_runtime import AsyncFlowContext, FlowContext, Loom, MasterKey, SubAgentChangedError
from loom_runtime.tools.cli import app
from replay_tests.runtime.test_recovery import Crash


class SubAgent:
    """A parent flow whose decision runs a two-decision sub-agent (``loom.run`` inside the
    compute); counts every computation, and crashes where it is told to."""

    def __init__(self) -> None:
        self.crash_at: str | None = None
        self.fail_at: str | None = None
        self.topic = "outage"
        self.calls: Counter[str] = Counter()

    def compute(self, key: str) -> str:
        self.calls[key] += 1
        if key == self.crash_at:
            raise Crash
        if key == self.fail_at:
            raise ValueError(f"{key} failed")
        return f"{key}-done"

    def register(self, instance: Loom) -> None:
        @instance.flow("child")
        def child(ctx: FlowContext, topic: str) -> list[str]:
            return [ctx.decide(key, lambda key=key: self.compute(key)) for key in ("look", "draft")]

        @instance.flow("parent")
        def parent(ctx: FlowContext) -> object:
            def research() -> object:
                self.calls["research"] += 1
                output = instance.run("child", topic=self.topic).output
                self.compute("after-child")
                return output

            return ctx.decide("research", research, kind="agent")


@pytest.fixture
def agent(loom: Loom, other: Loom) -> SubAgent:
    agent = SubAgent()
    agent.register(loom)
    agent.register(other)
    return agent


def died(loom: Loom, agent: SubAgent, at: str) -> None:
    """Run ``parent`` in a worker of ``loom`` that dies at computation ``at``."""
    agent.crash_at = at
    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    agent.crash_at = None


def children(loom: Loom) -> list[Any]:
    return [loom.execution(e.execution_id) for e in loom.executions() if e.flow == "child"]


def test_a_sub_agent_cut_off_with_its_parent_is_finished_once_by_the_parents_recovery(
    loom: Loom, other: Loom, agent: SubAgent
) -> None:
    """Recovery resumed the parent, whose decision ran again and started a second child that
    computed everything again, then resumed the orphaned first child too: the child's work ran
    twice and two children completed."""
    died(loom, agent, "draft")
    runs = other.recover()
    [child] = children(other)
    assert child.output is not None
    assert [run.output for run in runs] == [["look-done", "draft-done"]]
    assert agent.calls == Counter(research=2, look=1, draft=2, **{"after-child": 1})
    assert other.recover() == []
    parent = other.execution(runs[0].execution_id)
    assert child.started_by == parent.id
    # In clear, the key as it is (the sealed test's control): generation, key, attempt, flow, n.
    assert child.id == uuid.uuid5(parent.id, "\n".join(("0", "research", "1", "child", "0")))


def test_a_sub_agent_whose_parent_is_unfinished_is_left_to_the_parent(
    loom: Loom, other: Loom
) -> None:
    """A recoverer without the parent's flow leaves the child: taken alone, it would run
    beside the parent's own recovery, which finds the child running and fails."""
    agent = SubAgent()
    agent.register(loom)
    died(loom, agent, "draft")

    @other.flow("child")
    def child(ctx: FlowContext, topic: str) -> str:
        raise AssertionError("a child of an unfinished parent was recovered on its own")

    assert other.recover() == []
    [run] = loom.recover()  # a pass that has the parent's flow finishes both, the child once
    assert run.output == ["look-done", "draft-done"]
    assert agent.calls == Counter(research=2, look=1, draft=2, **{"after-child": 1})


def test_a_sub_agent_that_completed_before_the_crash_is_not_run_again(
    loom: Loom, other: Loom, agent: SubAgent
) -> None:
    died(loom, agent, "after-child")  # the child completed; the parent's decision was not stored
    [run] = other.recover()
    assert run.output == ["look-done", "draft-done"]
    assert agent.calls == Counter(research=2, look=1, draft=1, **{"after-child": 2})
    assert len(children(other)) == 1


def test_a_sub_agent_that_failed_before_the_crash_fails_the_decision_again_as_it_did(
    loom: Loom, other: Loom
) -> None:
    """Its failure is raised again (rebuilt, as a recorded failure is), not run again."""
    agent = SubAgent()
    seen: list[BaseException] = []
    for instance in (loom, other):

        @instance.flow("child")
        def child(ctx: FlowContext) -> str:
            return str(ctx.decide("look", lambda: agent.compute("look")))

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> str:
            def research() -> str:
                try:
                    return str(instance.run("child").output)
                except ValueError as exc:
                    seen.append(exc)
                    agent.compute("handled")
                    return "fallback"

            return str(ctx.decide("research", research))

    agent.fail_at, agent.crash_at = "look", "handled"
    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    agent.crash_at = None
    [run] = other.recover()
    assert run.output == "fallback"
    assert agent.calls == Counter(look=1, handled=2)
    assert [str(exc) for exc in seen] == ["look failed", "look failed"]
    assert len(children(other)) == 1


def test_a_reopened_parent_starts_a_new_sub_agent(loom: Loom, agent: SubAgent) -> None:
    """``resume(retry_failed=True)`` is a new attempt at the failed decision, whose child had
    failed: it runs a child again, it does not raise the old child's failure."""
    agent.fail_at = "draft"
    with pytest.raises(ValueError, match="draft failed"):
        loom.run("parent")
    parent_id = next(e.execution_id for e in loom.executions() if e.flow == "parent")
    agent.fail_at = None
    run = loom.resume(parent_id, retry_failed=True)
    assert run.output == ["look-done", "draft-done"]
    assert sorted(c.error is None for c in children(loom)) == [False, True]


def test_a_replay_that_computes_the_decision_live_starts_its_own_sub_agent(
    loom: Loom, agent: SubAgent
) -> None:
    """The control: only a recording run names sub-agents by their decision; a replay's live
    decision runs its child again, as it always did, rather than answering from the first."""
    run = loom.run("parent")
    before = Counter(agent.calls)
    result = loom.replay(run.execution_id, live={"agent"})
    assert result.identical
    assert agent.calls - before == Counter(research=1, look=1, draft=1, **{"after-child": 1})
    assert len(children(loom)) == 2


def test_a_sub_agent_asked_with_another_input_after_the_crash_is_refused(
    loom: Loom, other: Loom, agent: SubAgent
) -> None:
    died(loom, agent, "draft")
    agent.topic = "billing"  # the code changed: the decision asks another question now
    with pytest.raises(SubAgentChangedError, match=r"'research'.*'child'"):
        other.resume(next(e.execution_id for e in other.executions() if e.flow == "parent"))
    [child] = children(other)
    assert child.output is None and agent.calls["look"] == 1


def test_runs_of_one_flow_in_one_decision_and_its_parts_are_told_apart(
    loom: Loom, other: Loom
) -> None:
    """Each run is the n-th of its flow in the decision's attempt: two children, one of them
    inside a ``decide`` computed as a part of the decision (parts are not numbered apart, so
    the outer decision names both), finish once each after the crash in the second."""
    calls: Counter[str] = Counter()
    crash = {"on": True}
    for instance in (loom, other):

        @instance.flow("child")
        def child(ctx: FlowContext, topic: str) -> str:
            def look() -> str:
                calls[topic] += 1
                if topic == "b" and crash["on"]:
                    raise Crash
                return topic.upper()

            return str(ctx.decide("look", look))

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> list[str]:
            def research() -> list[str]:
                first = str(instance.run("child", topic="a").output)
                second = ctx.decide("part", lambda: instance.run("child", topic="b").output)
                return [first, str(second)]

            return list(ctx.decide("research", research))

    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    crash["on"] = False
    [run] = other.recover()
    assert run.output == ["A", "B"]
    assert calls == Counter(a=1, b=2)
    assert len(children(other)) == 2


def test_an_async_sub_agent_is_finished_once_by_its_parents_recovery(
    loom: Loom, other: Loom
) -> None:
    calls: Counter[str] = Counter()
    crash = {"on": True}
    for instance in (loom, other):

        @instance.flow("child")
        async def child(ctx: AsyncFlowContext) -> list[str]:
            async def step(key: str) -> str:
                calls[key] += 1
                if key == "draft" and crash["on"]:
                    raise Crash
                await asyncio.sleep(0)
                return key

            return [await ctx.decide(key, lambda key=key: step(key)) for key in ("look", "draft")]

        @instance.flow("parent")
        async def parent(ctx: AsyncFlowContext, instance: Loom = instance) -> object:
            async def research() -> object:
                return (await instance.arun("child")).output

            return await ctx.decide("research", research)

    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    crash["on"] = False
    [run] = other.recover()
    assert run.output == ["look", "draft"]
    assert calls == Counter(look=1, draft=2)
    assert len(children(other)) == 1


def test_executions_show_names_the_decision_that_started_a_sub_agent(
    loom: Loom, agent: SubAgent, db_url: str
) -> None:
    run = loom.run("parent")
    [child] = children(loom)
    shown = CliRunner().invoke(app, ["executions", "show", str(child.id), "--db", db_url])
    assert shown.exit_code == 0, shown.output
    assert f"started by a decision of execution {run.execution_id}" in shown.output


def test_a_sealed_parents_sub_agent_is_named_by_its_sealed_key(sqlite_url: str) -> None:
    """In an encrypted log a decision key is sealed (ADR 0049, "names"); a child's id is
    stored in clear, so it is derived from the key as sealed, never from the key in clear
    (which would let anyone holding the log confirm a guessed key). Recovery still finishes
    the child once."""
    key = MasterKey(bytes(range(32)))
    agent = SubAgent()
    with Loom(sqlite_url, encryption=key) as loom, Loom(sqlite_url, encryption=key) as other:
        agent.register(loom)
        agent.register(other)
        died(loom, agent, "draft")
        [run] = other.recover()
        assert run.output == ["look-done", "draft-done"]
        assert agent.calls == Counter(research=2, look=1, draft=2, **{"after-child": 1})
        [child] = children(other)
        in_clear = uuid.uuid5(run.execution_id, "\n".join(("0", "research", "1", "child", "0")))
        assert child.started_by == run.execution_id and child.id != in_clear
