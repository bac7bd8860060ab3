"""Section "redaction" (ADR 0012): what the built-in secret patterns cost.

Every value loom records passes the redactor, almost all of them clean, so the figure that
matters is the cost on a clean ~1 KB value: ``codec.encode`` with the log's built-in
redactor against ``codec.encode`` without one, over the runtime workload's values. A value
with a secret in it costs more (the pattern runs and rewrites it); that arm is measured too.
End to end, decisions recorded per second with the built-in redactor and with
``redactor=None`` give the share of the recording cost that is redaction.

Negative control: the secret arm's output must hold a marker and no secret. A redactor that
silently stopped matching would make every arm fast for the wrong reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable

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
from benchmarks.stores import fresh_sqlite
from benchmarks.workload import FLOW, Value, make_values, recording_flow
from loom_runtime import Loom, Redactor, codec
from loom_runtime.redaction import BUILTIN_PATTERNS, RedactorOption

VALUES = 10_000
DECISIONS = 1_000
SECRET = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34"


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Per-value encode cost with and without the redactor, then decisions/s end to end."""
    count = VALUES // 10 if settings.quick else VALUES
    clean = make_values(count)
    dirty = [{**value, "text": f"{value['text'][:900]} key {SECRET}"} for value in clean]
    arms = [
        _encode_arm("encode, no redactor", clean, None),
        _encode_arm("encode + built-in redactor, clean values", clean, Redactor),
        _encode_arm("encode + built-in redactor, a secret in each", dirty, Redactor),
        _record_arm("record, redactor=None", None),
        _record_arm("record, built-in redactor", "builtin"),
    ]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    per_value = tuple((arm.name, results[arm.name]["us_per_value"].cell(" µs")) for arm in arms[:3])
    recorded = tuple((arm.name, results[arm.name]["record_per_s"].cell("/s")) for arm in arms[3:])
    note = f"median of {settings.rounds} interleaved rounds (low-high)"
    return SectionResult(
        notes=(
            f"The built-in set holds {len(BUILTIN_PATTERNS)} patterns "
            f"({', '.join(p.name for p in BUILTIN_PATTERNS)}). Clean strings skip a pattern "
            "on a one-character or substring prefilter before any regex runs.",
        ),
        tables=(
            Table(
                title=f"Encoding one ~1 KB value ({count:,} distinct values)",
                columns=("arm", "CPU per value"),
                rows=per_value,
                note=note,
            ),
            Table(
                title=f"Decisions recorded per second ({DECISIONS:,} of ~1 KB, SQLite file)",
                columns=("arm", "recorded/s"),
                rows=recorded,
                note=note,
            ),
        ),
        controls=(_control(dirty[0]),),
    )


def _encode_arm(name: str, values: list[Value], make: Callable[[], Redactor] | None) -> Arm:
    def measure() -> Sample:
        redactor = make() if make is not None else None  # fresh: nothing cached from a round
        started = time.process_time()
        for value in values:
            codec.encode(value, path="value", redactor=redactor)
        return {"us_per_value": (time.process_time() - started) / len(values) * 1e6}

    return Arm(name, measure)


def _record_arm(name: str, redactor: RedactorOption) -> Arm:
    values = make_values(DECISIONS)

    def measure() -> Sample:
        with fresh_sqlite() as (url, _), Loom(url, redactor=redactor) as loom:
            loom.flow(FLOW)(recording_flow(values))
            started = time.perf_counter()
            loom.run(FLOW, n=len(values))
            return {"record_per_s": len(values) / (time.perf_counter() - started)}

    return Arm(name, measure)


def _control(value: Value) -> Control:
    stored = bytes(codec.encode(value, path="value", redactor=Redactor()))
    held = SECRET.encode() not in stored and b"[REDACTED:openai-key]" in stored
    return Control(
        name="a value holding an OpenAI key, encoded with the built-in redactor",
        expected="stored with a marker, without the key",
        observed="marker, no key" if held else "KEY STORED or no marker",
        held=held,
    )
