"""The inner loop's budgets: how much of a seeded or generated search a test runs.

``scripts/test --quick`` sets ``LOOM_FUZZ_QUICK=1``. Under it the fuzz tests run 10 examples
instead of 25 (``replay_tests/fuzz/conftest.py``) and a test over several seeded random
histories runs its first seed only (:func:`seeds`). The full run, and CI, run every seed and
example: the quick run is for the edit loop, never a substitute (ADR 0031).
"""

from __future__ import annotations

import os

QUICK = bool(os.environ.get("LOOM_FUZZ_QUICK"))
"""True in ``scripts/test --quick``."""


def seeds(count: int) -> range:
    """The seeds a seeded random-history test runs: ``range(count)``, or its first alone in
    the quick run (each seed is a whole history, a second or more of CPU)."""
    return range(1 if QUICK else count)
