"""Workers and recovery's attack review (ADR 0040, amended 2026-12-06): five ways a live run
was taken over, a refused resume wrote a claim, or `loom recover` hid what it left, each
pinned here (on SQLite and PostgreSQL where a log is involved).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Literal
from uuid import UUID

import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowInputError, FlowNotFoundError, Loom, MasterKey
from loom_runtime.recovery import MAX_CLAIMS
from loom_runtime.tools.cli import app
from replay_tests.forked_children import exit_statuses, fork_children
from replay_tests.runtime.test_recovery import Crash, events, steps
from replay_tests.unchecked import register_unchecked

__all__ = ["steps"]  # a fixture, imported for the tests below

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def alive(loom: Loom, worker: str) -> bool:
    """Whether ``worker`` is alive by the registry, judged as a recoverer with 60 s would."""
    return {w.worker: w.alive for w in loom.workers.workers(dead_after=60)}[worker]


class Held:
    """A flow ``held`` of one decision whose first computation waits until released (a run in
    progress); any later computation of it (a takeover) returns at once, and is counted."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.calls: list[str] = []

    def register(self, loom: Loom) -> None:
        @loom.flow("held")
        def held(ctx: FlowContext) -> str:
            return ctx.decide("open", self.compute)

    def compute(self) -> str:
        self.calls.append(threading.current_thread().name)
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(20)
        return "done"

    def start(self, loom: Loom) -> tuple[threading.Thread, dict[str, object]]:
        """Run ``held`` on ``loom`` in a thread, and wait until it is inside its decision."""
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["output"] = loom.run("held").output
            except Exception as exc:  # a takeover: the run's next append is refused
                outcome["error"] = exc

        thread = threading.Thread(target=run, name="runner")
        thread.start()
        assert self.entered.wait(20)
        return thread, outcome


# -- 1. a process forked inside a worker --------------------------------------------------------


@needs_fork
def test_a_process_forked_inside_a_worker_is_not_that_worker(loom: Loom) -> None:
    """A child forked inside ``loom.worker()`` (a ``fork`` pool) ran under its parent's worker
    id, and its run was counted by nobody the parent could see: the parent's recovery took the
    child's live run as its own stranded one and computed its open decision again. The child
    is no worker (it may become one of its own), runs unowned, and counts afresh (the count's
    lock, held at the fork by another thread of the parent, is unheld in the child)."""
    parent = os.getpid()
    entered_r, entered_w = os.pipe()
    release_r, release_w = os.pipe()

    def compute() -> str:
        if os.getpid() != parent:  # the child's run: say so, and wait to be released
            os.write(entered_w, b"x")
            assert os.read(release_r, 1) == b"x"
        return "done"

    @loom.flow("forked")
    def forked(ctx: FlowContext) -> str:
        return ctx.decide("open", compute)

    def child(_: int) -> None:
        signal.alarm(20)  # a hang (a lock held for ever) fails the test instead of stalling it
        assert loom.worker_id is None
        run = loom.run("forked")
        assert loom.execution(run.execution_id).owner is None
        with loom.worker(recover_every=None) as own:  # a worker of its own, if it wants one
            assert own != worker

    try:
        with loom.worker(recover_every=None) as worker:
            with loom._running_lock:  # another thread counting a run at the moment of the fork
                pids = fork_children(1, child)
            os.close(entered_w)  # the child's copy alone: a child that dies reads as b""
            try:
                assert os.read(entered_r, 1) == b"x", "the child never reached its decision"
                assert loom.recover(dead_after=60) == []  # the child's live run is left alone
            finally:
                os.write(release_w, b"x")
                assert exit_statuses(pids) == [0]
            assert alive(loom, worker)  # the child's own worker stopped, not this one
    finally:
        for fd in (entered_r, release_r, release_w):
            os.close(fd)
    (summary,) = loom.executions()
    assert events(loom, summary.execution_id) == Counter(Created=1, DecisionRecorded=1, Completed=1)


@needs_fork
def test_a_child_that_leaves_the_worker_block_does_not_stop_its_parent(loom: Loom) -> None:
    """A forked child that runs on past the fork leaves the parent's ``with loom.worker()``
    block too: it marked the parent's worker stopped, and the parent's executions were taken
    over at once while the parent ran them."""
    parent = os.getpid()
    code = 1
    try:
        with loom.worker(recover_every=None) as worker:
            child = os.fork()
            if child:
                assert exit_statuses([child]) == [0]
                assert alive(loom, worker)
        code = 0
    finally:
        if os.getpid() != parent:  # the child, once it left the block
            os._exit(code)


# -- 2. a stored input the flow no longer fits -------------------------------------------------


GREET_V2 = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("greet")
def greet(ctx, name: int) -> str:
    return ctx.decide("hello", lambda: f"hello {name}")
"""


def _greet_interrupted(loom: Loom) -> UUID:
    """A worker's execution of ``greet(name: str)``, left unfinished by a crash."""

    @loom.flow("greet")
    def greet(ctx: FlowContext, name: str) -> str:
        ctx.decide("hello", lambda: f"hello {name}")
        raise Crash

    with loom.worker(recover_every=None), pytest.raises(Crash):
        loom.run("greet", name="ann")
    return loom.executions()[-1].execution_id


def test_an_input_the_flow_no_longer_fits_is_refused_before_anything_is_written(
    loom: Loom,
    other: Loom,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The flow was redeployed with another signature: every recovery pass appended a claim
    before the input was decoded, failed without recording anything, and after ``MAX_CLAIMS``
    passes set the execution aside as ``RecoveryLimitError`` (it had never run); ``resume``
    and ``loom resume`` appended a claim before refusing. Now nothing is written: ``resume``
    says so, and recovery leaves the execution (a worker still on the old code can finish it),
    saying why, every pass."""
    execution_id = _greet_interrupted(loom)

    @other.flow("greet")
    def greet(ctx: FlowContext, name: int) -> str:
        return ctx.decide("hello", lambda: f"hello {name}")

    head = other.log.position
    with pytest.raises(FlowInputError, match=r"does not fit.*nothing was written"):
        other.resume(execution_id)
    with Loom(other.settings.url) as bare, pytest.raises(FlowNotFoundError):
        bare.resume(execution_id)  # no flow at all: refused before the claim too
    with caplog.at_level(logging.WARNING, logger="loom.runtime"):
        for _ in range(MAX_CLAIMS + 1):
            assert other.recover() == []
    assert other.log.position == head
    assert other.execution(execution_id).error is None  # not set aside
    left = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(left) == MAX_CLAIMS + 1 and all(
        "does not fit" in line and "nothing was written" in line for line in left
    ), left
    (tmp_path / "greet_v2.py").write_text(GREET_V2)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(
        app, ["resume", str(execution_id), "--db", other.settings.url, "--flows", "greet_v2:flows"]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "nothing was written" in result.stderr
    assert other.log.position == head


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "clear"])
def test_a_sealed_input_that_no_longer_fits_is_not_quoted_in_the_log(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, sealed: bool
) -> None:
    """What recovery logs of an input the flow no longer takes is out of erasure's reach, and
    a validation error can quote the value (an enum's): for a sealed execution the warning
    names the error's type alone, while ``resume`` tells the key holder the whole reason."""
    key = MasterKey(bytes(range(32))) if sealed else None
    with Loom(sqlite_url, encryption=key) as loom:

        @loom.flow("intake")
        def intake(ctx: FlowContext, patient: str) -> str:
            ctx.decide("bed", lambda: 1)
            raise Crash

        with loom.worker(recover_every=None), pytest.raises(Crash):
            loom.run("intake", patient="alice@example.com")
    with Loom(sqlite_url, encryption=key) as other:

        @other.flow("intake")
        def intake_v2(ctx: FlowContext, patient: Literal["bob"]) -> str:
            return patient

        head = other.log.position
        with caplog.at_level(logging.WARNING, logger="loom.runtime"):
            assert other.recover() == []
        (summary,) = other.executions()
        with pytest.raises(FlowInputError, match=r"alice@example\.com"):
            other.resume(summary.execution_id)
        assert other.log.position == head
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "FlowInputError" in warning if sealed else "does not fit" in warning
    assert ("alice@example.com" in warning) is not sealed


# -- 3. leaving the worker block while its runs go on -------------------------------------------


def test_leaving_the_worker_block_while_a_run_goes_on_does_not_mark_the_worker_stopped(
    loom: Loom, other: Loom
) -> None:
    """Leaving ``with loom.worker()`` marked the worker stopped while a run it started went on
    in another thread: another worker's recovery took that run over at once, computed its
    open decision again, and the run failed at its next append. The worker's row is left to
    expire as after a crash; leaving with nothing running still stops it (the control)."""
    held = Held()
    held.register(loom)
    held.register(other)
    with loom.worker(recover_every=None) as worker:
        thread, outcome = held.start(loom)
    try:
        assert alive(loom, worker)
        assert other.recover(dead_after=60) == []
    finally:
        held.release.set()
        thread.join(20)
    assert outcome == {"output": "done"} and held.calls == ["runner"]
    with loom.worker(recover_every=None) as idle:
        pass
    assert not alive(loom, idle)


# -- 4. include_unowned and a run of this very Loom ---------------------------------------------


def test_include_unowned_never_takes_an_execution_this_loom_is_running(loom: Loom) -> None:
    """A run started outside a worker is unowned; ``recover(include_unowned=True)`` on the
    same Loom took it over while another thread ran it (``resume`` refuses exactly this):
    recovery asked whether the Loom runs an execution only when it owned it."""
    held = Held()
    held.register(loom)
    thread, outcome = held.start(loom)
    try:
        assert loom.recover(include_unowned=True) == []
        with loom.worker(recover_every=None, include_unowned=True):
            assert loom.recover(include_unowned=True) == []
    finally:
        held.release.set()
        thread.join(20)
    assert outcome == {"output": "done"} and held.calls == ["runner"]


# -- 5. `loom recover` says what it left for want of the flow ----------------------------------


OTHER_FLOWS = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("unrelated")
def unrelated(ctx) -> int:
    return 1
"""


def test_loom_recover_says_which_flows_it_left_for_want_of_them(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loom recover` with --flows that lack a dead worker's flows printed "0 execution(s)
    recovered" and nothing else (the skip was logged at DEBUG). It says how many it left and
    their flows, on one line, the names inert (they come from the log)."""
    hostile = "bill\x1b[2Jing\nforged line"
    with Loom(sqlite_url) as loom:
        for name in ("billing", hostile):  # refused by registration now; an old log holds it

            @register_unchecked(loom, name)
            def crashing(ctx: FlowContext) -> str:
                ctx.decide("charge", lambda: "ok")
                raise Crash

        with loom.worker(recover_every=None):
            for name in ("billing", "billing", hostile):
                with pytest.raises(Crash):
                    loom.run(name)
    (tmp_path / "other_flows.py").write_text(OTHER_FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(
        app, ["recover", "--db", sqlite_url, "--flows", "other_flows:flows"]
    )
    assert (result.exit_code, result.stdout) == (0, "0 execution(s) recovered\n"), result.output
    assert result.stderr == (
        "note: 3 unfinished execution(s) of flows not in --flows were left, for a worker "
        "that has them: 'billing' (2), 'bill\\x1b[2Jing\\nforged line' (1)\n"
    )
