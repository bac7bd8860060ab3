"""``python -m benchmarks``: measure every section, print the tables, publish the report.

Only a complete run publishes docs/benchmarks.md: ratios count only when measured in one run
on one machine, so a ``--quick`` or ``--only`` run prints its tables and writes a report only
where ``--output`` says. A broken negative control or an instrument error exits 1 and
publishes nothing: figures from a broken instrument are not figures.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from benchmarks.harness import SAMPLE_CLOCK, InstrumentError, Progress, Settings
from benchmarks.report import (
    REPOSITORY,
    Outcome,
    SectionTime,
    git_revision,
    load_average,
    markdown,
    print_outcome,
    print_times,
)
from benchmarks.sections import SECTIONS

DEFAULT_OUTPUT = REPOSITORY / "docs" / "benchmarks.md"
ROUNDS = 9
QUICK_ROUNDS = 2
"""A quick run is a smoke run (every row, verdict and control, at smaller sizes): two rounds
still show a range, and its budget is 3 minutes."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected sections; the exit status says whether the instrument held."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    options = parser.parse_args(arguments)
    if options.rounds is not None and options.rounds < 1:
        parser.error("--rounds must be at least 1")
    settings = Settings(
        quick=options.quick,
        rounds=options.rounds or (QUICK_ROUNDS if options.quick else ROUNDS),
        pg_url=os.environ.get("LOOM_TEST_PG_URL") or None,
    )
    command = shlex.join(["python", "-m", "benchmarks", *arguments])
    revision = git_revision()  # now: the code imported at start is the code measured
    load_at_start = load_average()
    console = Console()
    if not console.is_terminal:
        console.width = 160  # a log file has no width; 80 columns would fold every range
    progress_console = Console(stderr=True)
    outcomes: list[Outcome] = []
    times: list[SectionTime] = []
    for section in SECTIONS:
        if section.run is None or (options.only and section.name not in options.only):
            outcomes.append((section, None))
            continue
        started, cpu, sampled = time.perf_counter(), _cpu_seconds(), SAMPLE_CLOCK.seconds
        try:
            result = section.run(settings, _progress(progress_console, section.name))
        except InstrumentError as exc:
            console.print(f"instrument error in section {section.name!r}: {exc}", style="red")
            return 1
        times.append(
            SectionTime(
                section.name,
                time.perf_counter() - started,
                load=load_average(),
                cpu_seconds=_cpu_seconds() - cpu,
                sample_seconds=SAMPLE_CLOCK.seconds - sampled,
            )
        )
        print_outcome(console, section, result)
        outcomes.append((section, result))
    print_times(console, times)

    broken = [c.name for _, result in outcomes if result for c in result.controls if not c.held]
    if broken:
        console.print(
            f"negative control(s) came out good: {'; '.join(broken)}. The instrument is "
            "broken; nothing was written.",
            style="bold red",
        )
        return 1
    output: Path | None = options.output
    if output is None and not (options.quick or options.only):
        output = DEFAULT_OUTPUT
    if output is None:
        console.print("report not written: pass --output PATH (only a full run publishes docs)")
        return 0
    report = markdown(
        command,
        outcomes,
        rounds=settings.rounds,
        postgres=settings.pg_url is not None,
        revision=revision,
        load_at_start=load_at_start,
        times=times,
    )
    output.write_text(report)
    console.print(f"wrote {output}")
    return 0


def _cpu_seconds() -> float:
    """User and system CPU of this process and of the children it has waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _progress(console: Console, section: str) -> Progress:
    def report(message: str) -> None:
        console.print(f"{section}: {message}", style="dim", markup=False)

    return report


def _parser() -> argparse.ArgumentParser:
    measurable = [section.name for section in SECTIONS if section.run is not None]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure loom and rewrite docs/benchmarks.md. Set LOOM_TEST_PG_URL (or "
        "run under scripts/with-postgres) to include the PostgreSQL arms.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_ROUNDS} rounds and smaller workloads (its budget: 3 minutes on a quiet "
        "machine, 20 for a full run); does not publish docs/benchmarks.md",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=measurable,
        metavar="SECTION",
        help=f"run only this section (repeatable; one of {', '.join(measurable)}); "
        "does not publish docs/benchmarks.md",
    )
    parser.add_argument(
        "--rounds", type=int, help=f"interleaved rounds per section (default {ROUNDS})"
    )
    parser.add_argument(
        "--output", type=Path, help="write the markdown report here instead of the default"
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
