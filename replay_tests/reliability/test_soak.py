"""A soak: many real worker processes write mixed flows, syncs and retrievals for a while, and
the parent SIGKILLs one at random every 0.5-2 s and starts a replacement.

Eight workers on PostgreSQL (four on SQLite) run the reliability workload (ADR 0040's worker
block: heartbeat and background recovery) for :data:`SECONDS`, and until :data:`MIN_KILLS`
kills landed. Meanwhile the parent takes checkpoints: the log's head P and the corpus's
answers to a few questions as of P. Afterwards, from the log alone:

* 0 lost or duplicated events (each stream's versions are 1..n in log order), the hash chain
  verifies from position 0;
* every execution completed exactly once (those the kills left unfinished were recovered by the
  survivors), none failed, and every one replays identically;
* every checkpoint's as-of answers are what they were when it was taken: nothing committed
  later landed at or below a position already read as the head;
* the corpus, caught up, equals a rebuild from position 0.

CI runs a bounded form (:data:`SECONDS` defaults to 10, at least :data:`MIN_KILLS` kills: it was
15 s: its two runs, 20 s each with both cores busy, were a tenth of the suite's time);
``LOOM_SOAK_SECONDS=600`` runs the ten-minute reliability run.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Final

import msgspec
import pytest
import reliability_soak_worker
from reliability_checks import check_log
from reliability_processes import KILLED, Worker
from reliability_workload import knowledge_base, register_flows

from loom_runtime import Loom
from loom_runtime.execution import Execution
from loom_runtime.integrity import verify_log

# Its own xdist group, like the recovery kills: eight worker processes at once are enough.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("soak")]

WORKERS: Final = {"postgresql": 8, "sqlite": 4}
SECONDS: Final = float(os.environ.get("LOOM_SOAK_SECONDS", "10"))
"""How long the workers write; ``LOOM_SOAK_SECONDS`` runs longer (the ten-minute run) or shorter."""
MIN_KILLS: Final = 5
"""The run goes on past :data:`SECONDS` until this many kills landed (a loaded machine starts
workers slowly), and until a survivor recovered an execution a kill left unfinished."""
TIMEOUT: Final = 120.0  # seconds for any one wait; every wait is bounded
QUESTIONS: Final = ("restart the pool", "doc3 edition", "part2 runbook")


def _spawn(db_url: str, folder: Path, seed: int) -> Worker:
    return Worker(reliability_soak_worker.main, db_url, folder, seed, folder=folder)


def _answers(loom: Loom, position: int) -> list[list[tuple[str, int, int, str]]]:
    view = knowledge_base(loom).as_of(position)
    return [
        [(hit.doc_id, hit.index, hit.revision, hit.text) for hit in view.retrieve(question)]
        for question in QUESTIONS
    ]


def _unfinished(loom: Loom) -> int:
    ended = {Execution.Completed.TOPIC, Execution.Failed.TOPIC}
    created: set[object] = set()
    finished: set[object] = set()
    for record in loom.log.notifications(topics=[Execution.Created.TOPIC, *ended]):
        (finished if record.topic in ended else created).add(record.stream)
    return len(created - finished)


def _recovered(loom: Loom) -> bool:
    return any(loom.log.notifications(topics=[Execution.Resumed.TOPIC], page_size=1))


def test_workers_killed_at_random_lose_duplicate_and_reorder_nothing(
    db_url: str, tmp_path: Path
) -> None:
    backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    with Loom(db_url) as loom:
        _ = loom.workers  # the log and the registry exist before the workers race to create them
        knowledge_base(loom).refresh()
    rng = random.Random(2026)
    seeds = iter(range(10_000))
    pool = [_spawn(db_url, tmp_path, next(seeds)) for _ in range(WORKERS[backend])]
    checkpoints: list[tuple[int, list[list[tuple[str, int, int, str]]]]] = []
    kills = 0
    deadline = time.monotonic() + SECONDS
    give_up = deadline + TIMEOUT
    with Loom(db_url) as observer:
        # Short-circuited: the log is asked about recoveries only once time and kills are up.
        while time.monotonic() < deadline or kills < MIN_KILLS or not _recovered(observer):
            assert time.monotonic() < give_up, f"{kills} kills, none recovered by a survivor"
            time.sleep(rng.uniform(0.5, 2.0))
            busy = [n for n, w in enumerate(pool) if (tmp_path / f"busy.{w.pid}").exists()]
            if not busy:  # all still starting (a loaded machine): kill nothing yet
                continue
            # Mid-execution when one is (a kill during a sync leaves nothing to recover; five
            # kills that all missed left the run with no recovery to check).
            running = [n for n in busy if (tmp_path / f"running.{pool[n].pid}").exists()]
            slot = rng.choice(running or busy)
            pool[slot].kill()
            assert pool[slot].exitcode == KILLED
            kills += 1
            pool[slot] = _spawn(db_url, tmp_path, next(seeds))
            position = observer.log.position
            checkpoints.append((position, _answers(observer, position)))

        (tmp_path / "drain").touch()
        wait_until = time.monotonic() + TIMEOUT + reliability_soak_worker.DEAD_AFTER
        while _unfinished(observer):
            assert time.monotonic() < wait_until, "the survivors never finished what was killed"
            time.sleep(0.2)
    (tmp_path / "exit").touch()
    reports = []
    for worker in pool:
        exitcode, stdout, stderr = worker.finish(timeout=TIMEOUT)
        assert exitcode == 0, stderr[-3000:]
        reports.append(msgspec.json.decode(stdout.strip().splitlines()[-1]))

    with Loom(db_url) as loom:
        register_flows(loom)
        verified = verify_log(loom.log)
        assert verified.ok, verified
        assert [
            (position, answers)
            for position, answers in checkpoints
            if _answers(loom, position) != answers
        ] == []
        report = check_log(loom)
        assert report.violations == []
        resumed = sum(1 for _ in loom.log.notifications(topics=[Execution.Resumed.TOPIC]))

    # What the run did, for a reader of the ten-minute run's output (pytest -rP shows it).
    stats = report.stats
    print(f"{kills} kills, {stats['executions']} executions, {resumed} resumed by a survivor, "
          f"{len(checkpoints)} as-of checkpoints, {stats['events']} events")  # fmt: skip
    # It proved something only if the kills landed mid-run and the writers did real work.
    assert len(checkpoints) == kills >= MIN_KILLS
    assert stats["executions"] >= 2 * WORKERS[backend], stats
    assert stats["resumed"] == 0, "an execution was left unfinished after the drain"
    assert resumed >= 1, "no kill landed mid-execution: nothing was recovered"
    assert all(r["started"] >= r["lost"] for r in reports), reports
    distinct = {tuple(map(tuple, answers)) for _, answers in checkpoints}
    assert len(distinct) >= 2, "the corpus never changed between checkpoints: as-of went untested"
