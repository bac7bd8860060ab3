"""The workload every loom arm runs: one sequential flow making N decisions of ~1 KB each.

Why this shape: the targets are stated for "a sequential flow" with "~1 KB values", the
size of a short model answer. The values are built before the clock starts, so ``compute``
costs nothing and the figures are loom's own cost: encode, append durably, decode the round
trip (recording); read the stream, decode, answer every ``decide`` (replay).

Recording and replay use two different ``Loom`` objects on the same database, so the replay
reads the log as another process would, with nothing cached from the run.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID

import msgspec

from benchmarks.harness import InstrumentError, Sample
from loom_runtime import Loom
from loom_runtime.log import Persistence, Synchronous

VALUE_BYTES = 1024
FLOW = "bench"

_SENTENCE = (
    "the planner retrieved three passages about vacuum and autovacuum thresholds then asked "
    "the model to explain why the table bloats under a long running transaction; "
)
_PROSE = _SENTENCE * (2 * VALUE_BYTES // len(_SENTENCE) + 2)

Value = dict[str, Any]
FlowFunction = Callable[..., int]


def make_values(count: int) -> list[Value]:
    """``count`` distinct values, each encoding to VALUE_BYTES of JSON (ASCII text, no escapes)."""
    values = []
    for index in range(count):
        value: Value = {"index": index, "role": "assistant", "tokens": 200 + index % 50, "text": ""}
        room = VALUE_BYTES - len(msgspec.json.encode(value))
        start = index % len(_SENTENCE)  # a different slice of the prose for each index
        value["text"] = _PROSE[start : start + room]
        values.append(value)
    return values


def recording_flow(values: list[Value]) -> FlowFunction:
    """The measured flow: decision ``step-i`` returns ``values[i]``."""

    def bench(ctx: Any, n: int) -> int:
        for index in range(n):
            ctx.decide(f"step-{index}", partial(values.__getitem__, index))
        return n

    return bench


def renamed_keys_flow(values: list[Value]) -> FlowFunction:
    """A broken flow for a negative control: every key is one the recording never made."""

    def bench(ctx: Any, n: int) -> int:
        for index in range(n):
            ctx.decide(f"renamed-{index}", partial(values.__getitem__, index))
        return n

    return bench


def changed_last_input_flow(values: list[Value]) -> FlowFunction:
    """A broken flow for a negative control: the last decision is asked with a new input.

    Every other decision matches, so the replay runs to the end before anything differs: a
    replay that skipped input comparison, or stopped early, would call this identical.
    """

    def bench(ctx: Any, n: int) -> int:
        for index in range(n):
            changed = {"prompt": "v2"} if index == n - 1 else None
            ctx.decide(f"step-{index}", partial(values.__getitem__, index), input=changed)
        return n

    return bench


def record(
    url: str,
    values: list[Value],
    *,
    persistence: Persistence = "builtin",
    synchronous: Synchronous = "NORMAL",
    observe: Callable[[Loom], object] | None = None,
) -> tuple[UUID, float]:
    """Run the flow once against a fresh log; the execution id and decisions/s recorded.

    ``observe`` is called, untimed, with the ``Loom`` that recorded, right after the clock
    stops and before it closes: what the timed run's own connections were set to can be asked
    of them there (a fresh ``Loom`` would answer for its own)."""
    with Loom(url, persistence=persistence, sqlite_synchronous=synchronous) as loom:
        loom.flow(FLOW)(recording_flow(values))
        started = time.perf_counter()
        run = loom.run(FLOW, n=len(values))
        elapsed = time.perf_counter() - started
        if observe is not None:
            observe(loom)
    return run.execution_id, len(values) / elapsed


def replay(
    url: str,
    execution_id: UUID,
    flow: FlowFunction,
    decisions: int,
    *,
    persistence: Persistence = "builtin",
) -> tuple[float, tuple[str, ...]]:
    """Replay with ``flow`` as the current code; decisions/s and the divergence types found."""
    with Loom(url, persistence=persistence) as loom:
        loom.flow(FLOW)(flow)
        started = time.perf_counter()
        result = loom.replay(execution_id)
        elapsed = time.perf_counter() - started
    return decisions / elapsed, tuple(type(d).__name__ for d in result.divergences)


def record_and_replay(
    url: str,
    values: list[Value],
    *,
    persistence: Persistence = "builtin",
    synchronous: Synchronous = "NORMAL",
    observe: Callable[[Loom], object] | None = None,
) -> Sample:
    """One sample: record the flow, then replay it identically from a second Loom
    (``observe``: see :func:`record`)."""
    execution_id, recorded = record(
        url, values, persistence=persistence, synchronous=synchronous, observe=observe
    )
    gc.collect()  # the replay starts without the recording's garbage, as every peer's does
    replayed, divergences = replay(
        url, execution_id, recording_flow(values), len(values), persistence=persistence
    )
    if divergences:
        raise InstrumentError(
            f"the replay being timed diverged ({', '.join(divergences)}): its figure would "
            "measure the failure path, not a replay"
        )
    return {"record_per_s": recorded, "replay_per_s": replayed}
