"""A database built once and copied per test leaks nothing from one test to the next.

``database_templates`` (``replay_tests/conftest.py``) runs a fixture's expensive build once per
worker and backend and hands each test a copy (a SQLite file copy, or a PostgreSQL database
made with ``CREATE DATABASE ... TEMPLATE``). These tests hold the copy to what a fresh build
gives, on each backend: a write to one copy is absent from the next copy and from the
template, a copy is a database of the test's own, and the build runs once however many copies
are taken.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, text

if TYPE_CHECKING:
    from replay_tests.conftest import Copy, DatabaseTemplates

# One worker runs these, in file order, so the last follows a test that wrote its copy.
pytestmark = pytest.mark.xdist_group("database-templates")

BUILDS: list[str] = []


def _build(url: str) -> str:
    """Two rows; records each call so the tests can count builds. Returns its own URL."""
    BUILDS.append(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE note (id INTEGER PRIMARY KEY, body TEXT)"))
        conn.execute(text("INSERT INTO note (id, body) VALUES (1, 'one'), (2, 'two')"))
    engine.dispose()
    return url


def _bodies(url: str) -> list[str]:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = [body for (body,) in conn.execute(text("SELECT body FROM note ORDER BY id"))]
    engine.dispose()
    return found


def _write(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM note WHERE body = 'one'"))
        conn.execute(text("INSERT INTO note (id, body) VALUES (3, 'leaked')"))
    engine.dispose()


def test_a_write_to_one_copy_is_absent_from_the_next_and_from_the_template(
    database_copy: Copy[str], database_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    first, template = database_copy(_build)
    _write(first)
    assert _bodies(first) == ["two", "leaked"]  # the probe sees a write where there is one

    second, same = database_copy(_build)
    assert same == template
    assert _bodies(second) == ["one", "two"]
    assert _bodies(template) == ["one", "two"]
    assert len({first, second, template}) == 3


def test_the_build_runs_once_per_worker_however_many_copies(
    database_copy: Copy[str], database_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    copies = [database_copy(_build)[0] for _ in range(3)]
    assert [_bodies(url) for url in copies] == [["one", "two"]] * 3
    backend = copies[0].split(":")[0]
    assert len([url for url in BUILDS if url.startswith(backend)]) == 1


def test_a_test_after_a_writing_test_gets_a_pristine_copy(
    database_copy: Copy[str], tmp_path: Path
) -> None:
    url, _ = database_copy(_build)
    assert _bodies(url) == ["one", "two"]
    _write(url)
