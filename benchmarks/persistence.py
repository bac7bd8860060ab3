"""Section "persistence" (ADR 0001): which eventsourcing persistence module, which durability.

The runtime section's workload through every configuration ADR 0001 chooses between: the
built-in ``eventsourcing.sqlite`` module against ``eventsourcing-sqlalchemy`` on the same
SQLite file, ``synchronous=NORMAL`` against ``FULL`` on the built-in, and, when
``LOOM_TEST_PG_URL`` names a server, the built-in ``eventsourcing.postgres`` against
``eventsourcing-sqlalchemy`` on PostgreSQL. All arms run interleaved in one set of rounds, so
every ratio compares figures measured side by side.

The ``synchronous`` each SQLite arm actually runs with is asked, in every sample, of the
connection its timed appends were committed on (after the clock, before that ``Loom``
closes) and printed: comparing a NORMAL arm with a FULL one measures fsync, not persistence
modules, so the like-for-like ratio pairs arms by the level in effect.

Negative control: the FULL arm's write connection must have run at FULL and the NORMAL arm's
at NORMAL in every sample, and FULL (an fsync per commit) must not come out faster than
NORMAL by more than noise. Speed alone cannot hold it: a FULL setting silently dropped
records at NORMAL's speed (a ratio of 1.0, within the noise), and on tmpfs an fsync is free.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks import group_commit
from benchmarks.harness import (
    Arm,
    Control,
    Progress,
    Results,
    Sample,
    SectionResult,
    Settings,
    Stats,
    Table,
    interleave,
    ratio,
)
from benchmarks.stores import (
    fresh_postgres,
    fresh_sqlite,
    postgres_description,
    sqlite_bytes,
    synchronous_name,
    writer_synchronous,
)
from benchmarks.workload import Value, make_values, record_and_replay
from loom_runtime import Loom
from loom_runtime.log import Persistence, Synchronous

DECISIONS = 2_000
QUICK_DECISIONS = 500
FLOW_DECISIONS = 250
QUICK_FLOW_DECISIONS = 100
"""Per flow, in the concurrent-flows arms (a multiple of the 25 decisions of an execution)."""
NOISE = 1.25
"""FULL may come out up to 25% faster than NORMAL by chance (e.g. on tmpfs, where both are
free), never more."""


@dataclass(frozen=True)
class Config:
    """One arm: a database kind, a persistence module and the synchronous level asked for."""

    database: str
    persistence: Persistence
    synchronous: Synchronous = "NORMAL"

    @property
    def name(self) -> str:
        if self.database == "PostgreSQL":
            return f"{self.persistence}, PostgreSQL"
        return f"{self.persistence}, SQLite, {self.synchronous}"


BUILTIN_NORMAL = Config("SQLite", "builtin", "NORMAL")
BUILTIN_FULL = Config("SQLite", "builtin", "FULL")
SQLALCHEMY = Config("SQLite", "sqlalchemy", "NORMAL")
PG_BUILTIN = Config("PostgreSQL", "builtin")
PG_SQLALCHEMY = Config("PostgreSQL", "sqlalchemy")


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Measure every configuration side by side, derive the ratios, check the control."""
    decisions = QUICK_DECISIONS if settings.quick else DECISIONS
    values = make_values(decisions)
    configs = [BUILTIN_NORMAL, BUILTIN_FULL, SQLALCHEMY]
    notes = [
        f"Each arm records the runtime workload ({decisions:,} decisions of ~1 KB) in a fresh "
        "database, then replays it from a second `Loom`. Ratios are between medians.",
    ]
    if settings.pg_url is None:
        notes.append(
            "PostgreSQL rows skipped: LOOM_TEST_PG_URL is not set. Run the command under "
            "`scripts/with-postgres` to include them."
        )
    else:
        configs += [PG_BUILTIN, PG_SQLALCHEMY]
        notes.append(
            f"PostgreSQL server: {postgres_description(settings.pg_url)} (one new database per "
            "sample). With fsync off these rows compare the modules' own costs, not disks."
        )
    arms = [_arm(config, values, settings.pg_url) for config in configs]
    flow_decisions = QUICK_FLOW_DECISIONS if settings.quick else FLOW_DECISIONS
    flow_values = make_values(group_commit.DECISIONS_PER_EXECUTION)
    one_flow = group_commit.arm(1, flow_values, flow_decisions)
    many_flows = group_commit.arm(group_commit.FLOWS, flow_values, flow_decisions)
    results = interleave([*arms, one_flow, many_flows], rounds=settings.rounds, progress=progress)
    in_effect = {config: _synchronous_in_effect(config, results) for config in configs}
    return SectionResult(
        notes=tuple(notes),
        tables=(
            _figures(configs, in_effect, results, settings.rounds),
            _ratios(configs, in_effect, results),
            group_commit.table(one_flow, many_flows, results, settings.rounds),
            group_commit.scaling_table(one_flow, many_flows, results),
        ),
        controls=(
            _full_not_faster(results),
            group_commit.control(one_flow, results),
            group_commit.rows_floor_control(one_flow, results),
        ),
    )


def _arm(config: Config, values: list[Value], pg_url: str | None) -> Arm:
    def measure() -> Sample:
        if config.database == "PostgreSQL":
            assert pg_url is not None
            with fresh_postgres(pg_url) as url:
                return record_and_replay(url, values, persistence=config.persistence)
        levels: list[int] = []

        def ask(loom: Loom) -> None:
            levels.append(writer_synchronous(loom))

        with fresh_sqlite() as (url, path):
            sample = dict(
                record_and_replay(
                    url,
                    values,
                    persistence=config.persistence,
                    synchronous=config.synchronous,
                    observe=ask,
                )
            )
            sample["bytes_per_decision"] = sqlite_bytes(path) / len(values)
        sample["synchronous"] = float(levels[0])
        return sample

    return Arm(config.name, measure)


def _synchronous_in_effect(config: Config, results: Results) -> str:
    """What the arm's timed write connections ran with, over its samples (``a/b`` if they
    differed between samples, which the control below fails for the builtin arms)."""
    if config.database == "PostgreSQL":
        return "n/a"
    return _levels(results[config.name]["synchronous"])


def _figures(
    configs: list[Config], in_effect: dict[Config, str], results: Results, rounds: int
) -> Table:
    rows = []
    for config in configs:
        stats = results[config.name]
        size = stats.get("bytes_per_decision")
        rows.append(
            (
                config.name,
                config.synchronous if config.database == "SQLite" else "n/a",
                in_effect[config],
                stats["record_per_s"].cell("/s"),
                stats["replay_per_s"].cell("/s"),
                size.cell() if size else "n/a",
            )
        )
    return Table(
        title="The same workload through each persistence configuration",
        columns=(
            "arm",
            "synchronous asked",
            "synchronous in effect",
            "recorded/s",
            "replayed/s",
            "log bytes/decision",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high)",
    )


def _ratios(configs: list[Config], in_effect: dict[Config, str], results: Results) -> Table:
    def pair(label: str, better: Config, worse: Config, metric: str) -> tuple[str, str]:
        return label, ratio(results[better.name][metric], results[worse.name][metric])

    same_class = BUILTIN_FULL if in_effect[SQLALCHEMY] == "FULL" else BUILTIN_NORMAL
    rows = [
        pair(
            "recording, loom's default (builtin, NORMAL) / sqlalchemy",
            BUILTIN_NORMAL,
            SQLALCHEMY,
            "record_per_s",
        ),
        pair(
            f"recording, same synchronous in effect ({in_effect[SQLALCHEMY]}): "
            "builtin / sqlalchemy",
            same_class,
            SQLALCHEMY,
            "record_per_s",
        ),
        pair("replay, builtin / sqlalchemy (SQLite)", BUILTIN_NORMAL, SQLALCHEMY, "replay_per_s"),
        pair(
            "recording, NORMAL / FULL (builtin): the cost of FULL",
            BUILTIN_NORMAL,
            BUILTIN_FULL,
            "record_per_s",
        ),
    ]
    if PG_BUILTIN in configs:
        rows += [
            pair(
                "recording, builtin / sqlalchemy (PostgreSQL)",
                PG_BUILTIN,
                PG_SQLALCHEMY,
                "record_per_s",
            ),
            pair(
                "replay, builtin / sqlalchemy (PostgreSQL)",
                PG_BUILTIN,
                PG_SQLALCHEMY,
                "replay_per_s",
            ),
        ]
    return Table(
        title="Ratios (above 1: the first arm is faster)",
        columns=("comparison", "ratio of medians"),
        rows=tuple(rows),
    )


def _full_not_faster(results: Results) -> Control:
    """FULL in effect on the FULL arm's own writer and NORMAL on the NORMAL arm's, in every
    sample, and FULL no faster than NORMAL beyond noise."""
    full, normal = results[BUILTIN_FULL.name], results[BUILTIN_NORMAL.name]
    speed = full["record_per_s"].median / normal["record_per_s"].median
    in_effect = _levels(full["synchronous"]), _levels(normal["synchronous"])
    return Control(
        name="recording with synchronous=FULL against NORMAL (builtin, SQLite)",
        expected="each arm's own write connection at the level it asked, in every sample; "
        f"FULL/NORMAL <= {NOISE:.2f} (an fsync per commit is never free)",
        observed=f"writers at {in_effect[0]} and {in_effect[1]}; FULL/NORMAL = {speed:.2f}",
        held=in_effect == ("FULL", "NORMAL") and speed <= NOISE,
    )


def _levels(levels: Stats) -> str:
    """The ``synchronous`` levels a write connection ran with over the samples, named."""
    return "/".join(synchronous_name(level) for level in sorted(set(levels.samples)))
