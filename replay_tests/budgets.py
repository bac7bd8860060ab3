"""The inner loop's budgets: how much of a seeded or generated search a test runs.

``scripts/test --quick`` sets ``LOOM_FUZZ_QUICK=1``. Under it the fuzz tests run 10 examples
instead of 25 (``replay_tests/fuzz/conftest.py``), a test over several seeded random
histories runs its first seed only (:func:`seeds`), and a test checking random queries against
a brute-force answer draws a third of them (:func:`examples`). The full run, and CI, run every
seed and example: the quick run is for the edit loop, never a substitute (ADR 0031).
"""

from __future__ import annotations

import os

QUICK = bool(os.environ.get("LOOM_FUZZ_QUICK"))
"""True in ``scripts/test --quick``."""


def seeds(count: int) -> range:
    """The seeds a seeded random-history test runs: ``range(count)``, or its first alone in
    the quick run (each seed is a whole history, a second or more of CPU)."""
    return range(1 if QUICK else count)


def examples(count: int) -> int:
    """How many random cases a reference test draws (queries, or rounds of writes and
    queries, each checked against the plain or brute-force answer): ``count``, or a third of
    it in the quick run, never none and never more. The cases come from one seeded generator,
    so the quick run checks the first third of the full run's."""
    return min(count, max(1, count // 3)) if QUICK else count
