"""``loom.resume(id, retry_failed=True)``: a failed execution is reopened once its cause is
fixed; its failed decisions (and those recorded after the first of them) are computed again,
every one recorded before is kept, exactly once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections import Counter
from typing import Any

import pytest

from loom_runtime import (
    AsyncFlowContext,
    ExecutionConflictError,
    ExecutionFinishedError,
    ExecutionOwnedError,
    FlowContext,
    Loom,
)
from loom_runtime.context import save
from loom_runtime.errors import LogCorruptError


class Service:
    """A dependency that is down until it is fixed; counts every call per name."""

    def __init__(self) -> None:
        self.down = True
        self.calls: Counter[str] = Counter()

    def call(self, name: str) -> str:
        self.calls[name] += 1
        if self.down and name == "flaky":
            raise RuntimeError("service unavailable")
        return f"{name}-value"


def register(loom: Loom, service: Service) -> None:
    @loom.flow("pipeline")
    def pipeline(ctx: FlowContext) -> list[str]:
        first = ctx.decide("first", lambda: service.call("first"))
        flaky = ctx.decide("flaky", lambda: service.call("flaky"))
        last = ctx.decide("last", lambda: service.call("last"))
        return [first, flaky, last]


def failed_run(loom: Loom) -> str:
    with pytest.raises(RuntimeError, match="service unavailable"):
        loom.run("pipeline")
    (summary,) = loom.executions()
    return str(summary.execution_id)


def topics(loom: Loom, execution_id: str) -> list[str]:
    return [type(e).__qualname__ for e in loom.log.events(loom.execution(execution_id).id)]


def test_a_failed_execution_is_still_final_without_the_flag(sqlite_url: str) -> None:
    service = Service()
    with Loom(sqlite_url) as loom:
        register(loom, service)
        execution_id = failed_run(loom)
        service.down = False
        with pytest.raises(ExecutionFinishedError, match="retry_failed=True"):
            loom.resume(execution_id)
        assert topics(loom, execution_id)[-1] == "Execution.Failed", "nothing appended"


def test_reopening_recomputes_only_the_failed_decisions_and_finishes(sqlite_url: str) -> None:
    service = Service()
    with Loom(sqlite_url) as loom:
        register(loom, service)
        execution_id = failed_run(loom)
        service.down = False
        run = loom.resume(execution_id, retry_failed=True)
        execution = loom.execution(execution_id)
        replay = loom.replay(execution_id)
        (summary,) = loom.executions()

    assert run.output == ["first-value", "flaky-value", "last-value"]
    assert service.calls == {"first": 1, "flaky": 2, "last": 1}, "successes are not recomputed"
    assert execution.error is None and execution.output is not None
    (reopening,) = execution.reopenings
    assert reopening.dropped == ("flaky",)
    assert reopening.message == "service unavailable"
    assert replay.identical, replay.describe()
    assert summary.status == "completed"


def test_a_reopened_execution_that_fails_again_can_be_reopened_again(sqlite_url: str) -> None:
    service = Service()
    with Loom(sqlite_url) as loom:
        register(loom, service)
        execution_id = failed_run(loom)
        with pytest.raises(RuntimeError, match="service unavailable"):
            loom.resume(execution_id, retry_failed=True)  # not fixed yet
        (summary,) = loom.executions()
        assert summary.status == "failed"
        assert loom.replay(execution_id).identical
        service.down = False
        run = loom.resume(execution_id, retry_failed=True)
        execution = loom.execution(execution_id)

    assert run.output[1] == "flaky-value"
    assert len(execution.reopenings) == 2
    assert service.calls["first"] == 1


def test_a_completed_execution_is_returned_as_recorded(sqlite_url: str) -> None:
    service = Service()
    service.down = False
    with Loom(sqlite_url) as loom:
        register(loom, service)
        run = loom.run("pipeline")
        before = topics(loom, str(run.execution_id))
        again = loom.resume(run.execution_id, retry_failed=True)
        assert topics(loom, str(run.execution_id)) == before
    assert again.output == run.output


def test_two_workers_reopening_the_same_failure_one_wins(sqlite_url: str) -> None:
    """Both load the failed execution; both append a reopening at the same version."""
    service = Service()
    with Loom(sqlite_url) as loom:
        register(loom, service)
        execution_id = failed_run(loom)
        first, second = loom.execution(execution_id), loom.execution(execution_id)
        first.reopen(worker="a")
        second.reopen(worker="b")
        save(loom.log, first)
        with pytest.raises(ExecutionConflictError):
            save(loom.log, second)
        assert topics(loom, execution_id).count("Execution.Reopened") == 1


def test_two_looms_resuming_a_failure_concurrently_finish_it_once(sqlite_url: str) -> None:
    """Worker A reopens and is inside the recomputed decision when worker B resumes too: B is
    refused, A being a live worker while it resumes (ADR 0040, amended "resume"); forced, B
    completes the execution once and A's append is refused with the typed conflict."""
    down = [True]
    inside, go = threading.Event(), threading.Event()

    def gated() -> str:
        if down[0]:
            raise RuntimeError("service unavailable")
        if threading.current_thread().name == "A":
            inside.set()
            go.wait(timeout=30)
        return "fixed"

    def pipeline(ctx: FlowContext) -> str:
        return ctx.decide("flaky", gated)

    outcomes: dict[str, Any] = {}

    def worker(loom: Loom, execution_id: str) -> None:
        name = threading.current_thread().name
        try:
            outcomes[name] = loom.resume(execution_id, retry_failed=True, force=name == "B").output
        except ExecutionConflictError as exc:
            outcomes[name] = exc

    with Loom(sqlite_url) as a, Loom(sqlite_url) as b:
        for loom in (a, b):
            loom.flow("pipeline")(pipeline)
        with pytest.raises(RuntimeError):
            a.run("pipeline")
        execution_id = str(a.executions()[0].execution_id)
        down[0] = False

        thread_a = threading.Thread(target=worker, args=(a, execution_id), name="A")
        thread_a.start()
        assert inside.wait(timeout=30)
        with pytest.raises(ExecutionOwnedError, match="alive"):
            b.resume(execution_id, retry_failed=True)
        thread_b = threading.Thread(target=worker, args=(b, execution_id), name="B")
        thread_b.start()
        thread_b.join(timeout=30)
        go.set()
        thread_a.join(timeout=30)
        events = topics(a, execution_id)
        output = a.execution(execution_id).output

    assert outcomes["B"] == "fixed"
    assert isinstance(outcomes["A"], ExecutionConflictError)
    assert events.count("Execution.Completed") == 1
    assert events.count("Execution.Reopened") == 1
    assert output is not None and bytes(output) == b'"fixed"'


def test_an_async_flow_is_reopened_with_aresume(sqlite_url: str) -> None:
    service = Service()
    with Loom(sqlite_url) as loom:

        @loom.flow("pipeline")
        async def pipeline(ctx: AsyncFlowContext) -> str:
            first = await ctx.decide("first", lambda: service.call("first"))
            flaky = await ctx.decide("flaky", lambda: service.call("flaky"))
            return first + flaky

        execution_id = failed_run(loom)
        service.down = False

        async def reopen() -> Any:
            return (await loom.aresume(execution_id, retry_failed=True)).output

        output = asyncio.run(reopen())
        replay = loom.replay(execution_id)

    assert output == "first-valueflaky-value"
    assert service.calls == {"first": 1, "flaky": 2}
    assert replay.identical


def _edit_event(url: str, topic: str, *, new_topic: str | None = None, **state: Any) -> None:
    """Rewrite the stored event of ``topic`` (its topic and state fields), as an attacker."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        rowid, stored = db.execute(
            "SELECT rowid, state FROM stored_events WHERE topic = ?", (topic,)
        ).fetchone()
        edited = {**json.loads(stored), **state}
        db.execute(
            "UPDATE stored_events SET topic = ?, state = ? WHERE rowid = ?",
            (new_topic or topic, json.dumps(edited).encode(), rowid),
        )


def test_a_reopening_that_does_not_list_keys_is_a_corrupt_log(sqlite_url: str) -> None:
    service = Service()
    with Loom(sqlite_url) as loom:
        register(loom, service)
        execution_id = failed_run(loom)
        service.down = False
        loom.resume(execution_id, retry_failed=True)
    _edit_event(sqlite_url, "loom.execution.Reopened", dropped="flaky")
    with Loom(sqlite_url) as loom, pytest.raises(LogCorruptError):
        loom.execution(execution_id)


def test_a_reopening_of_an_execution_that_had_not_failed_is_a_corrupt_log(
    sqlite_url: str,
) -> None:
    """A forged Reopened in place of a claim: nothing had failed, so the log was edited."""
    interrupted = [True]

    def compute() -> str:
        if interrupted[0]:
            raise KeyboardInterrupt
        return "v"

    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", compute)

        with pytest.raises(KeyboardInterrupt):
            loom.run("f")
        execution_id = str(loom.executions()[0].execution_id)
        with pytest.raises(KeyboardInterrupt):
            loom.resume(execution_id)  # appends a claim, then is interrupted again
    _edit_event(
        sqlite_url,
        "loom.execution.Resumed",
        new_topic="loom.execution.Reopened",
        dropped=[],
    )
    with Loom(sqlite_url) as loom, pytest.raises(LogCorruptError, match="had not failed"):
        loom.execution(execution_id)


def test_a_caught_failure_is_reopened_with_every_decision_recorded_after_it(
    sqlite_url: str,
) -> None:
    """A flow caught a decision's failure, went on (a model asked with no hits), then failed.
    Reopened, the failed decision was computed again but those after it kept their answers:
    the model was asked with the new hits and refused as a changed input, on every reopening,
    so the execution could never finish; without an input it finished on the stale answer,
    two runs spliced. Every decision recorded after the first failed one is computed again
    (those before it are kept)."""
    service = Service()
    with Loom(sqlite_url) as loom:

        @loom.flow("pipeline")
        def pipeline(ctx: FlowContext) -> str:
            plan = ctx.decide("plan", lambda: service.call("plan"))
            try:
                hits = [ctx.decide("search", lambda: service.call("flaky"))]
            except RuntimeError:
                hits = []
            answer = ctx.decide(
                "model", lambda: f"{plan} from {hits}", input={"hits": hits}, kind="model"
            )
            if not hits:
                raise LookupError("no hits")
            return str(answer)

        with pytest.raises(LookupError):
            loom.run("pipeline")
        (summary,) = loom.executions()
        service.down = False
        run = loom.resume(summary.execution_id, retry_failed=True)
        execution = loom.execution(summary.execution_id)
        assert loom.replay(summary.execution_id).identical
    assert run.output == "plan-value from ['flaky-value']"
    (reopening,) = execution.reopenings
    assert reopening.dropped == ("search", "model")
    assert service.calls["plan"] == 1  # before the first failure: kept
