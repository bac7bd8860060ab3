"""The time table says how much of each section its samples took: only the rest (fixtures,
single-sample builds, checks, controls) can be cut without losing a figure (ADR 0063)."""

from __future__ import annotations

import pytest

from benchmarks import harness
from benchmarks.harness import SAMPLE_CLOCK, Arm, Sample, interleave
from benchmarks.report import SectionTime, times_table


class _Clock:
    """A perf_counter that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_interleave_adds_the_time_inside_each_sample_and_nothing_around_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(harness, "perf_counter", clock)
    before = SAMPLE_CLOCK.seconds

    def measure() -> Sample:
        clock.now += 2.0  # the sample
        return {"value": 1.0}

    def progress(_: str) -> None:
        clock.now += 5.0  # between samples: not a sample's time

    interleave([Arm("a", measure), Arm("b", measure, rounds=1)], rounds=3, progress=progress)

    assert SAMPLE_CLOCK.seconds - before == pytest.approx(4 * 2.0)


def test_the_time_table_shows_each_sections_sample_time_and_its_share() -> None:
    table = times_table(
        [
            SectionTime("memory", 120.0, load="1.0", cpu_seconds=90.0, sample_seconds=90.0),
            SectionTime("corpus", 60.0, load="1.1", cpu_seconds=55.0, sample_seconds=15.0),
        ]
    )
    assert [row[4] for row in table.rows] == [
        "1 min 30 s (75%)",
        "15.0 s (25%)",
        "1 min 45 s (58%)",
    ]
