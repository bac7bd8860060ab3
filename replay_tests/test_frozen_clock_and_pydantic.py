"""A test that runs the CLI under ``freeze_time`` leaves pydantic working for the tests after it.

typer imports pydantic on its first parse of a command line; imported with the clock frozen,
pydantic kept freezegun's fake ``datetime`` and refused every later model with a ``datetime``
field in that process. ``conftest.pytest_sessionstart`` builds pydantic's schema machinery
first. The order that failed is run here in one process, whatever xdist would have done.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FROZEN_CLI = (
    "replay_tests/knowledge/test_document_retention.py::test_loom_retain_scope_runs_from_the_cli"
)
PYDANTIC_AFTER = (
    "replay_tests/test_readme.py::test_the_runnable_blocks_of_each_page_run_in_order"
    "[docs/guides/use-langchain-or-llamaindex.md]"
)


@pytest.mark.slow
def test_a_frozen_cli_test_then_a_pydantic_model_with_a_datetime() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            FROZEN_CLI,
            PYDANTIC_AFTER,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
