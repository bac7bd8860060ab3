"""``interleave`` freezes what its arms were built from before the rounds and unfreezes it
after: the collection before each sample then walks only that sample's garbage, not the run's
corpora and fixtures again (ADR 0063), and each sample's garbage is still collected."""

from __future__ import annotations

import gc
import weakref

from benchmarks.harness import Arm, Sample, interleave


class _Node:
    """An object in a reference cycle: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_interleave_freezes_the_fixtures_collects_each_sample_and_unfreezes_after() -> None:
    fixture = [_Node() for _ in range(10)]
    seen: list[tuple[int, bool]] = []
    garbage: list[weakref.ref[_Node]] = []

    def measure() -> Sample:
        # the previous sample's cycle was collected before this sample started
        seen.append((gc.get_freeze_count(), all(ref() is None for ref in garbage)))
        garbage.append(weakref.ref(_Node()))
        return {"value": 1.0}

    interleave([Arm("a", measure), Arm("b", measure)], rounds=2, progress=lambda _: None)

    assert len(seen) == 4
    assert all(frozen >= len(fixture) for frozen, _ in seen)
    assert all(collected for _, collected in seen)
    assert gc.get_freeze_count() == 0
