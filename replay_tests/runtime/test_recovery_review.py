"""Recovery's review (ADR 0040, amended 2026-12-05 "review"): five ways a live worker's
execution was taken over, or an abandoned one was never finished, found by an adversarial
review with repro scripts, each pinned here on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter

import pytest
from typer.testing import CliRunner

from loom_runtime import ExecutionOwnedError, FlowContext, Loom, RecoveryLimitError
from loom_runtime.context import save
from loom_runtime.recovery import MAX_CLAIMS, recover, unfinished
from loom_runtime.tools.cli import app
from replay_tests.runtime.test_recovery import (
    OUTPUT,
    Crash,
    Steps,
    age,
    events,
    interrupted,
    steps,
)

__all__ = ["steps"]  # a fixture, imported for the tests below


@pytest.mark.parametrize("stopped_by", [asyncio.CancelledError, KeyboardInterrupt])
def test_a_recovered_flow_stopped_by_a_base_exception_is_taken_again_not_stranded(
    loom: Loom, other: Loom, steps: Steps, stopped_by: type[BaseException]
) -> None:
    """A resumed flow that raised a ``BaseException`` that is no interrupt (a cancelled child
    task's ``CancelledError``) ended the worker's recovery thread, and the execution it had
    just claimed was owned by a live worker for good. The thread goes on, and the worker
    takes the execution again once the cause is gone."""
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
    cancelled = {"on": True}

    def compute(key: str) -> str:
        if key == "second" and cancelled["on"]:
            raise stopped_by  # no signal reaches the recovery thread: the flow's own code
        return f"{key}-value"

    steps.compute = compute  # type: ignore[method-assign]
    with other.worker(heartbeat=0.05, recover_every=0.05, dead_after=5):
        deadline = time.monotonic() + 20
        while events(other, execution_id)["Resumed"] < 1:
            assert time.monotonic() < deadline, "the worker never claimed the execution"
            time.sleep(0.02)
        cancelled["on"] = False  # the cause is gone: the next pass finishes it
        while other.execution(execution_id).output is None:
            assert time.monotonic() < deadline, "the claimed execution was stranded"
            time.sleep(0.02)
        assert "loom-recovery" in {thread.name for thread in threading.enumerate()}
    assert events(other, execution_id)["Completed"] == 1


def test_an_execution_recovery_cannot_finish_is_set_aside_and_does_not_block_the_rest(
    loom: Loom, other: Loom, steps: Steps, caplog: pytest.LogCaptureFixture
) -> None:
    """A flow that stops whatever runs it (here a ``Crash`` on every resume) was claimed for
    ever, and, oldest first, stopped each recoverer before the executions behind it. One
    claimed ``MAX_CLAIMS`` times is failed with ``RecoveryLimitError`` and not run again; a
    healthy one is recovered in the first pass."""
    with loom.worker(recover_every=None):
        poison = interrupted(loom, steps)
        healthy = interrupted(loom, steps)

    def compute(key: str) -> str:
        if key == "second" and steps.crash:
            raise Crash
        return f"{key}-value"

    steps.compute = compute  # type: ignore[method-assign]
    steps.crash = True
    first = recover(other, dead_after=30, include_unowned=False)
    assert [run.execution_id for run in first] == []  # the crash came before: the pass goes on
    assert other.execution(healthy).output is None  # the same crash, for the same flow
    steps.crash = False
    assert {run.execution_id for run in recover(other, dead_after=30, include_unowned=False)} == {
        poison,
        healthy,
    }
    # Now one that crashes every time: claimed MAX_CLAIMS times, then set aside.
    with loom.worker(recover_every=None):
        doomed = interrupted(loom, steps)
    steps.crash = True
    with caplog.at_level(logging.ERROR, logger="loom.runtime"):
        for _ in range(MAX_CLAIMS + 2):
            recover(other, dead_after=30, include_unowned=False)
    assert events(other, doomed)["Resumed"] == MAX_CLAIMS + 1  # the last claim sets it aside
    error = other.execution(doomed).error
    assert error is not None and error[0].endswith(RecoveryLimitError.__qualname__)
    assert doomed not in {e.execution_id for e in unfinished(other.log)}
    assert any("set aside" in record.getMessage() for record in caplog.records)


def test_resume_refuses_an_execution_a_live_worker_owns_unless_forced(
    loom: Loom, other: Loom, steps: Steps, db_url: str
) -> None:
    """``loom resume`` took over an execution a heart-beating worker was running (its open
    decision computed twice, that worker stopped at its next append), and ``executions show``
    advised it. Refused typed with nothing written; ``force`` takes it over."""
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
        head = other.log.position
        with pytest.raises(ExecutionOwnedError, match="alive"):
            other.resume(execution_id)
        refused = CliRunner().invoke(app, ["resume", str(execution_id), "--db", db_url])
        assert refused.exit_code == 2 and "--force" in refused.output
        shown = CliRunner().invoke(app, ["executions", "show", str(execution_id), "--db", db_url])
        assert "if its worker is gone" in shown.output
        assert other.log.position == head
        run = other.resume(execution_id, force=True)
    assert run.output == OUTPUT
    assert events(other, execution_id)["Completed"] == 1


def test_a_worker_never_takes_over_an_execution_it_is_running(loom: Loom) -> None:
    """A worker whose beats lagged (a long computation holding the GIL, a locked database)
    looked dead to its own recovery, which took over the execution it was running: computed
    twice, and the run stopped by a conflict. Nor does ``resume`` on the same Loom, from
    another thread (a second review found that one)."""
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    @loom.flow("slow")
    def slow(ctx: FlowContext) -> str:
        def wait() -> str:
            calls.append(threading.current_thread().name)
            entered.set()
            assert release.wait(20)
            return "done"

        return ctx.decide("request", wait)

    with loom.worker(recover_every=None) as worker:
        runner = threading.Thread(target=lambda: loom.run("slow"), name="runner")
        runner.start()
        assert entered.wait(20)
        execution_id = loom.executions()[-1].execution_id
        age(loom, worker, 3600)  # its beats look an hour old
        assert loom.recover(dead_after=60) == []
        with pytest.raises(ExecutionOwnedError, match="running in this process"):
            loom.resume(execution_id)
        release.set()
        runner.join(20)
    assert calls == ["runner"]
    assert events(loom, execution_id) == Counter(Created=1, DecisionRecorded=1, Completed=1)


def test_a_run_the_worker_no_longer_runs_is_finished_by_its_own_recovery(
    loom: Loom, steps: Steps
) -> None:
    """A run of a live worker that was cancelled or interrupted (its process went on) is owned
    by a worker that is alive and runs it no more: other workers leave it to its owner, so its
    owner's recovery finishes it (a second review found it stranded for the worker's life)."""
    with loom.worker(recover_every=None) as worker:
        execution_id = interrupted(loom, steps)
        (run,) = loom.recover()
        assert run.execution_id == execution_id and run.output == OUTPUT
        assert loom.execution(execution_id).owner == worker


def test_a_worker_is_judged_by_the_dead_after_it_asked_for(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    """A worker beating every 2 s that asked for 60 s was taken for dead by a recoverer with a
    shorter ``dead_after`` (``loom recover --dead-after 0.1``, or the default 30 s against a
    worker beating every 45): its running execution was taken over. Its row says what it
    asked for, and the longer of the two is used; a stopped worker is still dead at once."""
    with loom.worker(heartbeat=2, dead_after=60, recover_every=None) as worker:
        execution_id = interrupted(loom, steps)
        age(loom, worker, 5)
        assert other.recover(dead_after=0.1) == []
        (row,) = [w for w in other.workers.workers(dead_after=0.1) if w.worker == worker]
        assert row.alive and row.dead_after == 60
        age(loom, worker, 120)
        assert [run.execution_id for run in other.recover(dead_after=0.1)] == [execution_id]
    assert Counter(type(e).__name__ for e in other.log.events(execution_id))["Completed"] == 1


def test_a_workers_table_of_an_earlier_release_gains_the_column(db_url: str) -> None:
    """A ``loom_workers`` table made before workers could say what they ask for has no
    ``dead_after`` column: the first registry opened on it adds it (once, under the DDL lock),
    and its rows, which asked for nothing, are judged by the recoverer's ``dead_after``."""
    from sqlalchemy import create_engine, inspect

    from loom_runtime.workers import WorkerRegistry

    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE loom_workers (worker VARCHAR(300) PRIMARY KEY, host VARCHAR(255) "
                "NOT NULL, pid BIGINT NOT NULL, started_at FLOAT NOT NULL, beat_at FLOAT NOT NULL)"
            )
            conn.exec_driver_sql("INSERT INTO loom_workers VALUES ('old:1:a', 'old', 1, 1.0, 1.0)")
        registry = WorkerRegistry(engine)
        WorkerRegistry(engine)  # a second opener finds the column and adds nothing
        with engine.connect() as conn:
            columns = [c["name"] for c in inspect(conn).get_columns("loom_workers")]
        assert columns.count("dead_after") == 1
        (old,) = registry.workers(dead_after=30)
        assert old.worker == "old:1:a" and old.dead_after is None and not old.alive
        registry.beat("new:2:b", dead_after=90)
        assert {w.worker: w.alive for w in registry.workers(dead_after=30)}["new:2:b"]
    finally:
        engine.dispose()


def test_an_execution_resumed_many_times_with_progress_is_never_set_aside(
    loom: Loom, other: Loom
) -> None:
    """Only claims in a row count towards ``MAX_CLAIMS``: a flow resumed by hand again and
    again, storing a decision each time before it stops (a long flow on a flaky host), is
    progress, and recovery finishes it rather than failing it."""
    keys = [f"step-{n}" for n in range(MAX_CLAIMS + 4)]
    stop_at = {"index": 1}

    def register(target: Loom) -> None:
        @target.flow("long")
        def long(ctx: FlowContext) -> list[str]:
            def compute(index: int) -> str:
                if index == stop_at["index"]:
                    raise Crash
                return keys[index]

            return [ctx.decide(key, lambda i=i: compute(i)) for i, key in enumerate(keys)]

    register(loom)
    register(other)
    with loom.worker(recover_every=None):
        with pytest.raises(Crash):
            loom.run("long")
        execution_id = loom.executions()[-1].execution_id
        for index in range(2, MAX_CLAIMS + 3):  # resumed by hand, one decision further each time
            stop_at["index"] = index
            with pytest.raises(Crash):
                loom.resume(execution_id)
    assert events(other, execution_id)["Resumed"] > MAX_CLAIMS
    stop_at["index"] = -1
    (run,) = other.recover()
    assert run.execution_id == execution_id and run.output == keys


def test_a_recoverer_without_the_flow_leaves_even_a_looping_execution_alone(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    """Set aside ran before the check that the recoverer has the flow: a Loom without it
    failed an execution it was documented to leave for a worker that has it. One with the
    flow sets it aside (the control)."""
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
    for _ in range(MAX_CLAIMS):  # claimed in a row by processes that died at once
        execution = other.execution(execution_id)
        execution.claim(worker="gone:1:x")
        save(other.log, execution)
    with Loom(loom.settings.url) as bare:  # no flow registered
        assert recover(bare, dead_after=30, include_unowned=True) == []
        assert bare.execution(execution_id).error is None
    assert other.recover(include_unowned=True) == []
    error = other.execution(execution_id).error
    assert error is not None and error[0].endswith(RecoveryLimitError.__qualname__)


def test_resume_judges_a_worker_by_the_dead_after_it_asked_for(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    """``resume`` took every worker that beat within 30 s for alive: one that asked for 1 s
    and stopped beating 3 s ago was still refused as alive."""
    with loom.worker(heartbeat=0.2, dead_after=1, recover_every=None) as worker:
        execution_id = interrupted(loom, steps)
        loom._heartbeat._stopping.set()  # type: ignore[union-attr]  # it stops beating
        age(loom, worker, 3)
        assert other.resume(execution_id).output == OUTPUT


def test_an_execution_passed_between_live_workers_is_recovered_not_set_aside(
    loom: Loom, other: Loom, steps: Steps, caplog: pytest.LogCaptureFixture
) -> None:
    """A compute holding the GIL past ``dead_after`` stops its worker's heartbeat thread: the
    other workers take it for dead and claim the execution in turn, each taken for dead in
    its turn. Every claim in that row was taken from a worker alive again now, yet after
    ``MAX_CLAIMS`` of them a healthy fleet recorded the execution failed
    (``RecoveryLimitError``, blaming a flow that "may stop the process that runs it"). Only
    claims taken from workers none of which is alive now set it aside; otherwise it is
    recovered, with a warning to raise ``dead_after``."""
    with loom.worker(recover_every=None) as stopped:  # the last claimer: taken for dead
        execution_id = interrupted(loom, steps)
    live = ("live-a", "live-b")
    for worker in live:
        other.workers.beat(worker, dead_after=60)
    for claim in range(MAX_CLAIMS):
        owner = stopped if claim == MAX_CLAIMS - 1 else live[claim % 2]
        other._claim(other.execution(execution_id), worker=owner)
    [listed] = [e for e in unfinished(other.log) if e.execution_id == execution_id]
    assert listed.claims == MAX_CLAIMS  # the control: this is the row that set it aside
    with caplog.at_level(logging.WARNING, logger="loom.runtime"):
        runs = recover(other, dead_after=60, include_unowned=False)
    assert [run.execution_id for run in runs] == [execution_id]
    assert other.execution(execution_id).error is None
    assert any("dead_after" in record.getMessage() for record in caplog.records)


def test_a_flow_that_stops_its_own_worker_s_runs_is_still_set_aside(loom: Loom) -> None:
    """The control the lagging-heartbeat rule above must keep: a flow stopped by a
    ``BaseException`` that is no interrupt is taken back by its own live worker every pass;
    claims taken from the recoverer itself are no sign of a lagging heartbeat, and after
    ``MAX_CLAIMS`` it is set aside (it ran 40 times in 4 s, still running, when they were)."""

    class Poison(BaseException):
        pass

    runs = {"n": 0}

    @loom.flow("poison")
    def poison(ctx: FlowContext) -> str:
        runs["n"] += 1
        ctx.decide("first", lambda: 1)
        raise Poison

    with pytest.raises(Poison):
        loom.run("poison")
    with loom.worker(recover_every=None) as worker:
        for _ in range(MAX_CLAIMS + 3):
            recover(loom, dead_after=30, include_unowned=True)
    [summary] = loom.executions()
    error = loom.execution(summary.execution_id).error
    assert error is not None and error[0].endswith(RecoveryLimitError.__qualname__)
    assert runs["n"] == MAX_CLAIMS + 1, worker
