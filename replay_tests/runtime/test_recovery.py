"""Workers, heartbeats and ``loom.recover()`` (ADR 0040): an execution whose owner stopped
beating is claimed by exactly one live worker and finished; one whose owner is alive, or never
registered, is left alone unless asked."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import update
from typer.testing import CliRunner, Result

from loom_runtime import (
    ConfigurationError,
    EncryptionOffError,
    ExecutionOwnedError,
    FlowContext,
    Loom,
    LoomError,
    MasterKey,
)
from loom_runtime.context import save
from loom_runtime.log import LogSettings
from loom_runtime.recovery import unfinished
from loom_runtime.tools.cli import app
from loom_runtime.workers import WorkerRegistry, workers_table


class Crash(BaseException):
    """Stands for the process dying mid-flow: not an ``Exception``, so no failure is recorded
    and the execution stays unfinished, as after a SIGKILL."""


class Steps:
    """A flow of three decisions whose second can crash; counts every computation."""

    def __init__(self) -> None:
        self.crash = False
        self.calls: Counter[str] = Counter()

    def compute(self, key: str) -> str:
        self.calls[key] += 1
        if key == "second" and self.crash:
            raise Crash
        return f"{key}-value"

    def register(self, loom: Loom) -> None:
        @loom.flow("steps")
        def steps(ctx: FlowContext) -> list[str]:
            return [ctx.decide(key, lambda key=key: self.compute(key)) for key in KEYS]


KEYS = ("first", "second", "third")
OUTPUT = [f"{key}-value" for key in KEYS]


def interrupted(loom: Loom, steps: Steps) -> UUID:
    """Start ``steps`` on ``loom`` and "kill" it at its second decision; the execution's id."""
    steps.crash = True
    with pytest.raises(Crash):
        loom.run("steps")
    steps.crash = False
    return loom.executions()[-1].execution_id


def events(loom: Loom, execution_id: UUID) -> Counter[str]:
    return Counter(type(event).__name__ for event in loom.log.events(execution_id))


def age(loom: Loom, worker: str, seconds: float) -> None:
    """Move a worker's last beat ``seconds`` into the past, as if it had stopped beating."""
    with loom.log.engine.begin() as conn:
        conn.execute(
            update(workers_table)
            .where(workers_table.c.worker == worker)
            .values(beat_at=workers_table.c.beat_at - seconds)
        )


@pytest.fixture
def steps(loom: Loom, other: Loom) -> Steps:
    steps = Steps()
    steps.register(loom)
    steps.register(other)
    return steps


# -- liveness ---------------------------------------------------------------------------------


def test_a_worker_that_beat_within_dead_after_is_alive(loom: Loom) -> None:
    """A fresh beat is alive (by the database's clock), even a minute's skew away from dead."""
    loom.workers.beat("w1")
    age(loom, "w1", 50)
    (row,) = loom.workers.workers(dead_after=60)
    assert (row.worker, row.alive) == ("w1", True)


def test_a_worker_whose_last_beat_is_older_than_dead_after_is_dead(loom: Loom) -> None:
    """A stale beat is dead; beating again makes it alive."""
    loom.workers.beat("w1")
    age(loom, "w1", 70)
    assert [row.alive for row in loom.workers.workers(dead_after=60)] == [False]
    loom.workers.beat("w1")
    assert [row.alive for row in loom.workers.workers(dead_after=60)] == [True]


def test_a_stopped_worker_is_dead_at_once(loom: Loom) -> None:
    loom.workers.beat("w1")
    loom.workers.stop("w1")
    assert [row.alive for row in loom.workers.workers(dead_after=3600)] == [False]


def test_the_registry_is_created_once_by_any_number_of_openers(loom: Loom, other: Loom) -> None:
    """Creating the table is idempotent: a second registry on the database keeps the rows."""
    loom.workers.beat("w1")
    WorkerRegistry(other.log.engine)
    assert [row.worker for row in other.workers.workers(dead_after=60)] == ["w1"]


def test_reading_who_is_alive_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """Every worker's recovery pass reads the registry; on SQLite that read is a deferred
    transaction, not ``BEGIN IMMEDIATE``, so it neither queues behind an append nor holds
    one up. Here a writer holds the lock past the read's whole lock timeout."""
    path = tmp_path / "loom.db"
    engine = LogSettings(f"sqlite:///{path}", lock_timeout=0.5).create_engine()
    registry = WorkerRegistry(engine)
    registry.beat("w1")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert [row.worker for row in registry.workers(dead_after=60)] == ["w1"]
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        engine.dispose()


def test_a_worker_beats_while_it_runs(loom: Loom) -> None:
    """The heartbeat thread keeps the row fresh: aged past dead_after, it is alive again soon."""
    with loom.worker(heartbeat=0.05, recover_every=None, dead_after=60) as worker:
        age(loom, worker, 120)
        deadline = time.monotonic() + 10
        while not loom.workers.workers(dead_after=60)[0].alive:
            assert time.monotonic() < deadline, "the heartbeat never beat again"
            time.sleep(0.02)


# -- ownership ----------------------------------------------------------------------------------


def test_an_execution_started_by_a_worker_is_owned_by_it(loom: Loom, steps: Steps) -> None:
    with loom.worker(recover_every=None) as worker:
        run = loom.run("steps")
    assert loom.execution(run.execution_id).owner == worker


def test_outside_a_worker_the_created_event_stores_the_bytes_it_always_did(
    loom: Loom, steps: Steps
) -> None:
    """No owner: the optional field is left out of the stored JSON, so old rows and new rows
    of plain runs are the same bytes."""
    run = loom.run("steps")
    created = loom.log.rows(run.execution_id)[0]
    assert b'"worker"' not in created.state
    assert loom.execution(run.execution_id).owner is None


# -- recovery -----------------------------------------------------------------------------------


def test_a_dead_workers_execution_is_recovered_without_recomputing_its_decisions(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    with loom.worker(recover_every=None) as worker:
        execution_id = interrupted(loom, steps)
        assert other.recover() == []  # its owner is alive: left alone
    # leaving the block stopped the worker: dead at once
    (run,) = other.recover()
    assert (run.execution_id, run.output) == (execution_id, OUTPUT)
    assert steps.calls == Counter(first=1, second=2, third=1)
    assert events(other, execution_id)["Resumed"] == 1
    assert other.execution(execution_id).owner != worker


def test_an_owner_that_stopped_beating_is_dead_after_dead_after(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    with loom.worker(recover_every=None) as worker:
        execution_id = interrupted(loom, steps)
        loom.workers.stop(worker)
        loom.workers.beat(worker)  # alive again: a live owner's execution is not taken
        assert other.recover(dead_after=60) == []
        age(loom, worker, 120)
        loom._heartbeat.stop()  # type: ignore[union-attr]  # it stops beating
        age(loom, worker, 120)
        assert [run.execution_id for run in other.recover(dead_after=60)] == [execution_id]


def test_two_recoverers_racing_for_one_execution_resume_it_once(
    loom: Loom,
    db_url: str,
    steps: Steps,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both load the dead worker's execution at the same version before either claims it:
    exactly one claim is appended, the loser skips it silently, it completes once."""
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
    both_loaded = threading.Barrier(2, timeout=30)
    claim = Loom._claim

    def claim_together(self: Loom, *args: Any, **kwargs: Any) -> Any:
        both_loaded.wait()
        return claim(self, *args, **kwargs)

    monkeypatch.setattr(Loom, "_claim", claim_together)
    results: list[list[Any]] = []

    def recover() -> None:
        with Loom(db_url) as recoverer:
            steps.register(recoverer)
            results.append(recoverer.recover())

    threads = [threading.Thread(target=recover) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(len(runs) for runs in results) == [0, 1]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    counted = events(loom, execution_id)
    assert (counted["Resumed"], counted["Completed"]) == (1, 1)
    assert steps.calls == Counter(first=1, second=2, third=1)


def test_an_execution_claimed_since_the_scan_is_left_to_its_new_owner(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    """Found with a dead owner, then claimed by a live worker before this one claims: left."""
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
    scan = other.execution
    taken = loom.execution(execution_id)

    def claimed_meanwhile(execution_id: Any) -> Any:
        taken.claim(worker="live-worker")
        save(loom.log, taken)
        return scan(execution_id)

    other.execution = claimed_meanwhile  # type: ignore[method-assign]
    assert other.recover() == []
    assert events(loom, execution_id)["Resumed"] == 1


@pytest.mark.parametrize("flow", ["steps", "tolerant"])
def test_a_stale_worker_whose_append_fails_after_a_takeover_appends_nothing_more(
    loom: Loom, other: Loom, steps: Steps, monkeypatch: pytest.MonkeyPatch, flow: str
) -> None:
    """A worker taken for dead (paused past dead_after) wakes after its execution was
    claimed, and its next append fails with the database rather than a version conflict (a
    dropped connection). Reloading after that failure must not hand it the claimer's state to
    carry on from: it appends nothing more (no failure recorded under the new owner, and a
    flow that swallows the error records no decision or output), and the execution completes
    once, by its owner."""
    for instance in (loom, other):

        @instance.flow("tolerant")
        def tolerant(ctx: FlowContext) -> list[str]:
            values = []
            for key in KEYS:
                try:
                    values.append(ctx.decide(key, lambda key=key: steps.compute(key)))
                except Exception:
                    values.append("fallback")
            return values

    append = loom.log.save
    claimed: list[UUID] = []

    def dropped(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(loom.log, "save", append)
        raise ConnectionError("server closed the connection unexpectedly")

    def compute(key: str) -> str:
        if key == "second" and not claimed:  # paused here while another worker claimed it
            (running,) = [e for e in loom.executions() if e.status == "running"]
            taken = other.execution(running.execution_id)
            taken.claim(worker="recoverer")
            save(other.log, taken)
            claimed.append(running.execution_id)
            monkeypatch.setattr(loom.log, "save", dropped)
        return f"{key}-value"

    steps.compute = compute  # type: ignore[method-assign]
    with loom.worker(recover_every=None), pytest.raises(LoomError):
        loom.run(flow)
    (execution_id,) = claimed
    assert events(loom, execution_id) == Counter(Created=1, DecisionRecorded=1, Resumed=1)
    assert other.resume(execution_id).output == OUTPUT
    assert events(loom, execution_id)["Completed"] == 1


def test_an_execution_without_an_owner_is_recovered_only_when_asked(
    loom: Loom, other: Loom, steps: Steps, caplog: pytest.LogCaptureFixture
) -> None:
    """Started outside a worker (as every execution before workers existed): its process may
    be running it right now, so it is not taken unless the caller says it is safe. The log
    says who left it in words (it said "recovered from worker None")."""
    execution_id = interrupted(loom, steps)
    assert other.recover() == []
    assert events(other, execution_id)["Resumed"] == 0
    with caplog.at_level(logging.INFO, logger="loom.runtime"):
        (run,) = other.recover(include_unowned=True)
    assert (run.execution_id, run.output) == (execution_id, OUTPUT)
    assert f"{execution_id} of flow 'steps' recovered from a process outside any worker" in (
        caplog.text
    )
    assert "None" not in caplog.text


def test_failed_finished_and_unregistered_flows_are_not_recovered(
    loom: Loom, db_url: str, steps: Steps
) -> None:
    @loom.flow("broken")
    def broken(ctx: FlowContext) -> None:
        raise ValueError("bug")

    with loom.worker(recover_every=None):
        with pytest.raises(ValueError):
            loom.run("broken")
        loom.run("steps")
        interrupted(loom, steps)
    with Loom(db_url) as stranger:  # has no flows registered
        assert stranger.recover() == []
    before = loom.log.position
    with Loom(db_url) as stranger:
        steps.register(stranger)
        assert len(stranger.recover()) == 1  # only the interrupted one
    assert loom.log.position > before


def test_a_recovered_flow_that_raises_is_recorded_failed_and_the_pass_goes_on(
    loom: Loom, other: Loom, steps: Steps
) -> None:
    with loom.worker(recover_every=None):
        first = interrupted(loom, steps)
        second = interrupted(loom, steps)
    calls = 0

    def compute(key: str) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("still down")
        return f"{key}-value"

    steps.compute = compute  # type: ignore[method-assign]
    runs = other.recover()
    assert [run.execution_id for run in runs] == [second]
    assert other.execution(first).error is not None


def test_dead_workers_that_own_nothing_are_forgotten(loom: Loom, other: Loom, steps: Steps) -> None:
    """The registry does not grow with every worker that ever ran; a dead owner of an
    unfinished execution stays until it is recovered."""
    loom.workers.beat("idle")
    loom.workers.stop("idle")
    with loom.worker(recover_every=None) as owner:
        interrupted(loom, steps)
    other.flows = type(other.flows)()  # cannot run "steps": the execution stays unfinished
    other.recover()
    registered = {row.worker for row in other.workers.workers(dead_after=60)}
    assert "idle" not in registered and owner in registered


def test_a_worker_that_beats_again_after_the_registry_was_read_is_not_forgotten(
    loom: Loom, other: Loom
) -> None:
    """A worker paused past dead_after (owning nothing) wakes and beats between a recovery
    pass's read of the registry and its clean-up: its fresh row stays, so what it starts next
    is owned by a registered live worker, never mistaken for unowned and taken."""
    loom.workers.beat("sleeper")
    age(loom, "sleeper", 120)
    read = other.workers.workers

    def woke_meanwhile(*, dead_after: float) -> Any:
        rows = read(dead_after=dead_after)
        loom.workers.beat("sleeper")
        return rows

    other.workers.workers = woke_meanwhile  # type: ignore[method-assign]
    other.recover()
    alive = {row.worker: row.alive for row in loom.workers.workers(dead_after=30)}
    assert alive.get("sleeper") is True


def test_a_worker_that_starts_and_dies_after_the_scan_is_not_forgotten(
    loom: Loom, other: Loom, steps: Steps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a pass's scan of the log and its read of the registry, a worker starts an
    execution and dies (its block left by Ctrl-C: stopped, dead at once). The pass saw no
    execution of it, found it dead, and deleted its row: from then on its execution had an
    owner nobody registered, "unowned", and no later pass took it. Only a worker already dead
    before the scan (which cannot have started anything since) is forgotten."""
    import loom_runtime.recovery as recovery

    scan = recovery.unfinished

    def started_meanwhile(log: Any) -> Any:
        pending = scan(log)
        with loom.worker(recover_every=None):
            interrupted(loom, steps)  # its worker block is left: the worker is stopped
        return pending

    monkeypatch.setattr(recovery, "unfinished", started_meanwhile)
    assert other.recover() == []  # the owner was alive when the scan ran: not this pass's
    monkeypatch.setattr(recovery, "unfinished", scan)
    [run] = other.recover()
    assert run.output == OUTPUT


def test_an_execution_erased_while_unfinished_is_not_pending_and_frees_its_owner(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention erases executions still unfinished (ADR 0053): nothing is left to finish one
    with, so no pass loads it again, and its dead owner's row is forgotten like any other
    (the registry does not keep a row per erased crash, forever)."""
    key = MasterKey(b"k" * 32)
    with Loom(db_url, encryption=key) as loom, Loom(db_url, encryption=key) as other:
        steps = Steps()
        steps.register(loom)
        steps.register(other)
        with loom.worker(recover_every=None) as owner:
            execution_id = interrupted(loom, steps)
        loom.erase(execution=execution_id, reason="retention", by="dpo")
        assert unfinished(other.log) == []
        with caplog.at_level(logging.INFO, logger="loom.runtime"):
            assert other.recover() == []
        assert "was erased" not in caplog.text
        assert owner not in {row.worker for row in other.workers.workers(dead_after=60)}


def test_a_worker_recovers_in_the_background(loom: Loom, other: Loom, steps: Steps) -> None:
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
    with other.worker(heartbeat=0.05, recover_every=0.05, dead_after=5):
        deadline = time.monotonic() + 30
        while other.execution(execution_id).output is None:
            assert time.monotonic() < deadline, "the worker never recovered the execution"
            time.sleep(0.05)
    assert events(other, execution_id)["Completed"] == 1


def test_worker_settings_that_would_kill_live_workers_are_refused(loom: Loom) -> None:
    with (
        pytest.raises(ConfigurationError, match="shorter than"),
        loom.worker(heartbeat=30, dead_after=30),
    ):
        pass
    with (
        loom.worker(recover_every=None),
        pytest.raises(ConfigurationError, match="already worker"),
        loom.worker(recover_every=None),
    ):
        pass


@pytest.mark.parametrize(
    ("heartbeat", "dead_after", "said"),
    [(0.5, 0.5000001, "twice"), (10.0, 19.9, "twice"), (5.0, float("inf"), "finite")],
)
def test_a_dead_after_without_margin_or_without_end_is_refused(
    loom: Loom, heartbeat: float, dead_after: float, said: str
) -> None:
    """A ``dead_after`` a hair above the heartbeat passed: one late beat (a slow commit, a
    paused process) and a live worker was taken over, its open decision computed twice (seen
    on PostgreSQL). An infinite one passed too, and a worker that then died was never
    recovered, by anyone. It must be finite and at least twice the heartbeat."""
    with (
        pytest.raises(ConfigurationError, match=said),
        loom.worker(heartbeat=heartbeat, dead_after=dead_after),
    ):
        pass
    assert loom.workers.workers(dead_after=60) == []
    with loom.worker(heartbeat=heartbeat, dead_after=2 * heartbeat, recover_every=None):
        pass  # the control: twice is enough


def test_a_recovery_that_takes_nobody_for_dead_is_refused(loom: Loom) -> None:
    """``recover(dead_after=inf)`` judged no worker dead, ever: "0 recovered" with nothing
    said, however long ago a worker stopped."""
    with pytest.raises(ConfigurationError, match="finite"):
        loom.recover(dead_after=float("inf"))


@pytest.mark.parametrize("dead_after", [0.0, -30.0, float("nan")])
def test_a_dead_after_that_would_take_live_workers_for_dead_is_refused(
    loom: Loom, other: Loom, steps: Steps, dead_after: float
) -> None:
    """``recover(dead_after=...)`` of zero, less, or NaN judged every worker dead (no beat is
    newer than now, none compares with NaN) and took a live worker's execution over; it is a
    typed error and nothing is claimed, as ``worker()`` refuses such settings."""
    with loom.worker(recover_every=None):
        execution_id = interrupted(loom, steps)
        with (
            other.worker(recover_every=None),
            pytest.raises(ConfigurationError, match="dead_after"),
        ):
            other.recover(dead_after=dead_after)
        with pytest.raises(ConfigurationError, match="dead_after"):
            other.recover(dead_after=dead_after)
        assert events(other, execution_id)["Resumed"] == 0


@pytest.mark.parametrize("recover_every", [0.0, -1.0, float("nan")])
def test_a_recovery_interval_that_is_not_positive_is_refused(
    loom: Loom, recover_every: float
) -> None:
    """Zero or less would recover in a busy loop against the database, NaN would end the
    recovery thread at its first wait: refused before anything starts."""
    with (
        pytest.raises(ConfigurationError, match="recover_every"),
        loom.worker(recover_every=recover_every),
    ):
        pass
    assert loom.workers.workers(dead_after=60) == []


# -- the command line -----------------------------------------------------------------------------

FLOWS_MODULE = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("steps")
def steps(ctx) -> list[str]:
    return [ctx.decide(key, lambda key=key: f"{key}-value") for key in ("first", "second", "third")]
"""


def _a_dead_workers_execution(
    url: str, folder: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str
) -> UUID:
    """An execution of ``steps`` interrupted under a worker that is gone, and the flows module
    ``module`` (``source``) that `loom recover --flows` loads to finish it."""
    (folder / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(folder))
    with Loom(url) as loom:
        steps = Steps()
        steps.register(loom)
        with loom.worker(recover_every=None):
            return interrupted(loom, steps)


def test_loom_recover_resumes_a_dead_workers_execution_and_says_so(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loom recover` prints what it resumed (--json: the runs); a second pass finds nothing."""
    execution_id = _a_dead_workers_execution(
        sqlite_url, tmp_path, monkeypatch, "recovery_flows", FLOWS_MODULE
    )
    args = ["recover", "--db", sqlite_url, "--flows", "recovery_flows:flows"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)
    assert (run["execution_id"], run["output"]) == (str(execution_id), OUTPUT)
    result = CliRunner().invoke(app, args)
    assert (result.exit_code, result.stdout) == (0, "0 execution(s) recovered\n")


def test_loom_recover_json_is_json_when_the_recovered_flow_prints(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the flow a pass resumes prints goes to stderr: it had come before the runs'
    JSON on stdout, so `loom recover --json` printed a document no reader could parse."""
    speaking = "    print('resumed, and speaking')\n    return ["
    chatty = FLOWS_MODULE.replace("    return [", speaking)
    execution_id = _a_dead_workers_execution(
        sqlite_url, tmp_path, monkeypatch, "recovery_chatty_flows", chatty
    )
    args = ["recover", "--db", sqlite_url, "--flows", "recovery_chatty_flows:flows", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)
    assert (run["execution_id"], run["output"]) == (str(execution_id), OUTPUT)
    assert "resumed, and speaking" in result.stderr


def test_loom_recover_and_worker_without_flows_refuse_and_a_pass_says_what_it_left(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --flows (or LOOM_FLOWS) nothing could be finished: `loom recover` said "0
    execution(s) recovered" (exit 0) and `loom worker` ran. And a pass that leaves an
    execution started outside a worker says so, with the flag that takes it, on stderr."""
    (tmp_path / "recovery_flows.py").write_text(FLOWS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOOM_FLOWS", raising=False)
    with Loom(sqlite_url) as loom:
        steps = Steps()
        steps.register(loom)
        execution_id = interrupted(loom, steps)  # started outside a worker: unowned
    for args in (["recover"], ["worker", "--stop-after", "0"]):
        _one_line_error(CliRunner().invoke(app, [*args, "--db", sqlite_url]), 2, "--flows")
    flows = ["--db", sqlite_url, "--flows", "recovery_flows:flows"]
    result = CliRunner().invoke(app, ["recover", *flows])
    assert (result.exit_code, result.stdout) == (0, "0 execution(s) recovered\n")
    assert result.stderr == (
        "note: 1 unfinished execution(s) started outside a worker were left: "
        "--include-unowned takes them when no process can still be running them\n"
    )
    result = CliRunner().invoke(app, ["recover", "--include-unowned", *flows])
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    assert str(execution_id) in result.stdout


def _sealed_and_interrupted(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> UUID:
    """An encrypted log holding a dead worker's interrupted execution; the CLI can import
    ``recovery_flows:flows``, and ``$LOOM_MASTER_KEY`` holds the log's key."""
    (tmp_path / "recovery_flows.py").write_text(FLOWS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        steps = Steps()
        steps.register(loom)
        with loom.worker(recover_every=None):
            return interrupted(loom, steps)


def _one_line_error(result: Any, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert all(word in result.stderr for word in words), result.stderr


def test_loom_resume_and_recover_without_the_master_key_say_so_on_one_line(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sealed execution cannot be read without the key: a usage error (exit 2) naming
    $LOOM_MASTER_KEY, not a traceback; nothing is claimed."""
    execution_id = _sealed_and_interrupted(sqlite_url, tmp_path, monkeypatch)
    monkeypatch.delenv("LOOM_MASTER_KEY")
    flows = ["--db", sqlite_url, "--flows", "recovery_flows:flows"]
    runner = CliRunner()
    _one_line_error(runner.invoke(app, ["resume", str(execution_id), *flows]), 2, "LOOM_MASTER_KEY")
    _one_line_error(runner.invoke(app, ["recover", *flows]), 2, "LOOM_MASTER_KEY")
    with Loom(sqlite_url) as loom:
        assert events(loom, execution_id)["Resumed"] == 0


def test_recover_without_the_master_key_refuses_with_nothing_to_recover(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recovery pass on an encrypted log without its key said "0 execution(s) recovered",
    exit 0, whenever nothing was unfinished yet (a docs review): a nightly pass whose key had
    gone missing reported success until the first crash needed it. Refused at once, as a
    worker is: typed (the API), one line and exit 2 (the CLI)."""
    (tmp_path / "recovery_flows.py").write_text(FLOWS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(sqlite_url, encryption=MasterKey.from_env()) as loom:
        Steps().register(loom)
        loom.run("steps")  # finished: nothing is left to recover
    monkeypatch.delenv("LOOM_MASTER_KEY")
    with Loom(sqlite_url) as loom, pytest.raises(EncryptionOffError, match=r"\$LOOM_MASTER_KEY"):
        loom.recover()
    command = ["recover", "--db", sqlite_url, "--flows", "recovery_flows:flows"]
    _one_line_error(CliRunner().invoke(app, command), 2, "LOOM_MASTER_KEY", "recover")


def test_a_worker_without_the_master_key_refuses_to_start_on_an_encrypted_log(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker on an encrypted log without its master key could neither read what it would
    recover nor store sealed what it starts: refused at once, typed (the API) or on one line
    with exit 2 naming $LOOM_MASTER_KEY (the CLI), no worker registered and nothing claimed.
    Before, it ran, and each recovery pass logged a traceback; the command exited 0."""
    execution_id = _sealed_and_interrupted(sqlite_url, tmp_path, monkeypatch)
    monkeypatch.delenv("LOOM_MASTER_KEY")
    with Loom(sqlite_url) as loom:
        registered = loom.workers.workers(dead_after=60)
        with (
            pytest.raises(EncryptionOffError, match=r"\$LOOM_MASTER_KEY"),
            loom.worker(recover_every=0.01),
        ):
            pytest.fail("the worker started")
        assert loom.worker_id is None
        command = ["worker", "--recover-every", "0.05", "--stop-after", "0.5"]
        command += ["--db", sqlite_url, "--flows", "recovery_flows:flows"]
        _one_line_error(CliRunner().invoke(app, command), 2, "LOOM_MASTER_KEY", "worker")
        assert loom.workers.workers(dead_after=60) == registered
        assert events(loom, execution_id)["Resumed"] == 0


def test_loom_resume_of_an_erased_execution_names_the_forget_event_on_one_line(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Erased while unfinished: nothing is left to finish it with; exit 1, as its replay."""
    execution_id = _sealed_and_interrupted(sqlite_url, tmp_path, monkeypatch)
    with Loom(sqlite_url, encryption=MasterKey.from_env()) as loom:
        loom.erase(execution=execution_id, reason="request", by="dpo")
    flows = ["--db", sqlite_url, "--flows", "recovery_flows:flows"]
    result = CliRunner().invoke(app, ["resume", str(execution_id), *flows])
    _one_line_error(result, 1, "erased", "forget event")


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "clear"])
def test_a_failed_recovery_of_a_sealed_execution_logs_no_message(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, sealed: bool
) -> None:
    """The log seals a failure's message so that an erasure destroys it; a log handler (or
    Python's last resort, which prints WARNING with nothing configured) is out of its reach.
    So a sealed execution's failed recovery logs the error's type, never its message or its
    traceback (whose lines repeat the code that built the message). In clear, the control,
    the traceback stays for whoever debugs the flow."""
    key = MasterKey(bytes(range(32))) if sealed else None
    state = {"crash": True}

    def register(loom: Loom) -> None:
        @loom.flow("intake")
        def intake(ctx: FlowContext, patient: str) -> str:
            ctx.decide("first", lambda: 1)
            if state["crash"]:
                raise Crash
            raise ValueError(f"no bed for {patient}")

    with Loom(sqlite_url, encryption=key) as loom:
        register(loom)
        with loom.worker(recover_every=None), pytest.raises(Crash):
            loom.run("intake", patient="alice@example.com")
    state["crash"] = False
    with Loom(sqlite_url, encryption=key) as other, caplog.at_level(logging.DEBUG):
        register(other)
        assert other.recover() == []
        (execution,) = other.executions()
        assert "alice@example.com" in str(other.execution(execution.execution_id).error)
    logged = "\n".join(caplog.text.splitlines())
    assert "ValueError" in logged
    assert ("alice@example.com" in logged) is not sealed
    assert ("Traceback" in logged) is not sealed


def _recovered_by_cli(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, owner: str, error: str
) -> Result:
    """``loom recover`` of an execution left by worker ``owner``, whose flow now raises a
    ``RuntimeError`` with the Python literal ``error``: what the command printed."""
    with Loom(sqlite_url) as loom, monkeypatch.context() as patched:
        patched.setattr("loom_runtime.workers.new_worker_id", lambda: owner)
        steps = Steps()
        steps.register(loom)
        with loom.worker(recover_every=None):
            interrupted(loom, steps)
    (tmp_path / "failing_flows.py").write_text(
        "from loom_runtime import FlowRegistry\n"
        "flows = FlowRegistry()\n"
        "@flows.flow('steps')\n"
        "def steps(ctx):\n"
        f"    raise RuntimeError({error})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(
        app, ["recover", "--db", sqlite_url, "--flows", "failing_flows:flows"]
    )
    assert result.exit_code == 0, result.output
    return result


def test_what_a_recovery_logs_on_stderr_is_inert(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner's id and a flow's error message come from the log (an imported bundle writes
    any owner it likes): on stderr their terminal escapes are shown as <U+XXXX>, never sent."""
    hostile = "evil\x1b]0;owned\x07\x1b[2J"
    result = _recovered_by_cli(
        sqlite_url, tmp_path, monkeypatch, owner=hostile, error="'still down \\x1b[31m'"
    )
    assert "recovered from worker evil<U+001B>]0;owned<U+0007>" in result.stderr
    assert "still down <U+001B>[31m" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


def test_an_owner_with_a_line_break_forges_no_log_line(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log line's message is one line: an owner's id with a line break (an imported
    bundle writes any owner it likes) printed a log line of its own on stderr."""
    owner = "evil\nERROR: forged"
    result = _recovered_by_cli(sqlite_url, tmp_path, monkeypatch, owner=owner, error="'down'")
    assert "recovered from worker evil<U+000A>ERROR: forged" in result.stderr
    assert not any(line.startswith("ERROR: forged") for line in result.stderr.splitlines())
    assert "Traceback" in result.stderr  # the failure's traceback keeps its lines


def test_what_a_recovery_logs_on_stderr_is_prefixed_as_every_cli_note(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line's own notes say ``error:`` and ``warning:`` (ADR 0008); the
    runtime's log lines that `loom recover` and `loom worker` show said ``WARNING:``, in
    logging's capitals (a docs review)."""
    result = _recovered_by_cli(sqlite_url, tmp_path, monkeypatch, owner="w-1", error="'down'")
    lines = result.stderr.splitlines()
    assert any(line.startswith("warning: execution ") for line in lines), result.stderr
    assert not any(line.startswith(("WARNING", "ERROR", "INFO")) for line in lines), lines


def test_a_workers_info_line_is_a_note_as_the_cli_names_its_own() -> None:
    """`loom worker` shows what it recovered at logging's INFO, which printed as ``info:``
    where the command line's own such lines say ``note:`` (a regression review)."""
    from loom_runtime.tools.worker_cli import _InertFormatter

    formatter = _InertFormatter("%(levelname)s: %(message)s")
    shown = [
        formatter.format(logging.makeLogRecord({"levelno": level, "levelname": name, "msg": "m"}))
        for level, name in ((logging.INFO, "INFO"), (logging.CRITICAL, "CRITICAL"))
    ]
    assert shown == ["note: m", "error: m"]


@pytest.mark.slow
def test_loom_worker_recovers_until_sigterm_then_stops_cleanly(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A real `loom worker` process finishes a dead worker's execution; SIGTERM stops it with
    exit 0, and its row says stopped (dead at once, whatever dead_after)."""
    (tmp_path / "recovery_flows.py").write_text(FLOWS_MODULE)
    with Loom(sqlite_url) as loom:
        steps = Steps()
        steps.register(loom)
        with loom.worker(recover_every=None):
            execution_id = interrupted(loom, steps)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
        env["PYTHONPATH"] = str(tmp_path)
        command = ["worker", "--heartbeat", "0.1", "--recover-every", "0.1", "--dead-after", "5"]
        command += ["--db", sqlite_url, "--flows", "recovery_flows:flows"]
        child = subprocess.Popen(
            [sys.executable, "-m", "loom_runtime", *command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while loom.execution(execution_id).output is None:
                assert child.poll() is None, child.communicate()
                assert time.monotonic() < deadline, "the worker never recovered the execution"
                time.sleep(0.05)
            child.send_signal(signal.SIGTERM)
            stdout, stderr = child.communicate(timeout=60)
        finally:
            child.kill()
        assert child.returncode == 0, stderr
        assert stdout.splitlines()[-1].endswith(" stopped"), stdout
        assert f"execution {execution_id} of flow 'steps' recovered" in stderr
        rows = {row.worker: row.alive for row in loom.workers.workers(dead_after=3600)}
        assert rows[stdout.split()[1]] is False


def test_a_corrupt_execution_is_skipped_with_an_error_and_the_pass_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An execution that no longer reads (a row altered: ``LogCorruptError``) cannot be
    finished by anyone; it is logged and left for ``loom verify``, and the executions after it
    in the pass are still recovered."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    steps = Steps()
    with Loom(url) as loom:
        steps.register(loom)
        corrupt = interrupted(loom, steps)
        healthy = interrupted(loom, steps)
    with sqlite3.connect(tmp_path / "loom.db") as connection:
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND topic = ?",
            (b'{"key": 7}', corrupt.hex, "loom.execution.DecisionRecorded"),
        )
    with Loom(url) as other, caplog.at_level(logging.ERROR, logger="loom.runtime"):
        steps.register(other)
        runs = other.recover(include_unowned=True)
    assert [run.execution_id for run in runs] == [healthy]
    assert any(str(corrupt) in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("heartbeat", "recover_every", "dead_after"),
    [(1e308, 60.0, float("inf")), (1.0, 1e12, 30.0), (1.0, float("inf"), 30.0)],
)
def test_intervals_past_the_longest_wait_are_refused(
    loom: Loom, heartbeat: float, recover_every: float, dead_after: float
) -> None:
    """An interval past ``threading.TIMEOUT_MAX`` killed the heartbeat or recovery thread at
    its first wait (``OverflowError``), leaving a worker that neither beats nor recovers."""
    with (
        pytest.raises(ConfigurationError, match="longest wait"),
        loom.worker(heartbeat=heartbeat, recover_every=recover_every, dead_after=dead_after),
    ):
        pass
    assert loom.workers.workers(dead_after=60) == []


@pytest.mark.parametrize(
    "flag", [["--stop-after", "inf"], ["--stop-after", "1e10"], ["--recover-every", "inf"]]
)
def test_loom_worker_refuses_an_interval_past_the_longest_wait_on_one_line(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: list[str]
) -> None:
    """``--stop-after inf`` printed an ``OverflowError`` traceback (exit 1); ``--recover-every
    inf`` printed one from the recovery thread and exited 0."""
    (tmp_path / "recovery_flows.py").write_text(FLOWS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["worker", *flag, "--db", sqlite_url, "--flows", "recovery_flows:flows"]
    _one_line_error(CliRunner().invoke(app, args), 2, flag[0], "longest wait")


def test_two_threads_entering_worker_at_once_are_not_both_workers(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check that this Loom is not a worker yet and the assignment that makes it one had
    the first beat's database write between them: two threads entering at once were both
    accepted, and once one left, the other's block was no worker (its runs unowned)."""
    import threading
    import time

    from loom_runtime.workers import Heartbeat

    first_beat = Heartbeat.start

    def slow_start(self: Heartbeat) -> None:
        time.sleep(0.2)  # the first beat's write, slowed: both threads are inside it
        first_beat(self)

    monkeypatch.setattr(Heartbeat, "start", slow_start)
    barrier, outcomes = threading.Barrier(2), []

    def enter() -> None:
        barrier.wait()
        try:
            with loom.worker(recover_every=None) as worker_id:
                outcomes.append(worker_id)
                time.sleep(0.3)
        except ConfigurationError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=enter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(type(o).__name__ for o in outcomes) == ["ConfigurationError", "str"]


def test_a_sub_agent_started_by_a_one_off_recovery_is_owned_by_its_worker(
    loom: Loom, other: Loom
) -> None:
    """A one-off ``recover()`` (``loom recover``) registers a worker for its pass and claims
    with it, but the Loom was no worker meanwhile: a sub-agent its recovered flow started
    (``loom.run`` inside a decision) was stored unowned, and had the pass died mid-child, no
    later pass would take it (unowned runs are left to ``--include-unowned``)."""
    crash = {"on": True}

    for instance in (loom, other):

        @instance.flow("child")
        def child(ctx: FlowContext) -> str:
            return str(ctx.decide("work", lambda: "done"))

        @instance.flow("parent")
        def parent(ctx: FlowContext, instance: Loom = instance) -> str:
            def research() -> str:
                if crash["on"]:
                    raise Crash  # the first worker dies before its sub-agent starts
                return str(instance.run("child").output)

            return str(ctx.decide("research", research))

    with loom.worker(recover_every=None, dead_after=1.0, heartbeat=0.2), pytest.raises(Crash):
        loom.run("parent")
    crash["on"] = False
    [run] = other.recover(dead_after=1.0)
    assert run.output == "done"
    [child_summary] = [e for e in other.executions() if e.flow == "child"]
    owner = other.execution(child_summary.execution_id).owner
    claimed_by = other.execution(run.execution_id).owner
    assert owner is not None and owner == claimed_by


def test_a_fresh_sealed_loom_can_become_a_worker_first_thing(sqlite_url: str) -> None:
    """``worker()`` asked whether the keyring was open, which it is only once the log is: a
    Loom opened with its master key whose first call was ``worker()`` was told it had none."""
    key = MasterKey(bytes(range(32)))
    with Loom(sqlite_url, encryption=key) as loom:
        loom.flow("one")(lambda ctx: ctx.decide("a", lambda: 1))
        loom.run("one")  # the log is encrypted now
    with Loom(sqlite_url, encryption=key) as fresh, fresh.worker(recover_every=None) as worker:
        assert worker == fresh.worker_id


def test_a_one_off_recovery_pass_owns_nothing_another_thread_starts(
    loom: Loom, steps: Steps
) -> None:
    """The pass's worker owns what the pass starts, not the Loom: made the Loom's worker for
    the pass, another thread's ``worker()`` block was refused meanwhile, and a run another
    thread started during the pass was owned by a worker that stopped beating when the pass
    ended, then taken over while it still ran."""
    entered, release = threading.Event(), threading.Event()

    @loom.flow("slow")
    def slow(ctx: FlowContext) -> str:
        def wait() -> str:
            entered.set()
            assert release.wait(20)
            return "done"

        return str(ctx.decide("wait", wait))

    execution_id = interrupted(loom, steps)  # something for the pass to recover
    seen: dict[str, object] = {}
    original = steps.compute

    def during_the_pass(key: str) -> str:
        if key == "second" and "owner" not in seen:
            runner = threading.Thread(target=lambda: seen.setdefault("run", loom.run("slow")))
            runner.start()
            assert entered.wait(20)
            [summary] = [e for e in loom.executions() if e.flow == "slow"]
            seen["owner"] = loom.execution(summary.execution_id).owner
            try:
                with loom.worker(recover_every=None):
                    seen["worker"] = "accepted"
            except ConfigurationError as exc:
                seen["worker"] = exc
            release.set()
            runner.join(20)
        return original(key)

    steps.compute = during_the_pass  # type: ignore[method-assign]
    [run] = loom.recover(include_unowned=True)
    assert run.execution_id == execution_id
    assert seen["owner"] is None  # started outside any worker, as before the pass
    assert seen["worker"] == "accepted"


class _Held:
    """A flow ``held`` whose second decision waits until released, or crashes."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.crash = False
        self.calls: Counter[str] = Counter()

    def wait(self) -> str:
        self.calls["wait"] += 1
        if self.crash:
            raise Crash
        self.entered.set()
        assert self.release.wait(30)
        return "waited"

    def register(self, loom: Loom) -> None:
        @loom.flow("held")
        def held(ctx: FlowContext) -> list[str]:
            return [ctx.decide("first", lambda: "first"), ctx.decide("wait", self.wait)]


def _crashed_held(loom: Loom, other: Loom) -> tuple[_Held, Any]:
    """``held`` registered on both Looms, run on ``loom`` and crashed in its second decision
    (left crashing); the flow and the execution's summary."""
    held = _Held()
    held.register(loom)
    held.register(other)
    held.crash = True
    with pytest.raises(Crash):
        loom.run("held")
    [summary] = loom.executions()
    return held, summary


def test_a_resume_runs_as_a_live_worker_so_a_second_resume_is_refused(
    loom: Loom, other: Loom
) -> None:
    """A resume outside a worker claimed the execution for ``host:pid``, an owner nobody can
    judge alive: a second ``loom resume`` from another shell took it over while the first
    still ran, and both computed its open decision (a side effect twice). A resume now runs
    as a registered worker for its duration: seen alive, so the second is refused with nothing
    written; stopped at its end."""
    held, summary = _crashed_held(loom, other)
    held.crash = False
    resumed: list[Any] = []
    thread = threading.Thread(target=lambda: resumed.append(loom.resume(summary.execution_id)))
    thread.start()
    try:
        assert held.entered.wait(30)
        owner = other.execution(summary.execution_id).owner
        live = {w.worker for w in other.workers.workers(dead_after=None) if w.alive}
        assert owner in live, (owner, live)
        version = other.execution(summary.execution_id).version
        with pytest.raises(ExecutionOwnedError):
            other.resume(summary.execution_id)
        assert other.execution(summary.execution_id).version == version  # nothing written
    finally:
        held.release.set()
        thread.join(30)
    assert resumed and resumed[0].output == ["first", "waited"]
    assert held.calls["wait"] == 2  # the crashed run's, and the one resume's
    rows = {w.worker for w in other.workers.workers(dead_after=None)}
    assert owner not in rows  # its row deleted once its execution completed (none piles up)


def test_a_resume_that_dies_leaves_its_execution_to_recovery(loom: Loom, other: Loom) -> None:
    """A resume interrupted mid-flow left its execution owned by ``host:pid``, which never
    registered: every recovery pass took it for "started outside a worker" and left it for
    good. Its owner is now the resume's worker, which stops beating when it ends, so the next
    pass recovers the execution without being asked to take unowned ones."""
    held, summary = _crashed_held(loom, other)
    with pytest.raises(Crash):
        loom.resume(summary.execution_id)  # dies in the same decision again
    held.crash = False
    held.release.set()
    runs = other.recover()
    assert [run.execution_id for run in runs] == [summary.execution_id]
    assert runs[0].output == ["first", "waited"]


def test_an_unreadable_ownership_event_is_skipped_and_the_pass_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The scan that finds unfinished executions decoded every ownership event unguarded: one
    altered row (here the end of an execution finished long ago) stopped every recovery pass,
    so no crashed execution was recovered again. That stream is logged and left out."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    steps = Steps()
    with Loom(url) as loom:
        steps.register(loom)
        finished = loom.run("steps").execution_id
        healthy = interrupted(loom, steps)
    with sqlite3.connect(tmp_path / "loom.db") as connection:
        edited = connection.execute(
            "UPDATE stored_events SET state = state || X'2C' WHERE originator_id = ? AND topic = ?",
            (finished.hex, "loom.execution.Completed"),
        )
        assert edited.rowcount == 1
    with Loom(url) as other, caplog.at_level(logging.ERROR, logger="loom.runtime"):
        steps.register(other)
        runs = other.recover(include_unowned=True)
    assert [run.execution_id for run in runs] == [healthy]
    assert any(str(finished) in record.getMessage() for record in caplog.records)


def test_recover_resume_and_worker_on_a_locked_log_say_busy_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process held SQLite's write lock past the lock timeout (a long import, a
    backup, a paused process), `loom run` said so in one line, but `recover`, `resume` and
    `worker` printed an 83-line SQLAlchemy traceback: their first reads (the key table's
    check, the worker table's) began write transactions. The reads no longer take the lock,
    and what must write says the log is busy, in one line."""
    (tmp_path / "recovery_flows.py").write_text(FLOWS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        steps = Steps()
        steps.register(loom)
        execution_id = interrupted(loom, steps)
        _ = loom.workers  # the worker table exists, as on any log a worker has used
    monkeypatch.setitem(Loom.__init__.__kwdefaults__, "lock_timeout", 0.2)
    flows = ["--db", url, "--flows", "recovery_flows:flows"]
    holder = sqlite3.connect(tmp_path / "loom.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for args in (
            ["recover", "--include-unowned"],
            ["resume", str(execution_id)],
            ["worker", "--stop-after", "0"],
        ):
            result = CliRunner().invoke(app, [*args, *flows])
            assert "Traceback" not in result.output, (args, result.output)
            assert result.exit_code == 1, (args, result.output)
            assert len(result.output.strip().splitlines()) == 1, (args, result.output)
            assert "locked" in result.output, (args, result.output)
    finally:
        holder.rollback()
        holder.close()
    result = CliRunner().invoke(app, ["resume", str(execution_id), *flows])  # the control
    assert result.exit_code == 0, result.output


def test_a_resume_whose_flow_fails_leaves_no_worker_row(loom: Loom) -> None:
    """A resume whose flow raised (the execution recorded failed, which recovery never takes)
    kept its worker's row, stopped, so retrying failures by hand still piled rows up (a
    second regression review). Only an interrupted resume keeps its row for recovery."""
    outcome: dict[str, BaseException] = {"now": Crash()}

    @loom.flow("flaky")
    def flaky(ctx: FlowContext) -> str:
        ctx.decide("first", lambda: "first")
        raise outcome["now"]

    with pytest.raises(Crash):
        loom.run("flaky")
    [summary] = loom.executions()
    outcome["now"] = ValueError("still broken")
    with pytest.raises(ValueError):
        loom.resume(summary.execution_id)
    assert loom.executions()[0].status == "failed"
    assert loom.workers.workers(dead_after=None) == []
