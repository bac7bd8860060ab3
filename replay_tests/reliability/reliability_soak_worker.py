"""A worker process for ``test_soak.py``: the reliability workload's mixed writes, back to back,
as a registered worker (heartbeat and background recovery), until told to stop.

The test forks it as ``main(...)`` from a fork server (``reliability_processes``); by
hand, run it by file path::

    python reliability_soak_worker.py DB_URL DIR SEED

It alternates the workload's ``pipeline`` (a recorded retrieval from the shared corpus) and
``fanout`` flows, and every few executions syncs the shared corpus to a random round of
:func:`reliability_workload.corpus_round`, racing the other workers' syncs on one scope. The
parent SIGKILLs it at random moments; the survivors recover what it left unfinished.

It touches ``busy.<pid>`` in DIR once its first execution is over, so the parent kills only
a worker that is in its loop (killing one still importing would test nothing), and holds
``running.<pid>`` while an execution runs, so the parent can aim a kill mid-execution (a kill
during a sync leaves nothing for the survivors to recover). Files in DIR
steer it: ``drain`` (start nothing new; keep beating and recovering) and ``exit``
(leave the worker block and exit 0). It prints one JSON line: the executions it started, the
ones it lost to another worker (taken for dead while alive: its next append was refused,
nothing duplicated), and its syncs.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import msgspec
from reliability_workload import SOURCE, corpus_round, knowledge_base, register_flows, run_one

from loom_runtime import ExecutionConflictError, Loom

SYNC_EVERY = 7  # one corpus sync per this many executions
ROUNDS = 12  # corpus_round numbers a sync picks from
HEARTBEAT = 0.1
RECOVER_EVERY = 0.25
DEAD_AFTER = 2.0


def main(db_url: str, folder: Path, seed: int) -> int:
    rng = random.Random(seed)
    started = lost = synced = 0
    with Loom(db_url) as loom:
        register_flows(loom)
        kb = knowledge_base(loom)
        with loom.worker(heartbeat=HEARTBEAT, recover_every=RECOVER_EVERY, dead_after=DEAD_AFTER):
            while not (folder / "drain").exists():
                if rng.randrange(SYNC_EVERY) == 0:
                    kb.sync(corpus_round(rng.randrange(ROUNDS)), source=SOURCE)
                    synced += 1
                    continue
                started += 1
                running = folder / f"running.{os.getpid()}"
                running.touch()
                try:
                    run_one(loom, rng.randrange(1_000))
                except ExecutionConflictError:
                    lost += 1
                running.unlink()
                (folder / f"busy.{os.getpid()}").touch()
            while not (folder / "exit").exists():
                time.sleep(0.05)
    report = {"started": started, "lost": lost, "synced": synced}
    sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
