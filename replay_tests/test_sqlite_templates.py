"""A database built once and copied per test leaks nothing from one test to the next.

``sqlite_templates`` (``replay_tests/conftest.py``) runs a fixture's expensive build once per
worker and hands each test a file copy. These tests hold the copy to what a fresh build gives:
a write to one copy is absent from the next copy and from the template, a copy is a file of
the test's own, and the build runs once however many copies are taken.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from replay_tests.conftest import SqliteTemplates

# One worker runs the three, in file order, so the last follows a test that wrote its copy.
pytestmark = pytest.mark.xdist_group("sqlite-templates")

BUILDS: list[str] = []


def _build(url: str) -> None:
    """Two rows; records each call so the tests can count builds."""
    BUILDS.append(url)
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute("CREATE TABLE note (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO note (body) VALUES (?)", [("one",), ("two",)])


def _bodies(url: str) -> list[str]:
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
        return [body for (body,) in conn.execute("SELECT body FROM note ORDER BY id")]


def _write(url: str) -> None:
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute("DELETE FROM note WHERE body = 'one'")
        conn.execute("INSERT INTO note (body) VALUES ('leaked')")


def test_a_write_to_one_copy_is_absent_from_the_next_and_from_the_template(
    sqlite_templates: SqliteTemplates, tmp_path: Path
) -> None:
    first = sqlite_templates.copy(_build, tmp_path / "first.db")
    _write(first)
    assert _bodies(first) == ["two", "leaked"]  # the probe sees a write where there is one

    second = sqlite_templates.copy(_build, tmp_path / "second.db")
    assert _bodies(second) == ["one", "two"]
    [template] = {url for url in BUILDS}
    assert _bodies(template) == ["one", "two"]
    assert template not in (first, second)


def test_the_build_runs_once_per_worker_however_many_copies(
    sqlite_templates: SqliteTemplates, tmp_path: Path
) -> None:
    for name in ("a.db", "b.db", "c.db"):
        assert _bodies(sqlite_templates.copy(_build, tmp_path / name)) == ["one", "two"]
    assert len(BUILDS) == 1


def test_a_test_after_a_writing_test_gets_a_pristine_copy(
    sqlite_templates: SqliteTemplates, tmp_path: Path
) -> None:
    url = sqlite_templates.copy(_build, tmp_path / "again.db")
    assert _bodies(url) == ["one", "two"]
    _write(url)
