"""Concurrent flows in one process on SQLite at ``synchronous=FULL`` (ADR 0036: group commit).

One ``Loom`` on a fresh file; ``flows`` threads each record executions of the runtime workload
until each has made ``decisions`` decisions. The aggregate rate is all decisions over the time
from the start barrier to the last thread's end. Alongside it, the arm counts the appends the
recorder was asked for and the transactions it committed: their ratio is how many appends
shared each commit (each fsync), a figure the machine's load does not change the meaning of.

The one-flow arm also times, right after itself in the same sample and on the same disk, the
**bare commit floor**: Python's ``sqlite3`` alone, a table shaped like loom's, one ``BEGIN``,
``INSERT`` of a decision's ~1 KB and ``COMMIT`` at ``synchronous=FULL`` (WAL) per decision.
One sequential flow must wait for its own fsync per decision (ADR 0002), so this is the least
a durable ``decide`` can cost; the table gives loom's time per decision over it.

Beside it, the **same rows' floor**: bare ``sqlite3`` writing exactly the rows loom stored in
the timed run (each event row, in loom's own table with its primary-key index, and its chain
row with the chain's index; the same bytes, read back from loom's file), one ``BEGIN``, two
``INSERT`` statements and a ``COMMIT`` per event, as loom commits them, into a file made by
loom's own ``CREATE`` statements and holding the rows loom had before the clock. Its time over
the bare floor is what a hash-chained, versioned event costs the disk (bytes, pages, the
execution's own start and end commits); loom's time over it is loom's own CPU.

Each arm also times the **bare group commit**: as many threads appending rows through loom's
own :class:`~loom_runtime.storage.group_commit.GroupCommit` into bare ``sqlite3``, no other loom
code. Its 8-vs-1 ratio is the most grouping can gain on this disk's fsync and these cores when
a thread spends only sqlite3's CPU per append; the "8 flows vs 1" target is judged against it.

Negative controls: one flow has nothing to share a commit with, so its appends per commit must
be exactly 1. Above 1, a ``decide`` would have returned before its own decision was committed.
The same rows' floor must store exactly the event and chain rows loom stored, with the same
ids, in exactly as many commits as loom made: fewer rows or commits would flatter the floor.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Results,
    Sample,
    Table,
    floor_verdict,
    ratio,
)
from benchmarks.stores import fresh_sqlite
from benchmarks.workload import FLOW, Value, recording_flow
from loom_runtime import Loom
from loom_runtime.storage.chain import CHAIN_TABLE
from loom_runtime.storage.group_commit import GroupCommit, Pending

EVENTS = "stored_events"
"""loom's events table in a SQLite file (eventsourcing's default name)."""

FLOWS = 8
SCALING_TARGET = 6.0
"""8 concurrent flows against 1, aggregate decisions/s."""
ONE_FLOW_TARGET = 1.3
"""One FULL flow's time per decision, at most this times the bare commit's (ADR 0048)."""
DECISIONS_PER_EXECUTION = 25
START_TIMEOUT_S = 60.0


def arm(flows: int, values: list[Value], decisions: int) -> Arm:
    """``flows`` threads sharing one log, ``decisions`` decisions each."""

    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            with Loom(url, sqlite_synchronous="FULL") as loom:
                loom.flow(FLOW)(recording_flow(values))
                loom.run(FLOW, n=1)  # the schema and the first connection, before the clock
                before = last_event_id(path)
                with counted(loom) as counts:
                    seconds = _record(loom, flows, decisions)
                if not loom.log.verify().ok:
                    raise InstrumentError(f"group commit: the chain of the {flows}-flow arm broke")
            stored = StoredRows.read(path, before) if flows == 1 else None
        sample = {
            "per_s": flows * decisions / seconds,
            "appends_per_commit": counts["appends"] / counts["commits"],
        }
        if stored is not None:
            floor = _bare_commit_seconds(values, decisions)
            sample["floor_per_s"] = decisions / floor
            sample["vs_floor"] = seconds / floor
            rows_floor, commits_matched = same_rows_seconds(stored, counts["commits"])
            sample["rows_floor_per_s"] = decisions / rows_floor
            sample["rows_floor_vs_floor"] = rows_floor / floor
            sample["vs_rows_floor"] = seconds / rows_floor
            sample["rows_floor_matched"] = float(commits_matched)
        grouped, per_commit = _bare_grouped_seconds(values, flows, decisions)
        sample["grouped_floor_per_s"] = flows * decisions / grouped
        sample["grouped_floor_per_commit"] = per_commit
        return sample

    return Arm(f"builtin, SQLite, FULL, {flows} flow{'s' if flows > 1 else ''}", measure)


def _record(loom: Loom, flows: int, decisions: int) -> float:
    def flow() -> None:
        for _ in range(decisions // DECISIONS_PER_EXECUTION):
            loom.run(FLOW, n=DECISIONS_PER_EXECUTION)

    return _run_together(flow, flows, "a flow")


def _run_together(flow: Callable[[], None], flows: int, what: str) -> float:
    """Run ``flow`` on ``flows`` threads released together by a barrier; the seconds from the
    release to the last thread's end. A thread's failure stops the run."""
    barrier = threading.Barrier(flows + 1)
    errors: list[BaseException] = []
    ends: list[float] = []

    def timed() -> None:
        try:
            barrier.wait(START_TIMEOUT_S)
            flow()
            ends.append(time.monotonic())
        except BaseException as exc:  # reported below, which stops the run
            errors.append(exc)

    threads = [threading.Thread(target=timed) for _ in range(flows)]
    for thread in threads:
        thread.start()
    barrier.wait(START_TIMEOUT_S)
    started = time.monotonic()
    for thread in threads:
        thread.join()
    if errors:
        raise InstrumentError(f"group commit: {what} failed: {errors[0]!r}")
    return max(ends) - started


def _bare_commit_seconds(values: list[Value], decisions: int) -> float:
    """Seconds for ``decisions`` durable single-row commits with no loom code (the floor)."""
    stream = uuid.uuid4().hex
    with _bare_table(values) as (connection, states):
        started = time.monotonic()
        for version in range(1, decisions + 1):
            connection.execute("BEGIN")
            connection.execute(
                "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
                (stream, version, "decision", states[version % len(states)]),
            )
            connection.execute("COMMIT")
        return time.monotonic() - started


def last_event_id(path: Path) -> int:
    """The highest event id in loom's file (what was stored before the clock; 0 if none)."""
    connection = sqlite3.connect(path)
    try:
        (last,) = connection.execute(f"SELECT max(rowid) FROM {EVENTS}").fetchone()
        return int(last or 0)
    finally:
        connection.close()


@dataclass(frozen=True)
class StoredRows:
    """What loom's file holds: its ``CREATE`` statements, and its event and chain rows up to
    and after the clock started (``before``: the last event id stored before it)."""

    schema: tuple[str, ...]
    events_before: tuple[tuple[Any, ...], ...]
    links_before: tuple[tuple[Any, ...], ...]
    events: tuple[tuple[Any, ...], ...]
    links: tuple[tuple[Any, ...], ...]

    @classmethod
    def read(cls, path: Path, before: int) -> StoredRows:
        connection = sqlite3.connect(path)
        try:
            schema = tuple(
                sql
                for (sql,) in connection.execute(
                    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
                )
            )
            events = connection.execute(
                f"SELECT rowid, originator_id, originator_version, topic, state FROM {EVENTS} "
                "ORDER BY rowid"
            ).fetchall()
            links = connection.execute(
                f"SELECT * FROM {CHAIN_TABLE} ORDER BY notification_id"
            ).fetchall()
        finally:
            connection.close()
        split = sum(1 for event in events if event[0] <= before)
        return cls(
            schema=schema,
            events_before=tuple(events[:split]),
            links_before=tuple(links[:split]),
            events=tuple(events[split:]),
            links=tuple(links[split:]),
        )


def same_rows_seconds(
    stored: StoredRows,
    loom_commits: int,
    *,
    synchronous: str = "FULL",
    clock: Callable[[], float] = time.monotonic,
    before_each: Callable[[int], object] | None = None,
) -> tuple[float, bool]:
    """Seconds for bare ``sqlite3`` to write the rows loom stored after the clock started, an
    event row and its chain row per transaction at ``synchronous`` (FULL unless given), into
    a file made by loom's own statements and holding loom's rows from before the clock; and
    whether it wrote exactly loom's rows (the same ids, both tables) in exactly as many
    commits as loom made.

    ``clock``: wall clock unless given (``time.process_time`` for CPU). ``before_each(i)``
    runs, timed, before the ``i``-th transaction: the work a recorder cannot avoid between
    two commits (the encryption section's ciphers), done where a recording does it.

    The event's id is not given: SQLite assigns it as it does for loom's ``INSERT``."""
    insert_event = f"INSERT INTO {EVENTS} VALUES (?, ?, ?, ?)"
    insert_link = f"INSERT INTO {CHAIN_TABLE} VALUES (?, ?, ?, ?, ?)"
    with fresh_sqlite() as (_, path):
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={synchronous}")
            connection.execute("BEGIN")
            for statement in stored.schema:
                connection.execute(statement)
            connection.executemany(
                f"INSERT INTO {EVENTS} (rowid, originator_id, originator_version, topic, state) "
                "VALUES (?, ?, ?, ?, ?)",
                stored.events_before,
            )
            connection.executemany(insert_link, stored.links_before)
            connection.execute("COMMIT")
            commits = 0
            started = clock()
            for event, link in zip(stored.events, stored.links, strict=True):
                if before_each is not None:
                    before_each(commits)
                connection.execute("BEGIN")
                connection.execute(insert_event, event[1:])
                connection.execute(insert_link, link)
                connection.execute("COMMIT")
                commits += 1
            seconds = clock() - started
            written = (
                connection.execute(
                    f"SELECT rowid, originator_id, originator_version, topic, state FROM {EVENTS} "
                    "ORDER BY rowid"
                ).fetchall(),
                connection.execute(
                    f"SELECT * FROM {CHAIN_TABLE} ORDER BY notification_id"
                ).fetchall(),
            )
        finally:
            connection.close()
    expected = (
        [*stored.events_before, *stored.events],
        [*stored.links_before, *stored.links],
    )
    return seconds, written == expected and commits == loom_commits


@contextmanager
def _bare_table(values: list[Value]) -> Iterator[tuple[sqlite3.Connection, list[bytes]]]:
    """A fresh file with a table shaped like loom's, WAL, ``synchronous=FULL``, autocommit."""
    with fresh_sqlite() as (_, path):
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute(
                "CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
                "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
            )
            yield connection, [msgspec.json.encode(value) for value in values]
        finally:
            connection.close()


def _bare_grouped_seconds(values: list[Value], flows: int, decisions: int) -> tuple[float, float]:
    """The group-commit ceiling: ``flows`` threads each appending ``decisions`` rows through
    loom's own :class:`GroupCommit` (the same grouping: leader and followers, the adaptive
    wait) into bare ``sqlite3``, one ``BEGIN``, ``INSERT`` per row, ``COMMIT`` per group.

    No loom code runs per append, so each thread's CPU between two commits is the least any
    recorder spends here; what grouping gains over one thread at that cost is the most it can
    gain on this machine's fsync and cores. Returns the seconds from the start barrier to the
    last thread's end and the appends per commit."""
    with _bare_table(values) as (connection, states):
        commits = 0

        def commit(group: Sequence[Pending[tuple[str, int, bytes], None]]) -> None:
            nonlocal commits
            connection.execute("BEGIN")
            for member in group:
                stream, version, state = member.work
                connection.execute(
                    "INSERT INTO stored_events VALUES (?, ?, 'decision', ?)",
                    (stream, version, state),
                )
            connection.execute("COMMIT")
            commits += 1

        grouped: GroupCommit[tuple[str, int, bytes], None] = GroupCommit(commit)

        def flow() -> None:
            stream = uuid.uuid4().hex
            for version in range(1, decisions + 1):
                grouped.submit((stream, version, states[version % len(states)]))

        seconds = _run_together(flow, flows, "a bare flow")
        (rows,) = connection.execute("SELECT count(*) FROM stored_events").fetchone()
        if rows != flows * decisions:
            raise InstrumentError(f"group commit: the bare floor stored {rows} rows")
        return seconds, rows / commits


@contextmanager
def counted(loom: Loom) -> Iterator[dict[str, int]]:
    """Count the appends the recorder is asked for and the transactions it commits."""
    recorder: Any = loom.log.application.recorder  # type: ignore[attr-defined]
    counts = {"appends": 0, "commits": 0}
    submit, writing = recorder.group_commit.submit, recorder.writing

    def counted_submit(work: Any) -> Any:
        counts["appends"] += 1  # under the GIL; an exact count is all that is needed
        return submit(work)

    @contextmanager
    def counted_writing() -> Iterator[Any]:
        with writing() as cursor:
            yield cursor
        counts["commits"] += 1

    recorder.group_commit.submit = counted_submit
    recorder.writing = counted_writing
    try:
        yield counts
    finally:
        del recorder.group_commit.submit, recorder.writing


def table(one: Arm, many: Arm, results: Results, rounds: int) -> Table:
    single = results[one.name]
    rows = [
        (
            arm.name,
            results[arm.name]["per_s"].cell("/s"),
            ratio(results[arm.name]["per_s"], single["per_s"]),
            results[arm.name]["appends_per_commit"].cell(),
            single["vs_floor"].cell("x") if arm is one else "",
            single["vs_rows_floor"].cell("x") if arm is one else "",
        )
        for arm in (one, many)
    ]
    rows += [
        (
            "floor: bare sqlite3 INSERT + COMMIT, FULL, 1 writer",
            single["floor_per_s"].cell("/s"),
            ratio(single["floor_per_s"], single["per_s"]),
            "1",
            "1x",
            "",
        ),
        (
            "floor: the rows loom stores (event and chain rows, their indexes, same bytes), "
            "bare sqlite3, FULL, 1 writer",
            single["rows_floor_per_s"].cell("/s"),
            ratio(single["rows_floor_per_s"], single["per_s"]),
            "1",
            single["rows_floor_vs_floor"].cell("x"),
            "1x",
        ),
    ]
    many_stats = results[many.name]
    for arm, stats in ((one, single), (many, many_stats)):
        grouped = stats["grouped_floor_per_s"]
        rows.append(
            (
                "floor: bare sqlite3 through the same group commit, FULL, "
                + arm.name.rpartition(", ")[2],
                grouped.cell("/s"),
                ratio(grouped, single["per_s"])
                if arm is one
                else f"{ratio(grouped, single['grouped_floor_per_s'])} the floor's 1",
                stats["grouped_floor_per_commit"].cell(),
                "",
                "",
            )
        )
    return Table(
        title="Concurrent flows in one process, SQLite at synchronous=FULL (group commit)",
        columns=(
            "arm",
            "decisions/s (all flows)",
            "vs 1 flow",
            "appends per commit",
            "time per decision vs floor",
            "vs the same rows' floor",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high); each decide returns only "
        "after the commit holding its decision; each floor runs right after the arm of as "
        f"many flows in each of its samples (target for 1 flow: <= {ONE_FLOW_TARGET:g}x; 8 "
        f"flows vs 1: >= {SCALING_TARGET:g}x, both judged below). The same rows' floor "
        "writes, with no loom code, exactly "
        "the event and chain rows loom stored (its execution's start and end events "
        "included), so its time over the bare floor is what the disk charges for a chained, "
        "versioned event and loom's time over it is loom's own CPU (ADR 0048)",
    )


def scaling_table(one: Arm, many: Arm, results: Results) -> Table:
    """Both targets beside the floors measured in the same samples: one flow's time per
    decision over the bare commit against the same rows' floor's (the least any recorder of
    loom's rows pays on this disk), and 8 flows vs 1 against the bare group commit's own
    8-vs-1 (the most grouping gains here). Each gets a verdict row, so a miss is printed."""
    single, grouped = results[one.name], results[many.name]
    one_flow = single["vs_floor"].median
    rows_floor = single["rows_floor_vs_floor"].median
    loom = grouped["per_s"].median / single["per_s"].median
    ceiling = grouped["grouped_floor_per_s"].median / single["grouped_floor_per_s"].median
    return Table(
        title="SQLite FULL targets against the floors measured beside them",
        columns=("target", "loom", "ceiling: the floor's same figure", "verdict"),
        rows=(
            (
                f"1 flow, time per decision over the bare commit: <= {ONE_FLOW_TARGET:g}x "
                "(ceiling: the same rows' floor over it)",
                f"{one_flow:.2f}x",
                f"{rows_floor:.2f}x",
                floor_verdict(one_flow, ONE_FLOW_TARGET, rows_floor, at_most=True),
            ),
            (
                f"{FLOWS} flows vs 1, decisions/s: >= {SCALING_TARGET:g}x (ceiling: the bare "
                f"group commit, {FLOWS} writers vs 1)",
                f"{loom:.2f}x",
                f"{ceiling:.2f}x",
                floor_verdict(loom, SCALING_TARGET, ceiling),
            ),
        ),
        note="medians of this run's samples; the 1-flow ratios are per sample (loom's time, "
        "and the same rows' floor's, over the bare commit timed right after it); the bare "
        "writers share commits exactly as loom's flows do but spend only sqlite3's CPU per "
        "append, and one process's threads run Python one at a time (the GIL), so their "
        "ratio is the most grouping gains on this disk and these cores. Floor-bound: the "
        "floor misses the target and loom is within a tenth of the floor; MISSED (ceiling "
        "X): the floor misses it too, but loom is further from it (ADR 0048)",
    )


def control(one: Arm, results: Results) -> Control:
    shared = max(results[one.name]["appends_per_commit"].samples)
    bare = max(results[one.name]["grouped_floor_per_commit"].samples)
    return Control(
        name="one flow's appends per commit, loom's and the bare floor's (neither has anything "
        "to share a commit with)",
        expected="exactly 1 each (more would mean an append returned before its own commit)",
        observed=f"loom {shared:.2f}, bare {bare:.2f} at most",
        held=shared == 1 and bare == 1,
    )


def rows_floor_control(one: Arm, results: Results) -> Control:
    """The same rows' floor wrote exactly loom's rows, in exactly loom's number of commits."""
    matched = min(results[one.name]["rows_floor_matched"].samples)
    return Control(
        name="the same rows' floor wrote loom's event and chain rows (same ids and bytes) in "
        "as many commits as loom made",
        expected="in every sample (fewer rows or commits would flatter the floor)",
        observed="every sample" if matched == 1 else "not in some sample",
        held=matched == 1,
    )
