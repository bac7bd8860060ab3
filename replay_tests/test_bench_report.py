"""The benchmark report states each section's time: the run has a budget, and the section to
cut first is the one that takes longest."""

from __future__ import annotations

from benchmarks.harness import Section, SectionResult
from benchmarks.report import SectionTime, markdown, times_table


def test_the_time_table_gives_each_section_its_share_and_load_and_the_total() -> None:
    table = times_table(
        [
            SectionTime("runtime", 30.0, load="1.2", cpu_seconds=20.0),
            SectionTime("capture", 90.0, load="3.4", cpu_seconds=70.0),
        ]
    )
    assert table.rows == (
        ("runtime", "30.0 s", "25%", "20.0 s", "n/a", "1.2"),
        ("capture", "1 min 30 s", "75%", "1 min 10 s", "n/a", "3.4"),
        ("all sections", "2 min 00 s", "100%", "1 min 30 s", "n/a", ""),
    )


def test_the_published_report_carries_the_time_table_only_when_sections_were_timed() -> None:
    outcomes = [(Section(name="runtime", title="Runtime"), SectionResult())]
    timed = markdown(
        "python -m benchmarks",
        outcomes,
        rounds=3,
        postgres=False,
        times=[SectionTime("runtime", 61.0, load="0.5")],
    )
    untimed = markdown("python -m benchmarks", outcomes, rounds=3, postgres=False)
    assert "| runtime | 1 min 01 s | 100% | n/a | n/a | 0.5 |" in timed
    assert "Time per section" not in untimed
