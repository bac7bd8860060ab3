"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loom_runtime import Loom

pytest_plugins = ["pytester"]


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite log file for one test."""
    return f"sqlite:///{tmp_path / 'loom.db'}"


@pytest.fixture
def loom(db_url: str) -> Iterator[Loom]:
    """A Loom on a fresh log, closed after the test."""
    with Loom(db_url) as instance:
        yield instance
