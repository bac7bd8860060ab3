"""Section "scaleout": recording with many worker processes; replay and rebuild rates.

**Recording.** N worker processes (forked, so each is a fresh process with nothing open; the
parent only creates the schema beforehand so the workers do not race on ``CREATE TABLE``; on
PostgreSQL by copying a database that holds it, made once)
share one log: a new PostgreSQL database per sample (N = 1, 4, 8) when ``LOOM_TEST_PG_URL`` is
set, and one SQLite file (N = 1, 4). Each worker opens its own ``Loom`` and log, waits at a
barrier, then records executions of a sequential flow of ``DECISIONS_PER_EXECUTION`` ~1 KB
decisions (:mod:`benchmarks.workload`) until the duration has passed, finishing the execution
it is in. The aggregate rate is every completed execution's decisions over the time from the
barrier to the last worker's finish. After each sample the harness counts the decision events
in the log: they must equal what the workers reported (nothing lost, nothing extra).

ADR 0015 says every append takes one table lock (PostgreSQL) or the single write lock (SQLite),
so the aggregate is expected to stay roughly flat in N; this section reports what it measures.
Since ADR 0035 a PostgreSQL append holds that lock for one server-side statement instead of
six client round trips, so the lock is held for less of each worker's time.

With PostgreSQL, the 1-worker arm also times, right after itself in the same sample and on
the same database, the **bare append floor**: one process with a psycopg connection and no
loom code making the call each loom append of one event makes (``SELECT
loom_events_append(...)`` of four scalars, one round trip, ~1 KB states, autocommit), as loom's
writer connection makes it (prepared once, binary parameters, through libpq), once per
decision for the same duration. One
sequential worker waits for the server on every decision (ADR 0002), so with fsync off this
is the least a recorded decision costs on this machine: the client's Python for one call, one
round trip and the function's server-side work. The table gives loom's rate over it. The
8-worker arm times the same floor by 8 worker processes: its 8-vs-1 ratio is the most any
client making one round trip per decision can gain from more workers while the clients and the
server share this machine's cores, and the "8 workers vs 1" target is judged against it.

**Replay and rebuild.** One log per backend holds a corpus (``kb.sync`` of real-manual
documents, :func:`benchmarks.corpus.base_docs`) and a few recorded executions. Replay: a fresh
``Loom`` (log opened before the clock) replays every execution; decisions/s. Rebuild: the corpus
projection (``registered_projections(log)``, the one named ``knowledge``) is rebuilt from
position 0 with ``loom_runtime.projection.rebuild``; events applied per second, and afterwards
the manifest must list every document.

**Contended writes** (ADR 0019). ``CONTENDED_WORKERS`` processes each make ``CONTENDED_OPS``
(``QUICK_CONTENDED_OPS`` with ``--quick``) knowledge writes (syncs of their own source
alternating with ``put_doc`` of documents every process revises) and as many memory appends,
all on ONE corpus scope and ONE memory key, released together: the workload of
``replay_tests/reliability/test_concurrent_writes.py``, driven through the same worker script
and judged by the same audit (``reliability_worker.py write`` / ``audit-writes``), so the row
measures exactly what the test asserts. Each writer and each audit is a process forked from one
of ``CONTENDED_WORKERS`` zygotes of that script started once per run (:class:`_Writers`), and
the writers are released together once every one has opened its log. Reported: failed writes,
writes lost or duplicated in the log, whether the hash chain verifies, and writes per second
from the start signal to the slowest worker's end. Its control runs the same workload with a
retry budget too small to wait in: it must fail writes, or the audit could not see a failure.

**Past one log** (ADR 0042). N worker processes each recording into its OWN PostgreSQL
database on the same server (N logs, one worker each; N = 1, 2, 4): what splitting the log
per tenant buys on one server, next to the shared log's rows. An informational row does the
same with 4 SQLite files.

**At once.** Each worker reports when it started and stopped; "at once" is the sum of their
running times over the span from the first start to the last stop: N when they all ran
together, 1 when they ran one after another. Unlike a rate it holds on a machine with no idle
core (time-slicing still overlaps), so a flat rate can be told from workers that never
overlapped. Control: the same 4 workers serialised on purpose by one lock must read close to 1
while the 4 unshared workers read close to 4.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier, Lock
from pathlib import Path
from types import ModuleType
from typing import Any
from uuid import UUID

import msgspec

from benchmarks.corpus import base_docs
from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Progress,
    Results,
    Sample,
    SectionResult,
    Settings,
    Stats,
    Table,
    figure,
    floor_verdict,
    interleave,
    scratch_directory,
)
from benchmarks.report import REPOSITORY
from benchmarks.stores import (
    fresh_postgres,
    fresh_sqlite,
    loom_schema_template,
    postgres_description,
)
from benchmarks.workload import FLOW, Value, make_values, recording_flow
from loom_knowledge import open_knowledge_base
from loom_runtime import Loom
from loom_runtime.execution import Execution
from loom_runtime.projection import TrackedProjection, rebuild, registered_projections

DECISIONS_PER_EXECUTION = 25
DURATION_S = 1.5
QUICK_DURATION_S = 0.4
PG_WORKERS = (1, 4, 8)
SCALING_TARGET = 4.0
"""PostgreSQL, 8 workers against 1 on one log, aggregate decisions/s."""
ONE_WORKER_TARGET = 3_000.0
"""PostgreSQL, one worker's decisions/s (ADR 0048)."""
FLOOR_WORKERS = (1, 8)
"""PostgreSQL worker counts whose arm also measures the bare append floor by as many workers:
the floor's own 8-vs-1 scaling is the most the "8 workers vs 1" target can reach here."""
SQLITE_WORKERS = (1, 4)
CONTROL_WORKERS = 4
LOGS = (2, 4)
"""PostgreSQL logs (databases) on one server, one worker each; 1 log is the 1-worker row."""
SERIAL_LIMIT = 1.5
"""Workers serialised by one lock must read at most this many "at once" (1.0 is exact)."""
START_TIMEOUT_S = 60.0
REBUILD_DOCS = 1_000
QUICK_REBUILD_DOCS = 200
REPLAY_EXECUTIONS = 5
POSTGRES_REBUILD_ROUNDS = 1
"""The rounds the PostgreSQL rebuild runs, in the first round only: ~17 s a sample (15.9-18.1 s
over the three rounds of the run published before this cap), no verdict divides by it, and its
two more rounds were ~34 s of a run held to 20 minutes (ADR 0063). SQLite's keeps every round."""
REPLAY_DECISIONS = 400
QUICK_REPLAY_DECISIONS = 100
SCOPE = "bench"
SOURCE = "bench"
CONTENDED_WORKERS = 8
CONTENDED_OPS = 20
QUICK_CONTENDED_OPS = 10
"""--quick: each writer's writes; the control still starves (8 writers, one scope and key)."""
"""Per worker: this many knowledge writes and as many memory appends."""
CONTENDED_ROUNDS = 3
CONTENDED_TIMEOUT_S = 300.0
CONTROL_RETRY_BUDGET_S = 0.001
"""The negative control's write retry budget: shorter than any pause, so a lost race fails."""
WORKER_SCRIPT = REPOSITORY / "replay_tests" / "reliability" / "reliability_worker.py"

_FORK = multiprocessing.get_context("fork")


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Interleave the recording arms of every backend, then the replay and rebuild arms."""
    duration = QUICK_DURATION_S if settings.quick else DURATION_S
    values = make_values(DECISIONS_PER_EXECUTION)
    backends: list[tuple[str, tuple[int, ...]]] = [("SQLite", SQLITE_WORKERS)]
    if settings.pg_url:
        backends.insert(0, ("PostgreSQL", PG_WORKERS))
    with ExitStack() as stack:
        server = (
            _Server(settings.pg_url, stack.enter_context(loom_schema_template(settings.pg_url)))
            if settings.pg_url
            else None
        )
        recording = [
            _recording_arm(backend, workers, server, values, duration)
            for backend, counts in backends
            for workers in counts
        ]
        if server:  # right after the shared PostgreSQL log's rows
            # Informational (no verdict): a quick run measures them once, ~2 s less.
            logs_rounds = 1 if settings.quick else None
            logs = [
                _logs_arm(count, server, values, duration, rounds=logs_rounds) for count in LOGS
            ]
            recording[len(PG_WORKERS) : len(PG_WORKERS)] = logs
        unshared = _unshared_arm(values, duration)
        serialised = _unshared_arm(values, duration, serialised=True)
        recorded = interleave(
            [*recording, unshared, serialised], rounds=settings.rounds, progress=progress
        )

    docs = QUICK_REBUILD_DOCS if settings.quick else REBUILD_DOCS
    decisions = QUICK_REPLAY_DECISIONS if settings.quick else REPLAY_DECISIONS
    with ExitStack() as stack:
        fixtures = []
        for backend, _ in backends:
            progress(f"{backend}: syncing {docs:,} documents, recording replay executions")
            url = _fresh_url(stack, backend, settings.pg_url)
            fixtures.append(_build_fixture(stack, backend, url, docs, make_values(decisions)))
        arms = [
            arm for fixture in fixtures for arm in (fixture.replay_arm(), fixture.rebuild_arm())
        ]
        throughput = interleave(arms, rounds=settings.rounds, progress=progress)

    contention_rounds = 1 if settings.quick else min(settings.rounds, CONTENDED_ROUNDS)
    ops = QUICK_CONTENDED_OPS if settings.quick else CONTENDED_OPS
    with ExitStack() as stack:
        progress(f"contended writes: starting {CONTENDED_WORKERS} worker zygotes")
        writers = _Writers(stack, CONTENDED_WORKERS)
        contended = [
            _contended_arm(writers, backend, settings.pg_url, ops=ops) for backend, _ in backends
        ]
        starved = _contended_arm(
            writers, "SQLite", None, ops=ops, retry_budget=CONTROL_RETRY_BUDGET_S
        )
        contention = interleave([*contended, starved], rounds=contention_rounds, progress=progress)

    apart = recorded[serialised.name]["at_once"]
    together = recorded[unshared.name]["at_once"]
    control = Control(
        name=f"{CONTROL_WORKERS} workers on their own SQLite files, serialised on purpose by one "
        f"lock, against the same {CONTROL_WORKERS} workers free (same rounds)",
        expected=f"serialised reads <= {SERIAL_LIMIT} at once, free reads more than twice that "
        "(the measure tells workers that overlapped from workers that did not, on any load)",
        observed=f"serialised {apart.median:.2f}, free {together.median:.2f} at once",
        held=apart.median <= SERIAL_LIMIT and together.median > 2 * apart.median,
    )
    starved_failures = contention[starved.name]["failures"]
    starved_control = Control(
        name=f"the contended workload with a write retry budget of {CONTROL_RETRY_BUDGET_S} s "
        "(SQLite): writes give up instead of waiting",
        expected="> 0 failed writes (the audit sees a failure)",
        observed=f"{min(starved_failures.samples):.0f} failed writes in the fewest round",
        held=min(starved_failures.samples) > 0,
    )
    notes = [
        f"Each worker process records executions of a sequential flow of "
        f"{DECISIONS_PER_EXECUTION} decisions of ~1 KB for {duration:g} s (finishing the "
        "execution it is in); the aggregate is all completed decisions over the time from the "
        "start barrier to the last worker's finish, and must equal the decision events found "
        "in the log afterwards. A fresh database per sample; loom defaults otherwise "
        "(pool_size=5, lock_timeout=5 s; SQLite synchronous=NORMAL).",
        f"Contended writes: {CONTENDED_WORKERS} processes x {ops} knowledge writes "
        f"(syncs of the process's own 3 documents alternating with put_doc of 3 shared "
        f"documents) + {ops} memory appends each, ONE corpus scope and ONE memory "
        "key, default write_retry (30 s budget, full-jitter pauses 5 ms doubling to 0.5 s); "
        "lost/duplicated match every logged write to the one call that reported it, 'serial' "
        "says the corpus and memory equal a replay of the log in order (ADR 0019).",
        f"Replay: {REPLAY_EXECUTIONS} executions of {decisions:,} decisions replayed by a fresh "
        f"`Loom`. Rebuild: the corpus projection of a {docs:,}-document `kb.sync` dropped and "
        "rebuilt from position 0 (manifest, revisions and passage index; every event of the "
        "corpus topics is read and applied).",
    ]
    if settings.pg_url:
        notes.append(f"PostgreSQL server: {postgres_description(settings.pg_url)}.")
    else:
        notes.append("LOOM_TEST_PG_URL not set: PostgreSQL rows skipped.")
    return SectionResult(
        notes=tuple(notes),
        tables=(
            _recording_table([*recording, unshared, serialised], recorded, settings.rounds),
            *([_scaling_table(recorded)] if settings.pg_url else []),
            _throughput_table(arms, throughput, settings.rounds),
            _contention_table(contended, contention, contention_rounds, ops),
        ),
        controls=(control, starved_control),
    )


# -- recording ------------------------------------------------------------------------------


def _fresh_url(stack: ExitStack, backend: str, pg_url: str | None) -> str:
    if backend == "PostgreSQL":
        assert pg_url is not None
        return stack.enter_context(fresh_postgres(pg_url))
    url, _ = stack.enter_context(fresh_sqlite())
    return url


@dataclass(frozen=True)
class _Server:
    """The PostgreSQL server of the recording arms, and its database of loom's bare schema."""

    admin_url: str
    template: str


def _fresh_log(stack: ExitStack, backend: str, server: _Server | None) -> str:
    """A fresh database holding loom's schema, created before any worker starts so that the
    workers do not race on ``CREATE TABLE`` (on PostgreSQL a copy of ``server.template``)."""
    if backend == "PostgreSQL":
        assert server is not None
        return stack.enter_context(fresh_postgres(server.admin_url, template=server.template))
    url, _ = stack.enter_context(fresh_sqlite())
    with Loom(url) as loom:
        loom.log  # noqa: B018 - creates the schema
    return url


def _recording_arm(
    backend: str, workers: int, server: _Server | None, values: list[Value], duration: float
) -> Arm:
    def measure() -> Sample:
        with ExitStack() as stack:
            url = _fresh_log(stack, backend, server)
            decisions, seconds, at_once = _record_concurrently([url] * workers, values, duration)
            with Loom(url) as loom:
                found = _decision_events(loom)
        if found != decisions:
            raise InstrumentError(
                f"scaleout: {workers} workers on {backend} reported {decisions} decisions "
                f"but the log holds {found}"
            )
        sample = {"per_s": decisions / seconds, "decisions": decisions, "at_once": at_once}
        if backend == "PostgreSQL" and workers in FLOOR_WORKERS:
            with ExitStack() as stack:
                url = _fresh_log(stack, backend, server)  # with loom's append function
                appended, seconds, at_once = _record_concurrently(
                    [url] * workers, values, duration, worker=_bare_worker
                )
            sample["floor_per_s"] = appended / seconds
            sample["floor_at_once"] = at_once
        return sample

    return Arm(f"{backend}, {workers} worker{'s' if workers > 1 else ''}", measure)


def _bare_worker(
    url: str,
    values: list[Value],
    duration: float,
    barrier: Barrier,
    pipe: Connection,
    lock: Lock | None,
) -> None:
    """The bare append floor in one worker process: loom's append function called once per
    decision from psycopg with no loom code in between (loom created the schema beforehand),
    the way loom's writer calls it: the statement prepared once, five binary parameters,
    libpq's ``exec_prepared``, the returned id read. Reports as :func:`_worker` does."""
    import struct

    import psycopg
    from psycopg import pq
    from sqlalchemy.engine import make_url

    report: Any
    try:
        with Loom(url) as loom:
            recorder: Any = loom.log.application.recorder  # type: ignore[attr-defined]
            prepare, lock_wait = recorder.prepared_append, recorder.lock_wait.encode()
        states = [msgspec.json.encode(value) for value in values]
        int8 = struct.Struct("!q").pack
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn, autocommit=True) as connection:
            pgconn = connection.pgconn
            prepared = pgconn.exec_(prepare.as_bytes(connection))
            assert prepared.status == pq.ExecStatus.COMMAND_OK
            barrier.wait(timeout=START_TIMEOUT_S)
            with lock if lock is not None else nullcontext():
                start = time.monotonic()
                deadline = start + duration
                appended = 0
                while time.monotonic() < deadline:
                    stream = uuid.uuid4().bytes
                    for version, state in enumerate(states, start=1):
                        result = pgconn.exec_prepared(
                            b"loom_append_one",
                            [stream, int8(version), b"decision", state, lock_wait],
                            [1, 1, 1, 1, 1],
                        )
                        assert result.status == pq.ExecStatus.TUPLES_OK, result.get_error_message()
                        result.get_value(0, 0)
                    appended += len(states)
                report = (appended, start, time.monotonic())
    except BaseException as exc:  # reported to the parent, which stops the run
        report = f"{type(exc).__name__}: {exc}"
    pipe.send(report)
    pipe.close()


def _decision_events(loom: Loom) -> int:
    return sum(1 for _ in loom.log.notifications(topics=(Execution.DecisionRecorded.TOPIC,)))


def _logs_arm(
    logs: int, server: _Server, values: list[Value], duration: float, *, rounds: int | None
) -> Arm:
    """``logs`` workers, each recording into its own fresh database on the one server (in the
    first ``rounds`` rounds only, if given)."""

    def measure() -> Sample:
        with ExitStack() as stack:
            urls = [_fresh_log(stack, "PostgreSQL", server) for _ in range(logs)]
            decisions, seconds, at_once = _record_concurrently(urls, values, duration)
            found = 0
            for url in urls:
                with Loom(url) as loom:
                    found += _decision_events(loom)
        if found != decisions:
            raise InstrumentError(
                f"scaleout: {logs} logs reported {decisions} decisions but hold {found}"
            )
        return {"per_s": decisions / seconds, "decisions": decisions, "at_once": at_once}

    return Arm(f"PostgreSQL, {logs} logs on one server, 1 worker each", measure, rounds=rounds)


def _record_concurrently(
    urls: list[str],
    values: list[Value],
    duration: float,
    *,
    serialised: bool = False,
    worker: Callable[[str, list[Value], float, Barrier, Connection, Lock | None], None]
    | None = None,
) -> tuple[int, float, float]:
    """Fork one ``worker`` (loom's, :func:`_worker`, unless given) per URL (``serialised``: each
    runs only while holding one shared lock).

    Returns the decisions recorded, the seconds from the start line to the last finish, and
    how many workers ran at once (see the module docstring)."""
    barrier = _FORK.Barrier(len(urls) + 1)
    lock = _FORK.Lock() if serialised else None
    pipes = []
    processes = []
    for url in urls:
        receiver, sender = _FORK.Pipe(duplex=False)
        process = _FORK.Process(
            target=worker or _worker, args=(url, values, duration, barrier, sender, lock)
        )
        process.start()
        sender.close()
        pipes.append(receiver)
        processes.append(process)
    try:
        barrier.wait(timeout=START_TIMEOUT_S)
        started = time.monotonic()
        reports = [pipe.recv() for pipe in pipes]
    finally:
        for process in processes:
            process.join(timeout=START_TIMEOUT_S)
            if process.is_alive():
                process.kill()
    errors = [report for report in reports if isinstance(report, str)]
    if errors:
        raise InstrumentError(f"scaleout: a worker failed: {errors[0]}")
    first, last = min(r[1] for r in reports), max(r[2] for r in reports)
    at_once = sum(r[2] - r[1] for r in reports) / (last - first)
    return sum(r[0] for r in reports), last - started, at_once


def _worker(
    url: str,
    values: list[Value],
    duration: float,
    barrier: Barrier,
    pipe: Connection,
    lock: Lock | None,
) -> None:
    """Record executions for ``duration`` (once it holds ``lock``, if given); send (decisions,
    monotonic start, monotonic end)."""
    report: Any
    try:
        with Loom(url) as loom:
            loom.flow(FLOW)(recording_flow(values))
            loom.log  # noqa: B018 - connect before the start line
            barrier.wait(timeout=START_TIMEOUT_S)
            with lock if lock is not None else nullcontext():
                start = time.monotonic()
                deadline = start + duration
                decisions = 0
                while time.monotonic() < deadline:
                    loom.run(FLOW, n=len(values))
                    decisions += len(values)
                report = (decisions, start, time.monotonic())
    except BaseException as exc:  # reported to the parent, which stops the run
        report = f"{type(exc).__name__}: {exc}"
    pipe.send(report)
    pipe.close()


def _recording_table(arms: list[Arm], results: Results, rounds: int) -> Table:
    capped = "".join(
        f"; {arm.name}: the first {arm.rounds} round(s) only"
        for arm in arms
        if arm.rounds is not None and arm.rounds < rounds
    )
    rows = []
    for arm in arms:
        backend = arm.name.partition(",")[0]
        one = results[f"{backend}, 1 worker"]["per_s"]
        stats = results[arm.name]["per_s"]
        rows.append(
            (
                arm.name,
                stats.cell("/s"),
                f"{stats.median / one.median:.2f}x",
                f"{results[arm.name]['at_once'].median:.2f}",
                _range(results[arm.name]["decisions"]),
            )
        )
        floor = results[arm.name].get("floor_per_s")
        if floor is not None:
            one_floor = results[f"{backend}, 1 worker"]["floor_per_s"]
            scaling = (
                f"{floor.median / one.median:.2f}x"
                if floor is one_floor
                else f"{floor.median / one_floor.median:.2f}x the floor's 1"
            )
            rows.append(
                (
                    f"floor: bare `SELECT loom_events_append(...)` per decision, {backend}, "
                    f"{arm.name.partition(', ')[2]}",
                    floor.cell("/s"),
                    scaling,
                    f"{results[arm.name]['floor_at_once'].median:.2f}",
                    "",
                )
            )
    return Table(
        title="Decisions recorded per second by concurrent worker processes: one shared log, "
        "or one log each",
        columns=(
            "backend, workers",
            "decisions/s (all workers)",
            "vs 1 worker",
            "at once",
            "decisions",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high){capped}; ratios between "
        "medians; 'at "
        "once' is how many workers ran together (module docstring); a floor runs right "
        "after the arm above it in each of its samples, by as many worker processes, on a "
        f"fresh database (target for 1 PostgreSQL worker: >= {ONE_WORKER_TARGET:,.0f}/s; 8 "
        f"workers vs 1 on one log: >= {SCALING_TARGET:g}x; both judged below)",
    )


def _scaling_table(results: Results) -> Table:
    """Both PostgreSQL targets beside the bare floor measured in the same samples: one
    worker's rate against the bare ``loom_events_append`` call's by one worker, and 8 workers
    vs 1 against the bare call's own 8-vs-1. Each gets a verdict row, so a miss is printed."""
    one, many = results["PostgreSQL, 1 worker"], results["PostgreSQL, 8 workers"]
    rate, floor = one["per_s"].median, one["floor_per_s"].median
    loom = many["per_s"].median / rate
    ceiling = many["floor_per_s"].median / floor
    return Table(
        title="PostgreSQL targets against the bare call measured beside them",
        columns=("target", "loom", "ceiling: the bare call's same figure", "verdict"),
        rows=(
            (
                f"1 worker, decisions/s: >= {ONE_WORKER_TARGET:,.0f}/s",
                f"{figure(rate)}/s",
                f"{figure(floor)}/s",
                floor_verdict(rate, ONE_WORKER_TARGET, floor, unit="/s"),
            ),
            (
                f"8 workers vs 1 on one log, decisions/s: >= {SCALING_TARGET:g}x",
                f"{loom:.2f}x",
                f"{ceiling:.2f}x",
                floor_verdict(loom, SCALING_TARGET, ceiling),
            ),
        ),
        note="medians of this run; the bare call has no loom code, one round trip per "
        "decision, so with the client and the server sharing this machine's cores its rate "
        "and its 8-vs-1 ratio are the most any client could reach here. Floor-bound: the "
        "floor misses the target and loom is within a tenth of the floor; MISSED (ceiling "
        "X): the floor misses it too, but loom is further from it (ADR 0048)",
    )


# -- replay and rebuild ---------------------------------------------------------------------


@dataclass(frozen=True)
class Fixture:
    """A log holding a synced corpus and recorded executions, kept for the rounds."""

    backend: str
    url: str
    loom: Loom
    values: list[Value]
    executions: list[UUID]
    docs: int
    corpus_events: int

    def replay_arm(self) -> Arm:
        def measure() -> Sample:
            with Loom(self.url) as loom:
                loom.flow(FLOW)(recording_flow(self.values))
                loom.log  # noqa: B018 - open the log before the clock
                started = time.perf_counter()
                results = [loom.replay(execution) for execution in self.executions]
                elapsed = time.perf_counter() - started
            if any(result.divergences for result in results):
                raise InstrumentError(f"scaleout: a timed replay diverged on {self.backend}")
            return {"per_s": len(self.values) * len(self.executions) / elapsed}

        return Arm(f"replay, {self.backend}", measure)

    def rebuild_arm(self) -> Arm:
        def measure() -> Sample:
            projection = _corpus_projection(self.loom)
            started = time.perf_counter()
            rebuild(self.loom.log, projection)
            elapsed = time.perf_counter() - started
            listed = len(open_knowledge_base(self.loom, SCOPE).list_docs())
            if listed != self.docs:
                raise InstrumentError(
                    f"scaleout: after the rebuild on {self.backend} the manifest lists "
                    f"{listed} of {self.docs} documents"
                )
            return {"per_s": self.corpus_events / elapsed, "seconds": elapsed}

        return Arm(
            f"rebuild of the corpus projection, {self.backend}",
            measure,
            rounds=POSTGRES_REBUILD_ROUNDS if self.backend == "PostgreSQL" else None,
        )


def _corpus_projection(loom: Loom) -> TrackedProjection:
    for projection in registered_projections(loom.log):
        if getattr(projection, "name", None) == "knowledge":
            return projection
    raise InstrumentError("scaleout: no projection named 'knowledge' is registered")


def _build_fixture(
    stack: ExitStack, backend: str, url: str, docs: int, values: list[Value]
) -> Fixture:
    loom = stack.enter_context(Loom(url))
    loom.flow(FLOW)(recording_flow(values))
    kb = open_knowledge_base(loom, SCOPE)
    kb.sync(base_docs(docs), source=SOURCE)
    executions = [loom.run(FLOW, n=len(values)).execution_id for _ in range(REPLAY_EXECUTIONS)]
    topics = _corpus_projection(loom).topics
    events = sum(1 for _ in loom.log.notifications(topics=topics))
    return Fixture(backend, url, loom, values, executions, docs, events)


def _throughput_table(arms: list[Arm], results: Results, rounds: int) -> Table:
    rows = []
    for arm in arms:
        stats = results[arm.name]
        unit = "events/s" if arm.name.startswith("rebuild") else "decisions/s"
        time_cell = stats["seconds"].cell(" s") if "seconds" in stats else ""
        rows.append((arm.name, f"{stats['per_s'].cell('/s')} {unit}", time_cell))
    return Table(
        title="Replay and projection rebuild throughput",
        columns=("arm", "rate", "rebuild time"),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high); the PostgreSQL rebuild in the "
        f"first {POSTGRES_REBUILD_ROUNDS} round(s) only (no verdict divides by it)",
    )


# -- contended writes -----------------------------------------------------------------------


class _Writers:
    """One zygote of the reliability worker script per contended writer, started once for
    every contended sample of the run (``reliability_worker.py zygote``: an interpreter that
    imports the script and loom once, then forks one worker per job).

    A forked child opens its own log and connections, as a fresh interpreter does (the
    zygote holds none); what it saves is an interpreter start-up and loom's imports for each
    of the writers and the audit of every sample, about a second of CPU each. The writers'
    rates are timed inside them, from the start signal, so the start-up was never in a
    figure; on 2 cores it was only in the section's time."""

    def __init__(self, stack: ExitStack, count: int) -> None:
        zygote = _reliability_worker().Zygote
        directory = stack.enter_context(scratch_directory())
        self.zygotes = []
        for number in range(count):
            scratch = directory / f"zygote{number}"
            scratch.mkdir()
            self.zygotes.append(zygote(scratch))
            stack.callback(self.zygotes[-1].close)
        self.pool = stack.enter_context(ThreadPoolExecutor(count))

    def run(self, url: str, go: Path, budget: list[str], ops: int) -> list[dict[str, Any]]:
        """Every writer forked, released together once all are ready; their reports."""
        running = [
            self.pool.submit(
                zygote.run,
                url,
                "write",
                "--worker",
                str(number),
                "--ops",
                str(ops),
                "--go",
                str(go),
                *budget,
                timeout=CONTENDED_TIMEOUT_S,
            )
            for number, zygote in enumerate(self.zygotes)
        ]
        _release(go, running)
        return [_payload(future.result(), "a contended-write worker") for future in running]

    def audit(self, url: str, reports: Path) -> Any:
        return _payload(
            self.zygotes[0].run(url, "audit-writes", str(reports), timeout=CONTENDED_TIMEOUT_S),
            "the contended-write audit",
        )


def _reliability_worker() -> ModuleType:
    """The reliability suite's worker script as a module (its siblings importable)."""
    directory = str(WORKER_SCRIPT.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return importlib.import_module(WORKER_SCRIPT.stem)


def _release(go: Path, running: list[Future[Any]]) -> None:
    """Create ``go`` once every writer is ready (or one has already ended: it reports why)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(list(go.parent.glob(f"{go.name}.ready.*"))) < len(running):
        if any(future.done() for future in running) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    go.touch()


def _payload(outcome: Any, what: str) -> Any:
    """The JSON line a worker printed last; a failure or a timeout is an instrument error."""
    if outcome.status != 0 or outcome.payload is None:
        raise InstrumentError(
            f"scaleout: {what} failed (status {outcome.status}):\n{outcome.stderr[-2000:]}"
        )
    return outcome.payload


def _contended_arm(
    writers: _Writers,
    backend: str,
    pg_url: str | None,
    *,
    ops: int,
    retry_budget: float | None = None,
) -> Arm:
    """The contended workload on a fresh database, audited by a fresh (forked) process."""

    def measure() -> Sample:
        with ExitStack() as stack:
            url = _fresh_url(stack, backend, pg_url)
            directory = stack.enter_context(scratch_directory())
            budget = [] if retry_budget is None else ["--retry-budget", str(retry_budget)]
            reports = writers.run(url, directory / "go", budget, ops)
            (directory / "reports.json").write_text(json.dumps(reports))
            audit = writers.audit(url, directory / "reports.json")
        seconds = max(report["seconds"] for report in reports)
        return {
            "per_s": CONTENDED_WORKERS * ops * 2 / seconds,
            "failures": audit["failures"],
            "lost": audit["lost"],
            "duplicated": audit["duplicated"],
            "chain_ok": float(audit["chain_ok"]),
            "violations": len(audit["violations"]),
        }

    control = "" if retry_budget is None else f", retry budget {retry_budget:g} s (control)"
    return Arm(f"contended writes, {backend}{control}", measure)


def _contention_table(arms: list[Arm], results: Results, rounds: int, ops: int) -> Table:
    rows = []
    for arm in arms:
        stats = results[arm.name]
        rows.append(
            (
                arm.name.removeprefix("contended writes, "),
                f"{sum(stats['failures'].samples):.0f}",
                f"{sum(stats['lost'].samples):.0f}",
                f"{sum(stats['duplicated'].samples):.0f}",
                "verified" if min(stats["chain_ok"].samples) == 1 else "BROKEN",
                _serial(stats["violations"]),
                stats["per_s"].cell("/s"),
            )
        )
    return Table(
        title=f"Contended writes: {CONTENDED_WORKERS} processes x {ops} syncs and "
        f"put_docs + {ops} memory appends on one scope and one key",
        columns=(
            "backend",
            "failed",
            "lost",
            "duplicated",
            "chain",
            "state vs serial replay",
            "writes/s (all workers)",
        ),
        rows=tuple(rows),
        note=f"failed/lost/duplicated: totals over {rounds} rounds of "
        f"{CONTENDED_WORKERS * ops * 2} writes each; rate: median (low-high)",
    )


def _serial(violations: Stats) -> str:
    """Whether every round's corpus and memory equalled a replay of its log in order."""
    broken = sum(count > 0 for count in violations.samples)
    return "equal" if broken == 0 else f"DIFFERENT in {broken} round(s)"


# -- control --------------------------------------------------------------------------------


def _unshared_arm(values: list[Value], duration: float, *, serialised: bool = False) -> Arm:
    """CONTROL_WORKERS workers on their own SQLite files; ``serialised``: one at a time."""

    def measure() -> Sample:
        with scratch_directory() as directory:
            urls = [f"sqlite:///{directory / f'worker{n}.db'}" for n in range(CONTROL_WORKERS)]
            for url in urls:
                with Loom(url) as loom:
                    loom.log  # noqa: B018 - the schema, before the workers start
            decisions, seconds, at_once = _record_concurrently(
                urls, values, duration, serialised=serialised
            )
        return {"per_s": decisions / seconds, "decisions": decisions, "at_once": at_once}

    name = f"SQLite, {CONTROL_WORKERS} workers, one file each"
    return Arm(f"{name}, serialised by one lock (control)" if serialised else name, measure)


def _range(stats: Stats) -> str:
    low, high = min(stats.samples), max(stats.samples)
    return f"{low:,.0f}" if low == high else f"{low:,.0f}-{high:,.0f}"
