"""A program that forks children from a process with an open ``Loom``, for ``test_fork_pools.py``.

Run by file path (the test tree has no packages)::

    python forked_loom.py DB_URL CHILDREN RUNS PERSISTENCE

The parent opens a Loom (on the PERSISTENCE module: builtin or sqlalchemy) and records one
execution, so its pools hold connections (and, on PostgreSQL, a writer with its prepared
statements). Then it forks CHILDREN processes, as ``multiprocessing``'s fork start method does,
and while they run it records RUNS executions itself. Each child records RUNS executions with
the inherited Loom, replays each one, closes the Loom (as a worker's clean exit does) and exits
0, or 1 with the error on stderr. Once every child has exited, the parent records RUNS more: a
child that closed connections of its parent's would fail these. It prints ONE JSON line: each
child's exit status, how many executions the log holds, and whether its hash chain verifies (null
for the sqlalchemy persistence, which keeps none).
"""

from __future__ import annotations

import sys
from typing import cast

import msgspec

from loom_runtime import IntegrityUnsupportedError, Loom
from loom_runtime.integrity import verify_log
from loom_runtime.log import Persistence
from replay_tests.forked_children import exit_statuses, fork_children

DECISIONS = 10


def _record(loom: Loom, runs: int, *, replay: bool) -> None:
    for n in range(runs):
        run = loom.run("count", n=n)
        if run.output != n * DECISIONS:
            raise AssertionError(f"run {n} returned {run.output!r}")
        if replay and not loom.replay(run.execution_id).identical:
            raise AssertionError(f"run {n} did not replay identically")


def main(url: str, children: int, runs: int, persistence: Persistence) -> None:
    loom = Loom(url, persistence=persistence)

    @loom.flow("count")
    def count(ctx: object, n: int) -> int:
        return sum(ctx.decide(f"step-{i}", lambda: n) for i in range(DECISIONS))  # type: ignore[attr-defined]

    _record(loom, 1, replay=False)

    def child(_: int) -> None:
        _record(loom, runs, replay=True)
        loom.close()

    pids = fork_children(children, child)
    _record(loom, runs, replay=False)
    statuses = exit_statuses(pids)
    _record(loom, runs, replay=False)
    try:
        verified: bool | None = verify_log(loom.log).problem is None
    except IntegrityUnsupportedError:  # the sqlalchemy persistence keeps no hash chain
        verified = None
    executions = len(loom.executions())
    loom.close()
    print(
        msgspec.json.encode(
            {"children": statuses, "executions": executions, "verified": verified}
        ).decode()
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), cast(Persistence, sys.argv[4]))
