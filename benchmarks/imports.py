"""Section "imports": what importing loom costs a program, a pytest session and ``loom --help``.

An import's cost is read from ``python -X importtime`` in a fresh interpreter: the cumulative
microseconds of the top-level imports the statement makes, so the interpreter's own start-up
is not counted and the figure is what loom (and what it pulls in) adds. ``loom --help`` is
timed on the wall clock instead, start-up included, because that is what a user waits for.
``replay_tests/test_import_cost.py`` asserts the same budgets with :func:`import_cost`.

Negative control: importing the projections module directly (tracked read models are SQL
tables, so it imports SQLAlchemy by design) must show SQLAlchemy and cost more than a third of
the package budget; an instrument that reads every import as free would pass any budget.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

ROOT = Path(__file__).resolve().parent.parent

IMPORT_BUDGET = 0.3
PLUGIN_BUDGET = 0.05
HELP_WALL_BUDGET = 0.5

STATEMENTS: tuple[tuple[str, str, float], ...] = (
    ("import loom_runtime", "", IMPORT_BUDGET),
    ("import loom_memory", "", IMPORT_BUDGET),
    ("import loom_knowledge", "", IMPORT_BUDGET),
    ("from loom_runtime import Loom", "", IMPORT_BUDGET),
    ("import loom_runtime.tools.pytest_plugin", "import pytest", PLUGIN_BUDGET),
    ("import loom_runtime.tools.cli", "", IMPORT_BUDGET),
)
"""(statement, what runs first and is not counted, budget in seconds)."""

_LINE = re.compile(r"^import time:\s*(\d+) \|\s*(\d+) \| ( *)(\S+)$")
_MARK = "--- measured statement ---"


@dataclass(frozen=True)
class ImportCost:
    """What one statement imported: seconds in all, and each module's cumulative seconds."""

    seconds: float
    modules: dict[str, float]

    def heaviest(self, count: int = 8) -> str:
        """The ``count`` costliest modules, for an assertion message."""
        top = sorted(self.modules.items(), key=lambda item: -item[1])[:count]
        return ", ".join(f"{name} {seconds:.3f}s" for name, seconds in top)


def import_cost(statement: str, *, after: str = "") -> ImportCost:
    """The import cost of ``statement`` in a fresh interpreter, once ``after`` has run.

    Sums the cumulative time of the top-level entries importtime prints after ``after``
    (each entry includes everything it imported in turn).
    """
    code = f"import sys\n{after}\nsys.stderr.write({_MARK!r} + '\\n')\n{statement}\n"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    total = 0
    modules: dict[str, float] = {}
    for line in done.stderr.split(_MARK, 1)[1].splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        cumulative, indent, name = int(found[2]), found[3], found[4]
        modules[name] = cumulative / 1e6
        if not indent:
            total += cumulative
    return ImportCost(total / 1e6, modules)


def help_seconds() -> float:
    """Wall-clock seconds of ``loom --help``, interpreter start-up included."""
    script = Path(sys.executable).with_name("loom")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "loom_runtime"]
    start = time.perf_counter()
    subprocess.run([*command, "--help"], capture_output=True, check=True, cwd=ROOT)
    return time.perf_counter() - start


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Measure every statement and ``loom --help`` in interleaved rounds; then the control."""
    arms = [Arm(statement, _import_arm(statement, after)) for statement, after, _ in STATEMENTS]
    arms.append(Arm("loom --help", lambda: {"ms": help_seconds() * 1000}))
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    budgets = {statement: budget for statement, _, budget in STATEMENTS}
    budgets["loom --help"] = HELP_WALL_BUDGET
    rows = []
    for arm in arms:
        stats = results[arm.name]["ms"]
        budget = budgets[arm.name]
        verdict = "met" if stats.median <= budget * 1000 else "MISSED"
        kind = "wall clock" if arm.name == "loom --help" else "imports"
        rows.append((arm.name, kind, stats.cell(" ms"), f"<= {budget * 1000:.0f} ms", verdict))
    table = Table(
        title="Import cost (python -X importtime, start-up excluded; --help on the wall clock)",
        columns=("statement", "measured", "time", "budget", "verdict"),
        rows=tuple(rows),
        note=f"median of {settings.rounds} interleaved rounds (low-high)",
    )
    progress("negative control: importing the projections module directly")
    return SectionResult(
        notes=(
            "`import loom_<package>` binds public names lazily (PEP 562), the pytest plugin "
            "imports only pytest until a bundle or fixture is used, and `loom --help` imports "
            "no log: ADR 0022.",
        ),
        tables=(table,),
        controls=(_control(),),
    )


def _import_arm(statement: str, after: str) -> Callable[[], Sample]:
    def measure() -> Sample:
        return {"ms": import_cost(statement, after=after).seconds * 1000}

    return measure


def _control() -> Control:
    cost = import_cost("import loom_runtime.projection")
    held = "sqlalchemy" in cost.modules and cost.seconds > IMPORT_BUDGET / 3
    return Control(
        name="import loom_runtime.projection (SQL read models, not the lazy package)",
        expected=f"SQLAlchemy imported, more than {IMPORT_BUDGET / 3:.2f} s",
        observed=f"{'SQLAlchemy' if 'sqlalchemy' in cost.modules else 'no SQLAlchemy'}, "
        f"{cost.seconds:.3f} s",
        held=held,
    )
