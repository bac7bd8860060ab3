"""Automatic recovery under SIGKILL (ADR 0040): four real worker processes run flows back to
back; one at a time is SIGKILLed mid-run and replaced, :data:`KILLS` times. The survivors find
the dead worker's unfinished execution when its heartbeat goes stale and finish it.

Afterwards, from the log alone: every execution was created once and completed exactly once
(one ``Completed`` event each, none failed), and the killed workers' executions were resumed
by others (``Resumed`` events). Three survivors race for each of them; that only one claim of
a race lands is pinned exactly by ``runtime/test_recovery.py``; here it shows as every
execution completing once.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Final
from uuid import UUID

import msgspec
import pytest
import reliability_recovery_worker
from reliability_processes import KILLED, Worker
from reliability_recovery_worker import DEAD_AFTER

from loom_runtime import Loom
from loom_runtime.execution import EXECUTION_TOPICS

# Its own xdist group: five processes at once are enough for two cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("recovery-kills")]

WORKERS: Final = 4
KILLS: Final = int(os.environ.get("LOOM_RECOVERY_KILLS", "20"))
"""The issue's twenty; ``LOOM_RECOVERY_KILLS`` runs more (a soak) or fewer."""
TIMEOUT: Final = 90.0  # seconds for any one wait; every wait is bounded


def _spawn(db_url: str, folder: Path) -> Worker:
    return Worker(reliability_recovery_worker.main, db_url, folder, folder=folder)


def _wait_for(path: Path, worker: Worker) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        if worker.exitcode is not None:
            pytest.fail(f"worker {worker.pid} exited: {worker.finish(timeout=TIMEOUT)}")
        assert time.monotonic() < deadline, f"worker {worker.pid} never wrote {path.name}"
        time.sleep(0.01)


def _kill_mid_run(worker: Worker, folder: Path, rng: random.Random) -> None:
    """SIGKILL ``worker`` a random moment after an execution's second decision began."""
    (folder / f"kill.{worker.pid}").touch()
    _wait_for(folder / f"ready.{worker.pid}", worker)
    time.sleep(rng.uniform(0, 0.1))
    worker.kill()
    assert worker.exitcode == KILLED


def _stream_events(db_url: str) -> dict[UUID, Counter[str]]:
    """Each execution's events by type, read from the log by a fresh Loom."""
    found: dict[UUID, Counter[str]] = defaultdict(Counter)
    with Loom(db_url) as loom:
        for record in loom.log.notifications(topics=EXECUTION_TOPICS):
            found[record.stream][record.topic.rsplit(".", 1)[1]] += 1
    return found


def _all_finished(db_url: str) -> bool:
    return all(counts["Completed"] + counts["Failed"] for counts in _stream_events(db_url).values())


def test_sigkilled_workers_executions_are_completed_exactly_once_by_the_others(
    db_url: str, tmp_path: Path
) -> None:
    """Kill one of four workers mid-run, KILLS times: every execution completes exactly once."""
    with Loom(db_url) as loom:
        _ = loom.workers  # the log and the registry exist before four processes race to create them
    rng = random.Random(16)
    pool = [_spawn(db_url, tmp_path) for _ in range(WORKERS)]
    for kill in range(KILLS):
        slot = kill % WORKERS
        _kill_mid_run(pool[slot], tmp_path, rng)
        pool[slot] = _spawn(db_url, tmp_path)
    (tmp_path / "drain").touch()
    deadline = time.monotonic() + TIMEOUT + DEAD_AFTER
    while not _all_finished(db_url):
        assert time.monotonic() < deadline, "the survivors never finished the killed executions"
        time.sleep(0.2)
    (tmp_path / "exit").touch()
    reports = []
    for worker in pool:
        exitcode, stdout, stderr = worker.finish(timeout=TIMEOUT)
        assert exitcode == 0, stderr[-3000:]
        reports.append(msgspec.json.decode(stdout.strip().splitlines()[-1]))

    streams = _stream_events(db_url)
    assert streams, "no execution was recorded"
    once = {
        execution: (c["Created"], c["Completed"], c["Failed"]) for execution, c in streams.items()
    }
    assert [e for e, counts in once.items() if counts != (1, 1, 0)] == []
    recovered = [execution for execution, counts in streams.items() if counts["Resumed"]]
    # a kill that lands between two executions leaves nothing to recover; most land mid-run
    assert len(recovered) >= KILLS // 2, (len(recovered), KILLS)
    assert all(report["started"] >= report["lost"] for report in reports)
