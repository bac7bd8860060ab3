"""Section "runtime": decisions recorded and replayed per second.

The default configuration only (a SQLite file, built-in persistence, ``synchronous=NORMAL``)
at 1,000 and 10,000 decisions of ~1 KB, against the targets for a 2-core machine.
Log bytes per decision are the checkpointed file size over the number of decisions: the
execution's started/completed events and SQLite's pages are included, as a user would pay.

Negative controls: the same recording replayed by two broken versions of the flow. Both must
come out divergent with the expected divergence; a replay that calls either identical would
also have called the measured replays identical for the wrong reason.
"""

from __future__ import annotations

from benchmarks.harness import (
    Arm,
    Control,
    Progress,
    Sample,
    SectionResult,
    Settings,
    Table,
    interleave,
)
from benchmarks.stores import fresh_sqlite, sqlite_bytes
from benchmarks.workload import (
    FlowFunction,
    Value,
    changed_last_input_flow,
    make_values,
    record,
    record_and_replay,
    renamed_keys_flow,
    replay,
)

SIZES = (1_000, 10_000)
RECORD_TARGET = 2_000.0
REPLAY_TARGET = 25_000.0
CONTROL_SIZE = 1_000


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Measure every size in interleaved rounds, then run the negative controls once."""
    arms = [_arm(size, make_values(size)) for size in SIZES]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    rows = []
    for arm in arms:
        stats = results[arm.name]
        rows.append(
            (
                arm.name,
                stats["record_per_s"].cell("/s"),
                _verdict(stats["record_per_s"].median, RECORD_TARGET),
                stats["replay_per_s"].cell("/s"),
                _verdict(stats["replay_per_s"].median, REPLAY_TARGET),
                stats["bytes_per_decision"].cell(),
            )
        )
    table = Table(
        title="Decisions recorded and replayed per second (SQLite file, defaults)",
        columns=(
            "decisions",
            "recorded/s",
            f"target >= {RECORD_TARGET:,.0f}/s",
            "replayed/s",
            f"target >= {REPLAY_TARGET:,.0f}/s",
            "log bytes/decision",
        ),
        rows=tuple(rows),
        note=f"median of {settings.rounds} interleaved rounds (low-high); values ~1 KB of JSON",
    )
    progress("negative controls: replays by broken flows")
    return SectionResult(
        notes=(
            "A sequential flow makes N `ctx.decide` calls, each returning a distinct ~1 KB "
            "dict; every decision is appended durably before the flow continues. The replay "
            "runs in a second `Loom` on the same file (nothing cached from the run) and must "
            "report identical, else the harness stops.",
        ),
        tables=(table,),
        controls=_controls(),
    )


def _arm(size: int, values: list[Value]) -> Arm:
    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            sample = dict(record_and_replay(url, values))
            sample["bytes_per_decision"] = sqlite_bytes(path) / size
        return sample

    return Arm(f"{size:,}", measure)


def _controls() -> tuple[Control, ...]:
    values = make_values(CONTROL_SIZE)
    broken: list[tuple[str, FlowFunction, str]] = [
        (
            "replay by a flow whose keys are all new",
            renamed_keys_flow(values),
            "UnrecordedDecisionError",
        ),
        (
            "replay by a flow that changes the last decision's input",
            changed_last_input_flow(values),
            "DecisionInputChangedError",
        ),
    ]
    controls = []
    for name, flow, expected in broken:
        with fresh_sqlite() as (url, _):
            execution_id, _ = record(url, values)
            _, divergences = replay(url, execution_id, flow, CONTROL_SIZE)
        found = ", ".join(divergences) or "none"
        controls.append(
            Control(
                name=f"{name} ({CONTROL_SIZE:,} decisions)",
                expected=f"divergent ({expected})",
                observed=f"divergent ({found})" if divergences else "identical",
                held=expected in divergences,
            )
        )
    return tuple(controls)


def _verdict(measured: float, target: float) -> str:
    return f"{'met' if measured >= target else 'MISSED'} ({measured / target:.1f}x)"
