"""The measuring instrument every section shares: interleaved rounds, medians, tables, controls.

Why interleaved rounds: on a shared 2-core machine background load drifts during a run.
Measuring arm A's rounds and then arm B's would hand that drift to whichever arm ran in the
slow minute. Each round runs every arm once, in an order rotated per round; a figure is the
median over rounds, shown with its range so that noise is visible instead of hidden. Ratios
are taken between medians of arms measured in the same run.

Why negative controls: an instrument that can only report good news proves nothing. A
:class:`Control` is a deliberately broken arm whose result must stay bad; if it ever looks
good the instrument broke, and the command refuses to publish its figures.
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import shutil
import sqlite3
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from time import perf_counter

import msgspec

Sample = Mapping[str, float]
"""One measurement of one arm: metric name -> value (e.g. ``{"record_per_s": 8123.0}``)."""

Progress = Callable[[str], None]
"""Told what is about to be measured, so a long run shows where it is."""


class InstrumentError(RuntimeError):
    """The harness measured something other than what it claims (e.g. a replay diverged)."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What one invocation of ``python -m benchmarks`` asked for."""

    quick: bool
    rounds: int
    pg_url: str | None
    """An admin URL of a PostgreSQL server (``LOOM_TEST_PG_URL``), or None to skip PG arms."""


@dataclass(frozen=True)
class Arm:
    """One configuration under test; ``measure`` runs it once from scratch and reports a Sample."""

    name: str
    measure: Callable[[], Sample]
    rounds: int | None = None
    """The most rounds this arm runs (None: every round). For an arm whose samples barely
    move but each cost many seconds: its first rounds still interleave with the cheap arms
    it is compared with, which keep every round."""


@dataclass(frozen=True)
class Stats:
    """Every round's value of one metric of one arm."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def cell(self, unit: str = "") -> str:
        """``median (low-high)``, the form every table uses, e.g. ``8,396/s (7,912-9,201)``."""
        low, high = min(self.samples), max(self.samples)
        return f"{figure(self.median)}{unit} ({figure(low)}-{figure(high)})"


Results = dict[str, dict[str, Stats]]
"""arm name -> metric name -> Stats."""


@dataclass
class SampleClock:
    """Wall seconds spent inside the arms' samples that :func:`interleave` ran, summed.

    Why: a section's time is its samples plus whatever it does around them (fixtures built,
    databases made, workers waited for, checks and controls). Only the second part can be
    cut without losing a figure, so the report shows how much of each section it is (ADR
    0063). A sample's own untimed preparation (its fresh database, its workers' start-up)
    counts as sample: it is paid per sample, as the sample count says."""

    seconds: float = 0.0


SAMPLE_CLOCK = SampleClock()
"""The run's clock of sample time (see :class:`SampleClock`)."""


def interleave(arms: Sequence[Arm], *, rounds: int, progress: Progress) -> Results:
    """Run every arm once per round, rotating the order each round; collect every sample.

    Each sample starts without the previous one's garbage (``gc.collect()``, untimed). What
    the arms were built from (corpora, fixtures, models) is frozen first (``gc.freeze()``):
    else every one of those collections walked all of it again, 50-170 ms a sample with the
    manuals in memory, some 400 samples a run (ADR 0063). It is unfrozen when the rounds end,
    so whatever of it becomes garbage afterwards is collected as before, unless the caller
    had frozen objects first: Python cannot unfreeze only ours, and unfreezing all of them
    undid the test session's freeze of everything collection built (ADR 0054)."""
    collected: dict[str, dict[str, list[float]]] = {arm.name: {} for arm in arms}
    frozen_before = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    try:
        for round_index in range(rounds):
            shift = round_index % len(arms)
            for arm in [*arms[shift:], *arms[:shift]]:
                if arm.rounds is not None and round_index >= arm.rounds:
                    continue
                progress(f"round {round_index + 1}/{rounds}: {arm.name}")
                gc.collect()  # start each sample without the previous one's garbage
                started = perf_counter()
                sample = arm.measure()
                SAMPLE_CLOCK.seconds += perf_counter() - started
                for metric, value in sample.items():
                    collected[arm.name].setdefault(metric, []).append(value)
    finally:
        if not frozen_before:
            gc.unfreeze()
    return {
        arm: {metric: Stats(tuple(values)) for metric, values in metrics.items()}
        for arm, metrics in collected.items()
    }


def ratio(numerator: Stats, denominator: Stats) -> str:
    """The ratio of two medians, as a table cell (``3.4x``)."""
    return f"{numerator.median / denominator.median:.2f}x"


NEAR_FLOOR = 0.9
"""How close to its floor loom must be for a missed target to read floor-bound: at least this
share of the floor's figure for an at-least target, at most its inverse times the floor's for
an at-most one."""


def floor_verdict(
    measured: float,
    target: float,
    ceiling: float,
    *,
    at_most: bool = False,
    unit: str = "x",
) -> str:
    """The verdict on a target whose floor was measured in the same run.

    ``ceiling`` is the same figure for the floor (the same work with no loom code): the best
    any code can reach here. A target missed while the floor reaches it is loom's miss,
    **MISSED**. A target the floor misses too cannot be met on this machine, but that does
    not make loom's own miss the machine's: only loom at its floor (>= ``NEAR_FLOOR`` x the
    ceiling) is **floor-bound**; loom far below a ceiling short of the target (1.83x of a
    3.62x ceiling) is **MISSED (ceiling X)**, the ceiling beside it. ``at_most``: a cost that
    must stay at most ``target`` (lower is better), judged by the mirror rule. ``unit`` follows
    the ceiling's figure (``x`` for ratios, ``/s`` for rates)."""
    if measured <= target if at_most else measured >= target:
        return "met"
    if ceiling <= target if at_most else ceiling >= target:
        return "MISSED"
    near = measured * NEAR_FLOOR <= ceiling if at_most else measured >= NEAR_FLOOR * ceiling
    bound = f"(ceiling {figure(ceiling)}{unit})"
    return f"floor-bound {bound}" if near else f"MISSED {bound}"


@contextmanager
def scratch_directory() -> Iterator[Path]:
    """A fresh ``mktemp -d`` directory, deleted afterwards: no sample sees another's files."""
    path = Path(tempfile.mkdtemp(prefix="loom-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def spawned(workers: int = 1) -> Iterator[ProcessPoolExecutor]:
    """Worker processes started fresh (``spawn``: nothing of this process's state in them), for
    untimed preparation that can run beside this process's own untimed work. A section must
    collect every result before its first timed round: nothing is timed while they run.
    Their CPU is counted in the section's, as children this process waited for."""
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        yield pool


def fingerprint(*inputs: object) -> str:
    """A content hash of everything a fixture is built from (msgspec-encodable values): two
    fixtures with the same fingerprint were built from the same inputs, so a snapshot kept
    under it cannot be a stale one."""
    return hashlib.sha256(msgspec.json.encode(inputs)).hexdigest()


class Snapshots:
    """SQLite databases one section built, kept for a later section of the same run that
    needs the same state, under the :func:`fingerprint` of what they were built from.

    A build is minutes of untimed work the run would otherwise pay twice (ten thousand
    documents synced, say). The later section restores a copy into its own fresh file, so
    nothing it does reaches the kept one or the section that made it; without a snapshot (the
    section run alone, or the inputs differ) it builds its own. Copies are taken with SQLite's
    backup API: a consistent state even while the builder still holds the database open. The
    files live in a scratch directory deleted when the process exits."""

    def __init__(self) -> None:
        self._directory: Path | None = None
        self._kept: dict[str, Path] = {}

    def keep(self, key: str, database: Path) -> None:
        """Copy ``database`` as it is now, under ``key`` (a later ``keep`` replaces it)."""
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="loom-bench-snapshots-"))
            atexit.register(shutil.rmtree, self._directory, ignore_errors=True)
        target = self._directory / f"{key}.db"
        target.unlink(missing_ok=True)
        _copy_sqlite(database, target)
        self._kept[key] = target

    def restore(self, key: str, database: Path) -> bool:
        """Write the database kept under ``key`` to ``database``; False if none was kept."""
        kept = self._kept.get(key)
        if kept is None:
            return False
        _copy_sqlite(kept, database)
        return True


SNAPSHOTS = Snapshots()
"""The run's snapshots (see :class:`Snapshots`)."""


def _copy_sqlite(source: Path, target: Path) -> None:
    with (
        closing(sqlite3.connect(source)) as reader,
        closing(sqlite3.connect(target)) as writer,
    ):
        reader.backup(writer)


@dataclass(frozen=True)
class Table:
    """A titled table of already formatted cells, rendered both to the terminal and markdown."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Control:
    """A negative control: a deliberately broken arm and whether its result stayed bad."""

    name: str
    expected: str
    observed: str
    held: bool


@dataclass(frozen=True, kw_only=True)
class SectionResult:
    """What a section measured: prose first, then tables, then its negative controls."""

    notes: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    controls: tuple[Control, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Section:
    """A heading of docs/benchmarks.md; ``run`` is None while nothing measures it yet."""

    name: str
    title: str
    run: Callable[[Settings, Progress], SectionResult] | None = field(default=None)


def figure(value: float) -> str:
    """A figure as every table writes it: whole from 100 (thousands separated), one decimal
    from 10, two below (``8,396``, ``95.1``, ``2.26``)."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
