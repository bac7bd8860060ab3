"""The packages type-check: mypy, with the settings in pyproject.toml, reports no error.

`scripts/test` used to run mypy before pytest, alone: on a fresh clone (no cache) that is about
20 s of one core, while the suite itself waits on databases, subprocesses and sockets part of
the time. As a test it runs beside the others on an xdist worker (ADR 0031), and its errors are
reported like any failure. The quick run leaves it out (``slow``); run mypy by hand there.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("loom_runtime", "loom_memory", "loom_knowledge")


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


def _skipped() -> set[str]:
    """The packages pyproject's mypy overrides skip (``follow_imports = "skip"``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {
        pattern.removesuffix(".*")
        for override in config["tool"]["mypy"]["overrides"]
        if override.get("follow_imports") == "skip"
        for pattern in override["module"]
    }


def _imported(package: Path) -> set[str]:
    """The top-level packages the modules under ``package`` import."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return found


def test_no_package_mypy_skips_is_imported_by_loom() -> None:
    """mypy skips some packages loom reaches only through others: what they give is Any. One
    that loom imported itself would be checked against nothing, silently, so it fails here."""
    skipped = _skipped()
    assert {"openai", "urllib3"} <= skipped  # the control: both override groups are read
    imported = set().union(*(_imported(ROOT / package) for package in PACKAGES))
    assert "sqlalchemy" in imported  # the control: the walk finds real imports
    assert sorted(skipped & imported) == []
