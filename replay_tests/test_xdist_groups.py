"""Tests marked with one ``xdist_group`` run on one pytest-xdist worker (ADR 0031).

The suite relies on it twice: the crash harness starts every kill point of the session from its
first test, so a group split over two workers runs every SIGKILL pair twice; and the docs site
is built once per worker that runs one of its tests. pytest 9.2 broke it silently with
pytest-xdist 3.8 (the group suffix xdist writes into a node id was no longer read): nothing
failed, the suite just did that work twice. This runs a small grouped session the way
``scripts/test`` does and checks where each test ran.
"""

from __future__ import annotations

import pytest

GROUPED = """
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("together")

@pytest.mark.parametrize("n", range(6))
def test_grouped(n, worker_id):
    Path(os.environ["RAN_ON"], f"{n}-{worker_id}").touch()

@pytest.mark.parametrize("n", range(6))
def test_spread(n):
    pass
"""


@pytest.mark.slow  # a pytest subprocess with two xdist workers
def test_a_group_runs_on_one_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six grouped tests all run on one worker, and their node ids carry the group."""
    ran_on = pytester.mkdir("ran_on")
    monkeypatch.setenv("RAN_ON", str(ran_on))
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v"
    )
    result.assert_outcomes(passed=12)
    workers = {path.name.split("-", 1)[1] for path in ran_on.iterdir()}
    assert len(list(ran_on.iterdir())) == 6
    assert len(workers) == 1, f"the group was split over {sorted(workers)}"
    assert "test_grouped[0]@together" in result.stdout.str()
