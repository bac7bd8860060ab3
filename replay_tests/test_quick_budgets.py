"""The quick run's budgets shrink the inner loop only: the full run keeps every seed.

``scripts/test --quick`` sets ``LOOM_FUZZ_QUICK=1``; a seeded random-history test then runs its
first seed (``replay_tests/budgets.py``). Collected both ways, the quick selection must be the
full one less the other seeds, and the full one must hold them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from replay_tests import budgets

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "replay_tests/memory/test_kept_counts.py"  # seeds(4) and seeds(3)


def _collected(*, quick: bool) -> list[str]:
    env = {key: value for key, value in os.environ.items() if key != "LOOM_FUZZ_QUICK"}
    if quick:
        env["LOOM_FUZZ_QUICK"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:randomly", SAMPLE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.slow  # two pytest subprocesses
def test_the_quick_run_keeps_the_first_seed_and_the_full_run_every_seed() -> None:
    full = _collected(quick=False)
    quick = _collected(quick=True)
    seeded = re.compile(r"\[(\d+)\]$")
    assert sorted(m[1] for t in full if (m := seeded.search(t))) == sorted("0123" + "012")
    assert quick == [t for t in full if not (m := seeded.search(t)) or m[1] == "0"]


@pytest.mark.parametrize(
    ("quick", "count", "drawn"), [(False, 300, 300), (True, 300, 100), (True, 2, 1), (True, 0, 0)]
)
def test_the_quick_run_draws_a_third_of_the_random_cases_never_none_nor_more(
    monkeypatch: pytest.MonkeyPatch, quick: bool, count: int, drawn: int
) -> None:
    monkeypatch.setattr(budgets, "QUICK", quick)
    assert budgets.examples(count) == drawn
