"""Section "encryption" (ADR 0049): what sealing costs per recorded and per replayed decision.

An encrypted log seals every decision's value and input (AES-GCM under the execution's key)
before it is stored, and a replay opens them again. The same flow of ~1 KB values is recorded
into a fresh SQLite file and replayed from a second ``Loom``, once with a master key and once
without, in interleaved rounds; the figures are CPU time per decision (``process_time``), so
another process's load on the shared machine does not enter them. The targets: recording
costs at most 10% more with encryption, and replay keeps at least 90% of its throughput.

Negative control: the encrypted recording read by a ``Loom`` without the key must be refused,
and its stored rows must hold none of the values' text. A sealer that silently stopped
sealing would make the encrypted arm as cheap as the clear one for the wrong reason.
"""

from __future__ import annotations

import gc
import time
from uuid import UUID

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
from benchmarks.stores import fresh_sqlite
from benchmarks.workload import FLOW, Value, make_values, recording_flow
from loom_runtime import EncryptionOffError, Loom, MasterKey

DECISIONS = 1_000
KEY = MasterKey(bytes(range(32)))
RECORD_TARGET = 1.10
"""Recording CPU per decision with encryption, at most this times the clear recording's."""
REPLAY_TARGET = 0.90
"""Replay throughput with decryption, at least this share of the clear replay's."""


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Record and replay with and without a master key, side by side in each round."""
    values = make_values(DECISIONS // 5 if settings.quick else DECISIONS)
    arms = [_arm("clear", values, None), _arm("encrypted", values, KEY)]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    clear, sealed = results["clear"], results["encrypted"]
    record_ratio = sealed["record_cpu_us"].median / clear["record_cpu_us"].median
    replay_share = clear["replay_cpu_us"].median / sealed["replay_cpu_us"].median
    rows = tuple(
        (name, stats["record_cpu_us"].cell(" µs"), stats["replay_cpu_us"].cell(" µs"))
        for name, stats in (("no master key", clear), ("master key (sealed)", sealed))
    )
    progress("negative control: the encrypted recording read without the key")
    return SectionResult(
        notes=(
            "Sealed per decision: its value and input (two AES-GCM seals on record, two "
            "opens on replay), plus one key-table read per append so that nothing is stored "
            "under a key another process destroyed.",
        ),
        tables=(
            Table(
                title=f"CPU per decision ({len(values):,} decisions of ~1 KB, SQLite file)",
                columns=("arm", "record", "replay"),
                rows=rows,
                note=f"median of {settings.rounds} interleaved rounds (low-high)",
            ),
            Table(
                title="Against the targets",
                columns=("measure", "value", "target", "verdict"),
                rows=(
                    (
                        "recording cost with encryption",
                        f"{record_ratio:.2f}x",
                        f"<= {RECORD_TARGET:.2f}x",
                        "met" if record_ratio <= RECORD_TARGET else "MISSED",
                    ),
                    (
                        "replay throughput with decryption",
                        f"{replay_share:.2f}x",
                        f">= {REPLAY_TARGET:.2f}x",
                        "met" if replay_share >= REPLAY_TARGET else "MISSED",
                    ),
                ),
            ),
        ),
        controls=(_control(values),),
    )


def _arm(name: str, values: list[Value], key: MasterKey | None) -> Arm:
    def measure() -> Sample:
        with fresh_sqlite() as (url, _):
            with Loom(url, encryption=key) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.process_time()
                execution_id = loom.run(FLOW, n=len(values)).execution_id
                recorded = time.process_time() - started
            gc.collect()
            with Loom(url, encryption=key) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.process_time()
                result = loom.replay(execution_id)
                replayed = time.process_time() - started
            if not result.identical:
                raise InstrumentError(f"the {name} replay diverged: {result.divergences}")
        return {
            "record_cpu_us": recorded / len(values) * 1e6,
            "replay_cpu_us": replayed / len(values) * 1e6,
        }

    return Arm(name, measure)


def _control(values: list[Value]) -> Control:
    with fresh_sqlite() as (url, _):
        with Loom(url, encryption=KEY) as loom:
            loom.flow(FLOW)(recording_flow(values))
            execution_id: UUID = loom.run(FLOW, n=len(values)).execution_id
            stored = b"".join(row.state for row in loom.log.rows(execution_id))
        with Loom(url) as keyless:
            try:
                keyless.execution(execution_id)
            except EncryptionOffError:
                refused = True
            else:
                refused = False
    planted = str(values[0]["text"])[:64].encode()
    held = refused and planted not in stored and b"loom.sealed" in stored
    return Control(
        name="the encrypted recording, read without the key and grepped for a value's text",
        expected="refused, and no value's text stored",
        observed="refused, sealed" if held else "READ WITHOUT THE KEY or text stored in clear",
        held=held,
    )
