"""One real worker process of the reliability tests, and how a test drives one.

The tests start it with :func:`spawn` (forked from the fork server of
:mod:`reliability_processes`, which imported all of this once); by hand, run it by file path
(the test tree has no packages)::

    python reliability_worker.py DB_URL record --count N [--go FILE]
    python reliability_worker.py DB_URL sync --rounds N [--go FILE]
    python reliability_worker.py DB_URL tail --name NAME --stop FILE [--go FILE]
    python reliability_worker.py DB_URL write --worker W --ops N [--retry-budget S] [--go FILE]
    python reliability_worker.py DB_URL audit-writes REPORTS
    python reliability_worker.py DB_URL crash SCENARIO POINT:N
    python reliability_worker.py DB_URL check
    python reliability_worker.py DB_URL open-race --processes N --rounds R
    python reliability_worker.py zygote

Each command prints ONE JSON line on stdout:

* ``record``: runs N executions (alternating ``pipeline`` and ``fanout``) and prints their ids;
* ``sync``: syncs corpus rounds 0..N-1 (revisions and removals) and prints what each wrote;
* ``tail``: catches a :class:`SeenEvents` projection and the corpus up, again and again, while
  the others write, until FILE exists; then once more. Prints how often it advanced;
* ``write``: worker W's N contended corpus and memory writes (:mod:`reliability_contention`);
  prints what it wrote and every failure. ``--retry-budget`` shrinks the log's write retry
  budget (seconds), which is how the benchmark's negative control makes writes give up;
* ``audit-writes``: judges the log against the ``write`` reports in the JSON file REPORTS;
* ``crash``: arms one kill point (:mod:`reliability_faults`), runs the scenario and, if it
  survived (the point was never reached), prints ``{"survived": true}``;
* ``open-race``: R times, fork N processes that open the log at the same instant; prints how
  many failed and how (see :func:`open_race`);
* ``check``: a freshly started process runs every invariant (:mod:`reliability_checks`) and
  prints the report.

``zygote`` (see :func:`serve`) imports all of the above once and then forks one worker per job
it reads on stdin: the crash harness runs ~150 short-lived workers per backend, and paying an
interpreter start-up and loom's imports for each would be most of its wall time.

``--go FILE``: the worker imports everything, opens its log, says it is ready (an empty
``FILE.ready.PID``), then waits for FILE. The parent creates FILE only when every worker is
ready (:func:`start_together`), so all workers of a test start writing at the same moment
instead of one interpreter start-up apart: a fast worker could otherwise finish its whole
workload before a slow one had imported loom, and the race under test would not happen.
The workers open their logs one at a time (an exclusive ``flock`` on ``FILE.lock``): opening
an eventsourcing PostgreSQL log re-runs its DDL, and concurrent openers can fail with "tuple
concurrently updated" (pinned by ``test_invariants.py``); the writing that follows is the race
these tests are about.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec
from reliability_checks import SeenEvents, check_log
from reliability_contention import WriterReport, audit, open_streams, write
from reliability_faults import arm, count_hits
from reliability_processes import Worker, import_storage
from reliability_workload import (
    SCENARIOS,
    SOURCE,
    corpus_round,
    knowledge_base,
    register_flows,
    run_one,
)

import loom_knowledge.corpus.knowledge_base
from loom_runtime import Loom, RetryPolicy
from loom_runtime.projection import catch_up
from loom_runtime.retry import DEFAULT_RETRY

SCRIPT: Final = Path(__file__)
CRASH_PAGE_SIZE: Final = 2  # tiny projection pages, so a corpus write spans several of them


# -- the commands -------------------------------------------------------------------------------


def record(loom: Loom, count: int) -> list[str]:
    register_flows(loom)
    return [run_one(loom, index) for index in range(count)]


def sync(loom: Loom, rounds: int) -> list[dict[str, Any]]:
    kb = knowledge_base(loom)
    return [
        msgspec.to_builtins(kb.sync(corpus_round(round_), source=SOURCE))
        for round_ in range(rounds)
    ]


def tail(loom: Loom, name: str, stop: Path) -> dict[str, int]:
    """Catch up while others write; ``advances`` proves the tail ran concurrently with them."""
    seen = SeenEvents(loom.log.engine, name=name)
    kb = knowledge_base(loom)
    advances = rounds = 0
    while True:
        finished = stop.exists()  # read BEFORE catching up: the last round sees every write
        before = seen.position()
        catch_up(loom.log, seen, page_size=7)  # small pages: many page boundaries under load
        kb.refresh()
        advances += seen.position() > before
        rounds += 1
        if finished:
            return {"advances": advances, "rounds": rounds, "position": seen.position()}
        time.sleep(0.005)


def crash(loom: Loom, scenario: str, spec: str) -> dict[str, Any]:
    knowledge_base_module: Any = loom_knowledge.corpus.knowledge_base
    knowledge_base_module.catch_up = functools.partial(catch_up, page_size=CRASH_PAGE_SIZE)
    if spec == "count":
        hits = count_hits()
        SCENARIOS[scenario](loom)
        return {"survived": True, "hits": dict(hits)}
    point, occurrence = spec.rsplit(":", 1)
    arm(point, int(occurrence))
    SCENARIOS[scenario](loom)
    return {"survived": True}


def check(loom: Loom) -> dict[str, Any]:
    register_flows(loom)
    report: dict[str, Any] = msgspec.to_builtins(check_log(loom))
    return report


def open_race(db_url: str, processes: int, rounds: int) -> dict[str, Any]:
    """Open one log from ``processes`` processes at once, ``rounds`` times; count the failures.

    Processes, not threads: the DDL race this exposes did not reproduce between threads of one
    interpreter. Each round's children are forked (no connection is open in this process),
    block on a pipe, and are released together by one write of ``processes`` bytes.
    """
    import_storage()
    failures = 0
    for _ in range(rounds):
        gun, trigger = os.pipe()
        children = []
        for _ in range(processes):
            pid = os.fork()
            if pid == 0:
                os.read(gun, 1)
                try:
                    with Loom(db_url) as loom:
                        _ = loom.log.position
                except Exception as exc:
                    sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
                    os._exit(1)
                os._exit(0)
            children.append(pid)
        os.write(trigger, b"x" * processes)
        for pid in children:
            failures += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
        os.close(gun)
        os.close(trigger)
    return {"failures": failures, "attempts": processes * rounds}  # why: on stderr


def _open_alone(loom: Loom, go: Path | None, *, streams: bool) -> None:
    """Open the log (its tables and connections) before the start signal, one worker at a time.

    ``streams``: also open the contended corpus and memory, whose stores create tables too.
    """
    with open(go.with_suffix(".lock") if go else os.devnull, "a") as lock:
        if go is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        _ = loom.log.position
        if streams:
            open_streams(loom)


def _wait_for(go: Path | None) -> None:
    if go is not None:
        go.with_name(f"{go.name}.ready.{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while go is not None and not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} never appeared")
        time.sleep(0.002)


class Job(msgspec.Struct, frozen=True):
    """One worker for a zygote to fork: its arguments, where its output goes, its time limit."""

    argv: list[str]
    stdout: str
    stderr: str
    timeout: float


def serve() -> int:
    """The zygote: fork one worker per job line on stdin, reply its exit status on stdout.

    Why a forked child is as good a "fresh process" as a new interpreter here: the zygote has
    only imported modules. It never opens a Loom, a connection or a thread, so a child starts
    with no connection, no cached aggregate or projection and no armed kill point, exactly
    like ``python reliability_worker.py ...``, and a SIGKILL takes down only the child. The
    zygote enforces the time limit itself, because only it can reap the child: a parent
    killing by pid could hit a recycled one.
    """
    import_storage()
    for line in sys.stdin:
        job = msgspec.json.decode(line, type=Job)
        pid = os.fork()
        if pid == 0:
            _forked(job)
        deadline, timed_out = time.monotonic() + job.timeout, False
        while (reaped := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline and not timed_out:
                os.kill(pid, signal.SIGKILL)
                timed_out = True
            time.sleep(0.005)
        status = os.waitstatus_to_exitcode(reaped[1])
        sys.stdout.write(msgspec.json.encode({"status": status, "timed_out": timed_out}).decode())
        sys.stdout.write("\n")
        sys.stdout.flush()
    return 0


def _forked(job: Job) -> None:
    """In the child: point stdin, stdout and stderr at the job's files, run it, never return."""
    code = 1
    try:
        with open(os.devnull) as null, open(job.stdout, "w") as out, open(job.stderr, "w") as err:
            for stream, fd in ((null, 0), (out, 1), (err, 2)):
                os.dup2(stream.fileno(), fd)
        code = main(job.argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    if (argv if argv is not None else sys.argv[1:]) == ["zygote"]:
        return serve()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("db_url")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("record", "sync", "tail", "write"):
        command = commands.add_parser(name)
        command.add_argument("--go", type=Path, default=None)
    commands.choices["record"].add_argument("--count", type=int, required=True)
    commands.choices["sync"].add_argument("--rounds", type=int, required=True)
    commands.choices["tail"].add_argument("--name", required=True)
    commands.choices["tail"].add_argument("--stop", type=Path, required=True)
    commands.choices["write"].add_argument("--worker", type=int, required=True)
    commands.choices["write"].add_argument("--ops", type=int, required=True)
    commands.choices["write"].add_argument("--retry-budget", type=float, default=None)
    commands.add_parser("audit-writes").add_argument("reports", type=Path)
    crash_command = commands.add_parser("crash")
    crash_command.add_argument("scenario", choices=sorted(SCENARIOS))
    crash_command.add_argument("spec", help="POINT:N (e.g. tracking.before:3), or count")
    commands.add_parser("check")
    race = commands.add_parser("open-race")
    race.add_argument("--processes", type=int, required=True)
    race.add_argument("--rounds", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "open-race":  # opens nothing itself: its children must fork clean
        raced = open_race(args.db_url, args.processes, args.rounds)
        sys.stdout.write(msgspec.json.encode(raced).decode() + "\n")
        return 0

    go: Path | None = getattr(args, "go", None)
    budget: float | None = getattr(args, "retry_budget", None)
    retry = DEFAULT_RETRY if budget is None else RetryPolicy(budget=budget)
    with Loom(args.db_url, write_retry=retry) as loom:
        _open_alone(loom, go, streams=args.command == "write")
        _wait_for(go)
        result: Any
        if args.command == "record":
            result = record(loom, args.count)
        elif args.command == "sync":
            result = sync(loom, args.rounds)
        elif args.command == "tail":
            result = tail(loom, args.name, args.stop)
        elif args.command == "write":
            result = write(loom, args.worker, args.ops)
        elif args.command == "audit-writes":
            reports = msgspec.json.decode(args.reports.read_bytes(), type=list[WriterReport])
            result = audit(loom, reports)
        elif args.command == "crash":
            result = crash(loom, args.scenario, args.spec)
        else:
            result = check(loom)
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    return 0


# -- driving a worker from a test -----------------------------------------------------------------


class Outcome(msgspec.Struct, frozen=True):
    """How a worker ended: exit status (negative: killed by that signal), output, errors."""

    status: int
    payload: Any
    stderr: str

    @property
    def killed(self) -> bool:
        return self.status == -signal.SIGKILL


def spawn(db_url: str, *args: str) -> Worker:
    """Start a worker, forked from the fork server (:mod:`reliability_processes`); nothing is
    shared with the caller but the database."""
    return Worker(main, [db_url, *args], folder=Path(tempfile.mkdtemp()))


def start_together(go: Path, workers: Sequence[Worker], *, timeout: float) -> None:
    """Give the start signal ``go`` once every worker has opened its log and is waiting.

    A worker that exits before it is ready (a crash at start-up) ends the wait: the signal is
    given, and its own ``finish`` reports what it printed.
    """
    deadline = time.monotonic() + timeout
    while len(list(go.parent.glob(f"{go.name}.ready.*"))) < len(workers):
        if any(worker.exitcode is not None for worker in workers) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    go.touch()


def finish(child: Worker, *, timeout: float) -> Outcome:
    """Wait at most ``timeout`` seconds for a worker (then SIGKILL it and say so)."""
    status, stdout, stderr = child.finish(timeout=timeout)
    if status is None:
        child.kill()
    return _outcome(status, stdout, stderr, timeout)


def _outcome(status: int | None, stdout: str, stderr: str, timeout: float) -> Outcome:
    """What a worker printed last, its status, or a timeout (``status`` None) said in stderr."""
    lines = stdout.strip().splitlines()
    payload = msgspec.json.decode(lines[-1]) if lines else None
    if status is None:
        return Outcome(-999, payload, f"{stderr}\n[the worker was killed after {timeout}s]")
    return Outcome(status, payload, stderr)


def run(db_url: str, *args: str, timeout: float) -> Outcome:
    """Spawn a worker and wait for it (bounded)."""
    return finish(spawn(db_url, *args), timeout=timeout)


class Zygote:
    """A running :func:`serve` process: forks workers for one caller thread at a time."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._jobs = 0
        env = {key: value for key, value in os.environ.items() if not key.startswith("LOOM_")}
        self._process = subprocess.Popen(
            [sys.executable, str(SCRIPT), "zygote"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, db_url: str, *args: str, timeout: float) -> Outcome:
        """As :func:`run`, forked from this zygote."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._jobs += 1
        out, err = (self._scratch / f"job{self._jobs}.{name}" for name in ("out", "err"))
        job = Job(argv=[db_url, *args], stdout=str(out), stderr=str(err), timeout=timeout)
        self._process.stdin.write(msgspec.json.encode(job).decode() + "\n")
        self._process.stdin.flush()
        reply = msgspec.json.decode(self._process.stdout.readline())
        status = None if reply["timed_out"] else reply["status"]
        return _outcome(status, out.read_text(), err.read_text(), timeout)

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
