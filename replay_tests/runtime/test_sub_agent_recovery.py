"""Sub-agents and recovery (ADR 0040, amended "sub-agents"): a flow run inside another flow's
decision (``loom.run`` in a compute) is named by that decision, so when a worker dies inside
the child, recovering the parent computes the decision again and finishes the child it had
started, once, instead of starting a second child beside the orphaned first."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import AsyncFlowContext, FlowContext, Labels, Loom, MasterKey
from loom_runtime.bundle import BundleEvent, read_bundle, seal, write_bundle
from loom_runtime.recovery import MAX_CLAIMS
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


def derived(parent: uuid.UUID, *name: str) -> uuid.UUID:
    """A sub-agent's id: uuid5 of ``name``'s parts in the parent's id, made version 8."""
    raw = bytearray(uuid.uuid5(parent, "\n".join(name)).bytes)
    raw[6] = (raw[6] & 0x0F) | 0x80
    return uuid.UUID(bytes=bytes(raw))


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
    assert child.id == derived(parent.id, "0", "research", "1", "child", "0")


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


def test_a_decision_that_asks_another_run_after_the_crash_starts_that_one(
    loom: Loom, other: Loom, agent: SubAgent
) -> None:
    """The code changed between the crash and the recovery: the decision asks another
    question, so it gets a run of its own; the first, unfinished, is its parent's until the
    parent is finished, then recovered as any execution is."""
    died(loom, agent, "draft")
    agent.topic = "billing"
    [run] = other.recover()
    assert run.output == ["look-done", "draft-done"]
    first, second = sorted(children(other), key=lambda c: c.output is None)
    assert second.output is None and first.input != second.input
    [orphan] = other.recover()
    assert orphan.execution_id == second.id


def test_a_run_asked_for_another_user_is_not_handed_the_first_users_sub_agent(
    loom: Loom, other: Loom
) -> None:
    """The same flow and input for another user is another run: it must not be handed the
    first user's child (and, sealed, that user's decrypted output)."""
    user = {"name": "alice"}
    calls: Counter[str] = Counter()
    crash = {"on": True}
    for instance in (loom, other):

        @instance.flow("child")
        def child(ctx: FlowContext) -> str:
            def read() -> str:
                calls[user["name"]] += 1
                if crash["on"]:
                    raise Crash
                return f"mail of {user['name']}"

            return str(ctx.decide("read", read))

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> str:
            run = lambda: instance.run("child", labels=Labels(user=user["name"])).output  # noqa: E731
            return str(ctx.decide("inbox", run))

    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    user["name"], crash["on"] = "bob", False
    [run] = other.recover()
    assert run.output == "mail of bob"
    assert sorted(str(c.labels.user) for c in children(other)) == ["alice", "bob"]


def test_runs_started_from_threads_in_another_order_find_their_own(loom: Loom, other: Loom) -> None:
    """A decision fans out one run per topic from a thread pool; after the crash the threads
    start in the other order, so the n-th run of the flow asks another topic. Each finds the
    child of its own topic (by input), and each child's work is done once."""
    calls: Counter[str] = Counter()
    state: dict[str, Any] = {"order": ["a", "b"], "crash": True}
    for instance in (loom, other):

        @instance.flow("researcher")
        def researcher(ctx: FlowContext, topic: str) -> str:
            def look() -> str:
                calls[topic] += 1
                return topic.upper()

            value = str(ctx.decide("look", look))
            if state["crash"] and topic == "b":
                raise Crash
            return value

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> list[str]:
            def fan_out() -> list[str]:
                turns = {topic: threading.Event() for topic in ("a", "b")}

                def one(topic: str) -> str:
                    assert turns[topic].wait(20)
                    try:
                        return str(instance.run("researcher", topic=topic).output)
                    finally:  # the next topic in this run's order starts once this one ends
                        for rest in state["order"]:
                            if not turns[rest].is_set():
                                turns[rest].set()
                                break

                with ThreadPoolExecutor(2) as pool:
                    futures = [
                        pool.submit(contextvars.copy_context().run, one, topic)
                        for topic in ("a", "b")
                    ]
                    turns[state["order"][0]].set()
                    return [future.result() for future in futures]

            return list(ctx.decide("fan_out", fan_out))

    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    state["order"], state["crash"] = ["b", "a"], False
    [run] = other.recover()
    assert run.output == ["A", "B"]
    assert calls == Counter(a=1, b=1)
    assert len([e for e in other.executions() if e.flow == "researcher"]) == 2
    assert other.recover() == []


def test_a_forced_resume_takes_up_the_sub_agent_its_live_looking_worker_owns(
    loom: Loom, other: Loom, agent: SubAgent
) -> None:
    """``resume(force=True)`` is for a worker known gone whose heartbeat still looks fresh:
    its parent is taken over, and so is the child the decision finds (owned by that worker):
    before, the child's owner refused it inside the compute and the parent failed for good."""
    agent.crash_at = "draft"
    with loom.worker(recover_every=None):
        with pytest.raises(Crash):
            loom.run("parent")
        agent.crash_at = None
        parent_id = next(e.execution_id for e in other.executions() if e.flow == "parent")
        run = other.resume(parent_id, force=True)  # the worker still beats
    assert run.output == ["look-done", "draft-done"]
    assert agent.calls == Counter(research=2, look=1, draft=2, **{"after-child": 1})


def test_a_parent_set_aside_and_reopened_takes_up_the_sub_agent_that_finished_alone(
    loom: Loom, other: Loom, agent: SubAgent
) -> None:
    """A parent set aside by recovery (or failed elsewhere) without its decision failing keeps
    the decision's sub-agents: reopened, the decision (dropped by no reopening) takes up the
    child that was finished meanwhile, instead of starting a second and redoing its work."""
    died(loom, agent, "after-child")  # the child completed; the decision was never stored
    parent_id = next(e.execution_id for e in other.executions() if e.flow == "parent")
    parent = other.execution(parent_id)
    other._set_aside(parent, worker="recoverer", claims=MAX_CLAIMS)
    run = other.resume(parent_id, retry_failed=True)
    assert run.output == ["look-done", "draft-done"]
    assert agent.calls == Counter(research=2, look=1, draft=1, **{"after-child": 2})
    assert len(children(other)) == 1


def test_an_imported_execution_at_a_sub_agents_id_is_imported_and_never_taken_up(
    loom: Loom, other: Loom, tmp_path: Path
) -> None:
    """A sub-agent's id is derived, made version 8: ``loom import`` takes a child's bundle (it
    refused every id but a random one). A bundle can name any id, so a decision never takes up
    an imported execution: one planted at the id a crashed parent's decision derives, with the
    same input and labels and a forged output, is passed over for a run of its own."""
    crash = {"on": True}
    calls: Counter[str] = Counter()
    elsewhere = Loom(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    for instance in (loom, other, elsewhere):

        @instance.flow("child")
        def child(ctx: FlowContext, q: str) -> str:
            return str(ctx.decide("look", lambda: calls.update(["look"]) or f"real {q}"))

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> str:
            def research() -> str:
                if crash["on"] and instance is loom:
                    raise Crash  # dies before its decision starts the child
                return str(instance.run("child", q="x").output)

            return str(ctx.decide("research", research))

    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    crash["on"] = False
    parent_id = next(e.execution_id for e in other.executions() if e.flow == "parent")
    with elsewhere:
        elsewhere.run("parent")
        [made] = [e.execution_id for e in elsewhere.executions() if e.flow == "child"]
        genuine = elsewhere.export(made, tmp_path / "child.json")
    assert made.version == 8
    real = read_bundle(genuine)
    target = derived(parent_id, "0", "research", "1", "child", "0")

    def forged(event: BundleEvent) -> BundleEvent:
        state = json.loads(event.state)
        if "started_by" in state:
            state["started_by"] = str(parent_id)
        if "output" in state:
            state["output"] = "forged"
        return msgspec.structs.replace(event, state=json.dumps(state))

    planted = seal(
        execution_id=target,
        flow=real.flow,
        code_version=real.code_version,
        started_at_position=real.started_at_position,
        events=[forged(event) for event in real.events],
    )
    other.import_bundle(write_bundle(planted, tmp_path / "planted.json"))
    other.import_bundle(genuine)  # a child's own bundle imports
    assert other.execution(target).output is not None
    [run] = other.recover()
    assert run.output == "real x"
    assert calls["look"] == 2  # elsewhere's, and the recovered decision's own child


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
        in_clear = derived(run.execution_id, "0", "research", "1", "child", "0")
        assert child.started_by == run.execution_id and child.id != in_clear
        assert child.id.version == 8


def test_another_users_erased_sub_agent_does_not_stop_the_parents_recovery(
    sqlite_url: str,
) -> None:
    """A sealed parent's decision runs the same flow for alice and then bob; its worker dies in
    bob's child, and alice is erased before the recovery. The walk opened each child it passed,
    so alice's erased one raised ``ErasedError`` and failed the parent, bob's too. Another
    user's child is passed over by its labels (stored in clear) without being opened, and an
    erased one is passed over: alice's run starts anew, bob's is taken up."""
    key = MasterKey(bytes(range(32)))
    calls: Counter[str] = Counter()
    crash = {"on": True}
    with Loom(sqlite_url, encryption=key) as loom, Loom(sqlite_url, encryption=key) as other:
        for instance in (loom, other):

            @instance.flow("inbox")
            def inbox(ctx: FlowContext, who: str) -> str:
                user = who
                value = str(ctx.decide("read", lambda: calls.update([user]) or f"mail of {user}"))
                if crash["on"] and user == "bob":
                    raise Crash
                return value

            @instance.flow("parent")
            def parent(ctx: FlowContext, instance: Loom = instance) -> list[str]:
                def both() -> list[str]:
                    return [
                        str(instance.run("inbox", labels=Labels(user=user), who=user).output)
                        for user in ("alice", "bob")
                    ]

                return list(ctx.decide("both", both))

        with loom.worker(recover_every=None), pytest.raises(Crash):
            loom.run("parent")
        crash["on"] = False
        loom.erase(user="alice", reason="request", by="dpo")
        [run] = other.recover()
        assert run.output == ["mail of alice", "mail of bob"]
        assert calls == Counter(alice=2, bob=1)


def test_a_decision_s_many_sub_agents_are_named_and_found_in_linear_time(
    loom: Loom, other: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run walked the ids from the first (every one taken before it: quadratic uuid5s in
    a normal run) and re-read every sibling it passed (quadratic reads when a recovery asks
    them in another order). The walk starts at the lowest free number, and each id is read
    once per attempt."""
    order = {"topics": [f"t{n}" for n in range(60)], "crash": True}
    made = Counter[str]()
    for instance in (loom, other):

        @instance.flow("child")
        def child(ctx: FlowContext, topic: str) -> str:
            return str(ctx.decide("look", lambda: topic.upper()))

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> int:
            def fan_out() -> int:
                done = [instance.run("child", topic=topic).output for topic in order["topics"]]
                if order["crash"]:
                    raise Crash  # every child finished; the decision never stored
                return len(done)

            return int(ctx.decide("fan_out", fan_out))

    real = uuid.uuid5

    def counted(namespace: uuid.UUID, name: str) -> uuid.UUID:
        made["uuid5"] += 1
        return real(namespace, name)

    monkeypatch.setattr(uuid, "uuid5", counted)
    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("parent")
    assert made["uuid5"] == 60  # one each, not 60 * 61 / 2
    order["topics"].reverse()
    order["crash"] = False
    reads = Counter[str]()
    rows = other.log.rows
    monkeypatch.setattr(other.log, "rows", lambda *a, **k: reads.update(["rows"]) or rows(*a, **k))
    [run] = other.recover()
    assert run.output == 60
    assert reads["rows"] < 10 * 60, reads  # was ~60 * 61 / 2 executions read
