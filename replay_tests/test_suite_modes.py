"""`scripts/test --quick` leaves out exactly what it says: PostgreSQL, slow, waiting and
browser tests.

The quick run is a marker expression (ADR 0031). A marker it names that the suite does not
register, or a PostgreSQL test without the ``postgres`` marker, would silently put the slow
half back into the inner loop (or drop tests from it); both are checked here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "replay_tests/runtime/test_stream.py"  # takes the `loom` fixture: both backends
WAITING = "replay_tests/runtime/test_retry.py"  # one test of it holds a lock for 1.5 s


def _quick_expression() -> str:
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    found = re.search(r'-m "([^"]+)"', script.split("--quick", 2)[2])
    assert found, "scripts/test --quick passes no -m expression"
    return found[1]


def _collected(*args: str, path: str = SAMPLE) -> list[str]:
    env = {**os.environ, "LOOM_TEST_PG_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:randomly", *args, path],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_quick_mode_names_only_registered_markers() -> None:
    """A misspelt marker in the expression would select everything or nothing, silently."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = pyproject["tool"]["pytest"]["ini_options"]["markers"]
    registered = {marker.split(":", 1)[0] for marker in markers}
    named = set(re.findall(r"[a-z_]+", _quick_expression())) - {"not", "and", "or"}
    assert named == {"slow", "waits", "postgres", "browser"}
    assert named <= registered


@pytest.mark.slow  # two pytest subprocesses
def test_quick_mode_leaves_out_postgres_slow_and_browser() -> None:
    """With a server configured, the full run has both backends, the quick run SQLite only."""
    full = _collected()
    quick = _collected("-m", _quick_expression())
    assert any("[postgresql]" in test for test in full)
    assert quick == [test for test in full if "[postgresql]" not in test]
    assert quick


@pytest.mark.slow  # two pytest subprocesses
def test_quick_mode_leaves_out_the_tests_that_wait_out_a_window() -> None:
    """A test holding a race window open idles its worker's core for that long; the full run
    keeps it, the quick run does not (ADR 0031, amended "waits")."""
    waiting = "replay_tests/runtime/test_retry.py::test_a_write_that_finds_sqlite_locked_waits"
    full = _collected(path=WAITING)
    quick = _collected("-m", _quick_expression(), path=WAITING)
    assert any(test.startswith(waiting) for test in full)
    assert not any(test.startswith(waiting) for test in quick)
    assert quick  # the file's other tests stay
