"""Hypothesis settings for the bad-input fuzz tests.

One profile, ``loom-fuzz``, that every test here names explicitly (``settings.get_profile``)
instead of loading it globally, so the rest of the suite keeps Hypothesis' own defaults:

* deterministic by default (``derandomize=True``, no example database): the suite is the CI
  command, and a fuzz test that fails one run in fifty is noise. ``LOOM_FUZZ_EXPLORE=1`` turns
  on random search with more examples for a local hunt;
* bounded ``max_examples`` so the whole folder stays within about a minute on two cores
  (each example writes to a real SQLite file or PostgreSQL database): 25, and 10 in the
  inner loop (``scripts/test --quick`` sets ``LOOM_FUZZ_QUICK=1``; CI runs the 25);
* ``deadline=None``: an example's time is dominated by fsync and the database, not the code;
* the function-scoped-fixture check is suppressed on purpose: ``db_url`` gives one fresh
  database per test, and every property here is stated relative to the state before each
  example (so examples sharing a database is part of what is tested, not a leak).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from replay_tests.budgets import QUICK

EXPLORE = bool(os.environ.get("LOOM_FUZZ_EXPLORE"))

settings.register_profile(
    "loom-fuzz",
    derandomize=not EXPLORE,
    database=None,
    max_examples=300 if EXPLORE else 10 if QUICK else 25,
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
