"""The packages type-check: mypy, with the settings in pyproject.toml, reports no error.

`scripts/test` used to run mypy before pytest, alone: on a fresh clone (no cache) that is about
20 s of one core, while the suite itself waits on databases, subprocesses and sockets part of
the time. As a test it runs beside the others on an xdist worker (ADR 0031), and its errors are
reported like any failure. The quick run leaves it out (``slow``); run mypy by hand there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_finds_no_error_in_the_packages() -> None:
    """`mypy` (the packages and settings of pyproject's [tool.mypy]) exits 0."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra, which scripts/test installs")
    done = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
