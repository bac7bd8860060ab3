"""Section "runtime": decisions recorded and replayed per second.

The default configuration only (a SQLite file, built-in persistence, ``synchronous=NORMAL``)
at 1,000 and 10,000 decisions of ~1 KB, against the targets for a 2-core machine.
Log bytes per decision are the checkpointed file size over the number of decisions: the
execution's started/completed events and SQLite's pages are included, as a user would pay.

Tracing (ADR 0030) side by side at 1,000 decisions: off (the default: no provider, so no
wrapper and nothing of OpenTelemetry imported) and on (the SDK with a span processor feeding an
in-memory exporter, the cheapest real exporter). Off must match the plain arm above: it runs
the same code path, so any gap there is noise, and the "on" column is what tracing costs.

The replay against its floor, at 10,000 decisions in one round each: ``loom.replay`` and, on
the same file right after, the least any replay of it could do with no loom code at all (one
``SELECT`` of the execution's states by version, each decoded untyped by one reused msgspec
``Decoder``, which parses every decision's value once). Both are timed by wall clock and by
the process's CPU time; the CPU ratio is the one to read on a loaded machine, since neither
arm waits for anything but the CPU. Each arm is timed on its second read: what a process pays
once (loom opening its log and building its typed decoders, the heap's first growth to hold
an execution) is not a per-decision cost, and the floor's connection and decoder were always
made outside its time.

Negative controls: the same recording replayed by two broken versions of the flow. Both must
come out divergent with the expected divergence; a replay that calls either identical would
also have called the measured replays identical for the wrong reason.
"""

from __future__ import annotations

import gc
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Progress,
    Sample,
    SectionResult,
    Settings,
    Table,
    interleave,
)
from benchmarks.stores import fresh_sqlite, sqlite_bytes
from benchmarks.workload import (
    FLOW,
    FlowFunction,
    Value,
    changed_last_input_flow,
    make_values,
    record,
    record_and_replay,
    recording_flow,
    renamed_keys_flow,
    replay,
)
from loom_runtime import Loom

SIZES = (1_000, 10_000)
QUICK_SIZES = (1_000,)
"""``--quick`` records 1,000 decisions per arm: the 10,000-decision arms took most of its time."""
RECORD_TARGET = 2_000.0
REPLAY_TARGET = 25_000.0
CONTROL_SIZE = 1_000
TRACING_SIZE = 1_000
FLOOR_SIZE = 10_000
QUICK_FLOOR_SIZE = 1_000
FLOOR_TARGET = 250_000.0
FLOOR_ROUNDS = 3
"""At most this many rounds: each records 10,000 decisions first, and the CPU ratio it reports
varied by under 0.1x between rounds even at a load average of 20."""


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Measure every size in interleaved rounds, then run the negative controls once."""
    sizes = QUICK_SIZES if settings.quick else SIZES
    arms = [_arm(size, make_values(size)) for size in sizes]
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
        tables=(table, _floor_table(settings, progress), _tracing_table(settings, progress)),
        controls=_controls(),
    )


def _arm(size: int, values: list[Value]) -> Arm:
    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            sample = dict(record_and_replay(url, values))
            sample["bytes_per_decision"] = sqlite_bytes(path) / size
        return sample

    return Arm(f"{size:,}", measure)


def _floor_table(settings: Settings, progress: Progress) -> Table:
    """``loom.replay`` and the bare read-and-decode floor of the same rows, side by side."""
    size = QUICK_FLOOR_SIZE if settings.quick else FLOOR_SIZE
    values = make_values(size)
    rounds = min(settings.rounds, FLOOR_ROUNDS)
    results = interleave(
        [Arm(f"{size:,}", _replay_and_floor(values))], rounds=rounds, progress=progress
    )
    stats = results[f"{size:,}"]
    rows = [
        (
            "loom.replay",
            stats["replay_per_s"].cell("/s"),
            stats["replay_cpu_us"].cell(" µs"),
            stats["cpu_ratio"].cell("x"),
            _verdict(stats["replay_per_s"].median, FLOOR_TARGET),
        ),
        (
            "floor: SELECT + decode, no loom",
            stats["floor_per_s"].cell("/s"),
            stats["floor_cpu_us"].cell(" µs"),
            "1x",
            _verdict(stats["floor_per_s"].median, FLOOR_TARGET),
        ),
    ]
    return Table(
        title=f"Replay against its floor ({size:,} decisions, SQLite file)",
        columns=(
            "reader",
            "replayed/s",
            "CPU per decision",
            "CPU vs floor",
            f"target >= {FLOOR_TARGET:,.0f}/s",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} rounds (low-high); both read the same file in "
        "the same round, loom first, each timed on its second read (setup untimed)",
    )


def _replay_and_floor(values: list[Value]) -> Callable[[], Sample]:
    """Record once, then time the replay and the floor on the same file, wall and CPU."""

    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            execution_id, _ = record(url, values)
            gc.collect()
            with Loom(url) as loom:
                loom.flow(FLOW)(recording_flow(values))
                # Untimed, as the floor's connection and decoder are made outside its time:
                # loom opens its log and builds its typed decoders once per process.
                loom.replay(execution_id)
                gc.collect()
                wall, cpu = time.perf_counter(), time.process_time()
                result = loom.replay(execution_id)
                replay_wall, replay_cpu = time.perf_counter() - wall, time.process_time() - cpu
            if not result.identical:
                raise InstrumentError("the replay being timed diverged: it would measure a failure")
            _floor(path, execution_id.hex, values)  # warmed as loom was: the second of two
            gc.collect()
            floor_wall, floor_cpu = _floor(path, execution_id.hex, values)
        size = len(values)
        return {
            "replay_per_s": size / replay_wall,
            "floor_per_s": size / floor_wall,
            "replay_cpu_us": replay_cpu / size * 1e6,
            "floor_cpu_us": floor_cpu / size * 1e6,
            "cpu_ratio": replay_cpu / floor_cpu,
        }

    return measure


def _floor(path: Path, stream: str, values: list[Value]) -> tuple[float, float]:
    """Wall and CPU seconds to read the stream's states and decode each, with no loom code;
    checked to have decoded every decision's value, so it cannot pass for a floor by
    skipping work."""
    connection = sqlite3.connect(path)
    try:
        decoder = msgspec.json.Decoder()
        wall, cpu = time.perf_counter(), time.process_time()
        states = [
            decoder.decode(state)
            for (state,) in connection.execute(
                "SELECT state FROM stored_events WHERE originator_id = ? "
                "ORDER BY originator_version",
                (stream,),
            )
        ]
        elapsed = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        connection.close()
    decided = [state["value"] for state in states if "value" in state]
    if decided != values:
        raise InstrumentError("the floor did not decode every recorded value")
    return elapsed


def _tracing_table(settings: Settings, progress: Progress) -> Table:
    """Tracing off and on, interleaved: decisions recorded and replayed per second."""
    values = make_values(TRACING_SIZE)
    arms = [
        Arm("tracing off", _traced(values, on=False)),
        Arm("tracing on", _traced(values, on=True)),
    ]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    off = results["tracing off"]
    rows = [
        (
            arm.name,
            results[arm.name]["record_per_s"].cell("/s"),
            f"{results[arm.name]['record_per_s'].median / off['record_per_s'].median:.2f}x",
            results[arm.name]["replay_per_s"].cell("/s"),
            f"{results[arm.name]['replay_per_s'].median / off['replay_per_s'].median:.2f}x",
        )
        for arm in arms
    ]
    return Table(
        title=f"Tracing off and on ({TRACING_SIZE:,} decisions, SQLite file)",
        columns=("tracing", "recorded/s", "vs off", "replayed/s", "vs off"),
        rows=tuple(rows),
        note=f"median of {settings.rounds} interleaved rounds; on: OpenTelemetry SDK, "
        "SimpleSpanProcessor into an InMemorySpanExporter (one span per decision)",
    )


def _traced(values: list[Value], *, on: bool) -> Callable[[], Sample]:
    """Record and replay the measured flow with or without a tracer provider."""

    def measure() -> Sample:
        provider = _in_memory_provider() if on else None
        with fresh_sqlite() as (url, _):
            with Loom(url, tracer_provider=provider) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.perf_counter()
                execution_id = loom.run(FLOW, n=len(values)).execution_id
                recorded = len(values) / (time.perf_counter() - started)
            gc.collect()  # the replay starts without the recording's garbage, as elsewhere
            with Loom(url, tracer_provider=provider) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.perf_counter()
                result = loom.replay(execution_id)
                replayed = len(values) / (time.perf_counter() - started)
        if not result.identical:
            raise InstrumentError(
                "the traced replay being timed diverged: it would measure a failure"
            )
        return {"record_per_s": recorded, "replay_per_s": replayed}

    return measure


def _in_memory_provider() -> Any:
    """An SDK tracer provider exporting to memory (imported here: only this arm needs it)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return provider


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
