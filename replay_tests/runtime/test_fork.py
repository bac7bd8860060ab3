"""``loom.fork``: a new execution takes the parent's decisions before a point, applies
overrides, runs the rest live, and records its lineage; the parent is only read."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa

from loom_runtime import (
    AsyncFlowContext,
    DecisionKeyError,
    ExecutionNotFoundError,
    FlowContext,
    Loom,
    NotSerialisableError,
    OverrideTypeError,
)
from loom_runtime.errors import ForkPointError, LogCorruptError


class Agent:
    """A retrieval then a model call that depends on what was retrieved; counts calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.passages = ["disk full on db-1"]

    def retrieve(self) -> list[str]:
        self.calls["retrieve"] += 1
        return list(self.passages)

    def model(self, passages: list[str]) -> str:
        self.calls["model"] += 1
        return f"answer from {passages[0]}"


def register(loom: Loom, agent: Agent) -> None:
    @loom.flow("incident")
    def incident(ctx: FlowContext, question: str) -> dict[str, Any]:
        passages = ctx.decide("retrieve", agent.retrieve, input={"q": question}, kind="retrieval")
        answer = ctx.decide(
            "model", lambda: agent.model(passages), input={"passages": passages}, kind="model"
        )
        return {"answer": answer, "passages": passages}


def event_count(loom: Loom, execution_id: object) -> int:
    return len(list(loom.log.events(loom.execution(str(execution_id)).id)))


@pytest.fixture
def recorded(sqlite_url: str) -> Any:
    agent = Agent()
    with Loom(sqlite_url) as loom:
        register(loom, agent)
        parent = loom.run("incident", question="why is the db slow?")
        agent.calls.clear()
        agent.passages = ["LIVE passage"]
        yield loom, agent, parent


def test_a_fork_takes_the_decisions_before_the_point_and_runs_the_rest_live(recorded: Any) -> None:
    loom, agent, parent = recorded
    before = event_count(loom, parent.execution_id)

    fork = loom.fork(parent.execution_id, at="model")
    execution = loom.execution(fork.execution_id)

    assert fork.execution_id != parent.execution_id
    assert fork.output == {
        "answer": "answer from disk full on db-1",
        "passages": ["disk full on db-1"],
    }
    assert agent.calls == {"model": 1}, "the inherited retrieval is not computed again"
    assert execution.parent_id == parent.execution_id and execution.forked_at == 1
    assert execution.decisions["retrieve"].origin == "inherited"
    assert execution.decisions["model"].origin is None, "computed by the fork itself"
    assert event_count(loom, parent.execution_id) == before, "the parent is untouched"


def test_an_int_point_counts_decisions_in_recorded_order(recorded: Any) -> None:
    loom, agent, parent = recorded
    none = loom.fork(parent.execution_id, at=0)
    assert agent.calls == {"retrieve": 1, "model": 1}
    assert none.output["passages"] == ["LIVE passage"]
    agent.calls.clear()
    everything = loom.fork(parent.execution_id, at=2)
    assert agent.calls == {}
    assert everything.output == parent.output


def test_an_override_is_the_counterfactual(recorded: Any) -> None:
    """'Had retrieval returned these passages, what would the model have said?'"""
    loom, agent, parent = recorded
    fork = loom.fork(parent.execution_id, at="retrieve", override={"retrieve": ["runbook 7"]})
    decisions = loom.execution(fork.execution_id).decisions

    assert fork.output == {"answer": "answer from runbook 7", "passages": ["runbook 7"]}
    assert agent.calls == {"model": 1}, "an overridden decision is not computed"
    assert decisions["retrieve"].origin == "override"
    assert msgspec.json.decode(decisions["retrieve"].input) == {"q": "why is the db slow?"}
    assert msgspec.json.decode(decisions["model"].input) == {"passages": ["runbook 7"]}


def test_an_override_answers_whatever_the_key_is_asked_with(recorded: Any) -> None:
    """Forked before everything, the model is asked with live passages; the override answers."""
    loom, agent, parent = recorded
    fork = loom.fork(parent.execution_id, at=0, override={"model": "overridden answer"})
    decisions = loom.execution(fork.execution_id).decisions

    assert fork.output == {"answer": "overridden answer", "passages": ["LIVE passage"]}
    assert agent.calls == {"retrieve": 1}
    assert decisions["model"].origin == "override"
    assert msgspec.json.decode(decisions["model"].input) == {"passages": ["LIVE passage"]}


def test_a_fork_replays_identically(recorded: Any) -> None:
    loom, _agent, parent = recorded
    fork = loom.fork(parent.execution_id, at="model", override={"retrieve": ["x"]})
    assert loom.replay(fork.execution_id).identical
    assert loom.replay(parent.execution_id).identical


def test_a_fork_is_exported_and_imported_on_its_own(recorded: Any, tmp_path: Path) -> None:
    loom, _agent, parent = recorded
    fork = loom.fork(parent.execution_id, at=1)
    bundle = loom.export(fork.execution_id, tmp_path / "fork.json")

    with Loom(f"sqlite:///{tmp_path / 'other.db'}") as other:
        other.flows = loom.flows
        imported = other.import_bundle(bundle)
        execution = other.execution(imported)
        replay = other.replay(imported)
        (summary,) = other.executions()

    assert execution.parent_id == parent.execution_id, "its lineage travels with it"
    assert replay.identical, replay.describe()
    assert summary.parent_id == parent.execution_id


def test_the_summary_names_a_forks_parent(recorded: Any) -> None:
    loom, _agent, parent = recorded
    fork = loom.fork(parent.execution_id, at=1)
    summaries = {s.execution_id: s for s in loom.executions()}
    assert summaries[fork.execution_id].parent_id == parent.execution_id
    assert summaries[parent.execution_id].parent_id is None


@pytest.mark.parametrize("at", ["nope", "retriev", -1, 3, True, 1.0])
def test_a_point_the_parent_does_not_have_is_refused(recorded: Any, at: Any) -> None:
    loom, _agent, parent = recorded
    with pytest.raises(ForkPointError, match="from 0 to 2"):
        loom.fork(parent.execution_id, at=at)
    assert len(loom.executions()) == 1, "nothing was written"


def test_a_misspelt_key_is_answered_with_the_nearest(recorded: Any) -> None:
    loom, _agent, parent = recorded
    with pytest.raises(ForkPointError, match="nearest: 'retrieve'"):
        loom.fork(parent.execution_id, at="retreive")


def test_an_unknown_execution_is_refused(recorded: Any) -> None:
    loom, _agent, _parent = recorded
    with pytest.raises(ExecutionNotFoundError):
        loom.fork("00000000-0000-0000-0000-000000000000", at=0)


@pytest.mark.parametrize(
    ("override", "error"),
    [({"model": object()}, NotSerialisableError), ({1: "x"}, DecisionKeyError)],
    ids=["unstorable-value", "not-a-key"],
)
def test_an_override_that_cannot_be_stored_writes_nothing(
    recorded: Any, override: Any, error: type[Exception]
) -> None:
    loom, _agent, parent = recorded
    with pytest.raises(error):
        loom.fork(parent.execution_id, at=0, override=override)
    assert len(loom.executions()) == 1


def test_an_ordinary_run_stores_no_lineage_fields(recorded: Any) -> None:
    """Old rows and new runs keep their exact bytes: lineage is stored only by a fork."""
    loom, _agent, parent = recorded
    fork = loom.fork(parent.execution_id, at=1)
    with loom.log.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT originator_id, topic, state FROM stored_events ORDER BY rowid")
        ).fetchall()
    states = {
        (str(uuid_text).replace("-", ""), topic.rsplit(".", 1)[-1]): msgspec.json.decode(state)
        for uuid_text, topic, state in rows
    }
    parent_id = parent.execution_id.hex
    assert "parent_id" not in states[(parent_id, "Created")]
    assert "forked_at" not in states[(parent_id, "Created")]
    assert "origin" not in states[(parent_id, "DecisionRecorded")]
    assert states[(fork.execution_id.hex, "Created")]["forked_at"] == 1


def test_an_async_flow_is_forked_with_afork(sqlite_url: str) -> None:
    calls: Counter[str] = Counter()

    async def fetch(name: str) -> str:
        calls[name] += 1
        return f"{name}-live"

    with Loom(sqlite_url) as loom:

        @loom.flow("pair")
        async def pair(ctx: AsyncFlowContext) -> str:
            a = await ctx.decide("a", lambda: fetch("a"))
            b = await ctx.decide("b", lambda: fetch("b"))
            return f"{a}+{b}"

        parent = loom.run("pair")

        async def fork() -> Any:
            return await loom.afork(parent.execution_id, at="b", override={"b": "B!"})

        forked = asyncio.run(fork())

    assert forked.output == "a-live+B!"
    assert calls == {"a": 1, "b": 1}, "the parent's two calls only"


@pytest.mark.parametrize(
    ("topic", "field", "value"),
    [
        ("Created", "parent_id", "not-a-uuid"),
        ("Created", "forked_at", "three"),
        ("DecisionRecorded", "origin", "stolen"),
    ],
)
def test_tampered_lineage_is_a_corrupt_log(
    recorded: Any, sqlite_url: str, topic: str, field: str, value: Any
) -> None:
    loom, _agent, parent = recorded
    fork = loom.fork(parent.execution_id, at=1)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        rowid, stored = db.execute(
            "SELECT rowid, state FROM stored_events WHERE topic = ? ORDER BY rowid DESC",
            (f"loom.execution.{topic}",),
        ).fetchone()
        state = {**json.loads(stored), field: value}
        db.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?",
            (json.dumps(state).encode(), rowid),
        )
    with Loom(sqlite_url) as reader, pytest.raises(LogCorruptError):
        reader.execution(fork.execution_id)


class Crash(BaseException):
    """Stands for the process dying mid-flow (not an ``Exception``: nothing is recorded)."""


@pytest.mark.parametrize("encrypted", [False, True], ids=["clear", "encrypted"])
def test_a_fork_interrupted_before_its_override_is_asked_still_answers_it_when_resumed(
    sqlite_url: str, encrypted: bool
) -> None:
    """The overrides lived only in the forking process: a fork killed before the flow asked
    the overridden key was resumed (or recovered) with the key computed live, stored as the
    fork's own, and nothing said the counterfactual was never applied. They are stored with
    the fork's start (sealed with its input when the log is encrypted)."""
    from loom_runtime import MasterKey

    agent = Agent()
    with Loom(sqlite_url, encryption=MasterKey(b"f" * 32) if encrypted else None) as loom:
        register(loom, agent)
        parent = loom.run("incident", question="why is the db slow?")
        crash = {"now": True}
        retrieve = agent.retrieve

        def dies_once() -> list[str]:
            if crash.pop("now", False):
                raise Crash
            return retrieve()

        agent.retrieve = dies_once  # type: ignore[method-assign]
        with pytest.raises(Crash):
            loom.fork(parent.execution_id, at=0, override={"model": "OVERRIDDEN answer"})
        fork_id = next(
            e.execution_id for e in loom.executions() if e.execution_id != parent.execution_id
        )
        resumed = loom.resume(fork_id)
        decisions = loom.execution(fork_id).decisions
        with loom.log.engine.connect() as conn:
            states = conn.execute(sa.text("SELECT state FROM stored_events")).scalars().all()
    assert resumed.output["answer"] == "OVERRIDDEN answer"
    assert decisions["model"].origin == "override"
    assert agent.calls == {"retrieve": 2, "model": 1}  # the parent's run, the fork's resume
    held = sum(b"OVERRIDDEN" in bytes(state) for state in states)
    assert held == (0 if encrypted else 3)  # the fork's start, its decision, its output


def test_a_fork_whose_override_takes_another_path_replays_identically(tmp_path: Path) -> None:
    """An override before the fork point sends the flow down another branch, so an inherited
    decision is never asked. The fork completed, but its replay reported that inherited
    decision unused: the fork's own record holds it (copied with the start), and nothing can
    say whether the fork's run asked it. An inherited decision a fork's replay never asks is
    not a divergence; one the fork recorded itself still is (the control)."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("routed")
        def routed(ctx: Any) -> str:
            route = ctx.decide("route", lambda: "search", kind="model")
            if route == "answer-directly":
                return "direct"
            hits = ctx.decide("search", lambda: ["p1"], kind="retrieval")
            return str(ctx.decide("model", lambda: f"answer from {hits}", kind="model"))

        run = loom.run("routed")
        fork = loom.fork(run.execution_id, at=2, override={"route": "answer-directly"})
        assert fork.output == "direct"
        origins = {k: d.origin for k, d in loom.execution(fork.execution_id).decisions.items()}
        assert origins == {"search": "inherited", "route": "override"}
        assert loom.replay(fork.execution_id).identical
        again = loom.fork(run.execution_id, at=1)  # takes 'route', records 'search', 'model'
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as shortened:

        @shortened.flow("routed")
        def routed_shorter(ctx: Any) -> str:
            ctx.decide("route", lambda: "search", kind="model")
            return "answer from ['p1']"

        replayed = shortened.replay(again.execution_id)
    assert not replayed.identical  # the fork's own 'search' and 'model' were never asked


def test_an_override_of_the_wrong_type_is_named_as_the_override(tmp_path: Path) -> None:
    """An override is decoded with the type the flow asks with; one that does not fit was
    reported as the code's type having changed "or the log row was altered", sending the user
    to `loom verify`. It is named as the override given to the fork now."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("typed")
        def typed(ctx: Any) -> int:
            return int(ctx.decide("n", lambda: 1, type=int)) + 1

        run = loom.run("typed")
        with pytest.raises(OverrideTypeError, match="override of decision 'n'") as raised:
            loom.fork(run.execution_id, at=0, override={"n": "seven"})
        assert "loom verify" not in str(raised.value)
        assert loom.fork(run.execution_id, at=0, override={"n": 7}).output == 8  # control


def test_an_override_that_is_not_a_recorded_response_is_named_as_the_override(
    tmp_path: Path,
) -> None:
    """An ``http`` decision's value is a recorded response; an override that is not one
    (``{"status": "down"}``, meant as the response's JSON) was reported as "the log row or
    bundle was altered ... loom verify". It is named as the override given to the fork."""
    import httpx

    import loom_runtime

    inner = httpx.MockTransport(lambda request: httpx.Response(200, json={"status": "ok"}))
    client = httpx.Client(transport=loom_runtime.transport(inner))
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("status")
        def status(ctx: Any) -> Any:
            return client.get("https://status.example/api/db").json()

        run = loom.run("status")
        (key,) = loom.execution(run.execution_id).decisions
        with pytest.raises(OverrideTypeError, match="override of decision") as raised:
            loom.fork(run.execution_id, at=0, override={key: {"status": "down"}})
        assert "loom verify" not in str(raised.value)
