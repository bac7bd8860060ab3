"""``interleave`` freezes what its arms were built from before the rounds and unfreezes it
after: the collection before each sample then walks only that sample's garbage, not the run's
corpora and fixtures again (ADR 0063), and each sample's garbage is still collected.

What its caller froze before it stays frozen: Python cannot unfreeze part of the frozen
objects, and the test session freezes everything collection built (``replay_tests/conftest.py``),
which an unfreeze-all handed back to every later collection of that worker (ADR 0054).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path

from benchmarks.harness import Arm, Sample, interleave

ROOT = Path(__file__).resolve().parent.parent


class _Node:
    """An object in a reference cycle: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def run_with_cycles() -> list[tuple[int, bool]]:
    """Two arms, two rounds; each sample reports the frozen count and whether the previous
    sample's cycle was collected before it started."""
    seen: list[tuple[int, bool]] = []
    garbage: list[weakref.ref[_Node]] = []

    def measure() -> Sample:
        seen.append((gc.get_freeze_count(), all(ref() is None for ref in garbage)))
        garbage.append(weakref.ref(_Node()))
        return {"value": 1.0}

    interleave([Arm("a", measure), Arm("b", measure)], rounds=2, progress=lambda _: None)
    return seen


_UNFROZEN_RUN = """
import gc, json, sys
sys.path.insert(0, sys.argv[1])
from replay_tests.test_bench_frozen_fixtures import _Node, run_with_cycles
assert gc.get_freeze_count() == 0
fixture = [_Node() for _ in range(10)]
print(json.dumps({"seen": run_with_cycles(), "after": gc.get_freeze_count()}))
"""


def test_interleave_freezes_the_fixtures_collects_each_sample_and_unfreezes_after() -> None:
    """In a process where nothing was frozen before (a benchmark run's)."""
    result = subprocess.run(
        [sys.executable, "-c", _UNFROZEN_RUN, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(result.stdout)
    assert len(report["seen"]) == 4
    assert all(frozen >= 10 for frozen, _ in report["seen"])
    assert all(collected for _, collected in report["seen"])
    assert report["after"] == 0


def test_interleave_keeps_what_its_caller_froze_frozen() -> None:
    gc.collect()
    gc.freeze()
    before = gc.get_freeze_count()
    assert before > 0  # the control: the caller's freeze is there to keep
    seen = run_with_cycles()
    assert all(collected for _, collected in seen)
    # Not ">= before": a frozen object still dies when its last reference goes, and other
    # threads of this worker (a test database emptied in the background, a pool's workers)
    # may drop some meanwhile (151 of 948,647 in one run). Unfreezing everything, the fault
    # this guards against, leaves none frozen.
    assert gc.get_freeze_count() > before // 2
