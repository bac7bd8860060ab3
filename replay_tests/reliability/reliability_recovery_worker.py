"""A worker process for ``test_recovery_kills.py``: runs flows back to back as a registered
worker (heartbeat and background recovery) until told to stop.

The test forks it as ``main(...)`` from a fork server (``reliability_processes``); by
hand, run it by file path::

    python reliability_recovery_worker.py DB_URL DIR

Files in DIR steer it and let the parent see it (the parent SIGKILLs it at will):

* ``kill.<pid>`` (from the parent): at the next execution's second decision, the worker
  writes ``ready.<pid>`` and carries on; the parent then kills it a moment later, mid-run.
* ``drain`` (from the parent): start no new execution; keep beating and recovering.
* ``exit`` (from the parent): leave the worker block (waits for a recovery in progress), exit 0.

It prints one JSON line: how many executions it started and how many it lost to another worker
(taken for dead while alive: its next append was refused, nothing duplicated).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import msgspec

from loom_runtime import ExecutionConflictError, FlowContext, Loom

DECISIONS = 5
PAUSE = 0.03  # seconds each decision's compute takes: the run is mostly "mid-run"
HEARTBEAT = 0.1
RECOVER_EVERY = 0.25
DEAD_AFTER = 2.0


def register(loom: Loom, folder: Path) -> None:
    @loom.flow("steps")
    def steps(ctx: FlowContext, n: int) -> list[int]:
        return [ctx.decide(f"step{i}", lambda i=i: compute(folder, n, i)) for i in range(DECISIONS)]


def compute(folder: Path, n: int, i: int) -> int:
    pid = os.getpid()
    if i == 1 and (folder / f"kill.{pid}").exists():
        (folder / f"ready.{pid}").touch()
    time.sleep(PAUSE)
    return n * 10 + i


def main(db_url: str, folder: Path) -> int:
    started = lost = 0
    with Loom(db_url) as loom:
        register(loom, folder)
        with loom.worker(heartbeat=HEARTBEAT, recover_every=RECOVER_EVERY, dead_after=DEAD_AFTER):
            while not (folder / "drain").exists():
                started += 1
                try:
                    loom.run("steps", n=started)
                except ExecutionConflictError:
                    lost += 1
            while not (folder / "exit").exists():
                time.sleep(0.05)
    sys.stdout.write(msgspec.json.encode({"started": started, "lost": lost}).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
