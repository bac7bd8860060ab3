"""Fixtures shared by the whole suite.

``db_url`` is parametrised over both backends: every test that takes it (or ``loom``) runs on
a fresh SQLite file AND on a fresh PostgreSQL database of the server ``scripts/test`` starts
(``LOOM_TEST_PG_URL``). Without that server the PostgreSQL half is skipped, and the session
says so in one line. That half carries the ``postgres`` marker, so ``-m "not postgres"``
(``scripts/test --quick``) leaves it out instead of reporting a skip per test. Every database is
created per test under a random name, so pytest-xdist workers never share one. Tests about
SQLite itself (pragmas, the FTS5 index, the file) take ``sqlite_url`` instead.
"""

from __future__ import annotations

import functools
import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from loom_runtime import Loom

pytest_plugins = ["pytester"]
pytest.register_assert_rewrite("loom_runtime.projection_conformance")

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
NO_PG = "PostgreSQL half skipped: LOOM_TEST_PG_URL is not set (run the suite with scripts/test)"


def pytest_report_header() -> str:
    return f"loom backends: sqlite, {'postgresql at ' + PG_URL if PG_URL else NO_PG}"


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> pytest.Pytester:
    """pytest's ``pytester``, whose inner sessions block the plugins this suite blocks.

    An inner session reads its own (temporary) project's configuration, not this one, so it
    loaded every installed plugin again, LangChain's kit's among them (langsmith's alone is
    about a second), on each of the plugin tests' runs. The ``-p no:NAME`` options of this
    suite's ``addopts`` are handed on through ``PYTEST_ADDOPTS`` (pytester clears it when it
    starts, and subprocess runs inherit it).
    """
    addopts: list[str] = pytestconfig.getini("addopts")
    blocked = [f"-p {value}" for flag, value in itertools.pairwise(addopts) if flag == "-p"]
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(blocked))
    return pytester


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite log file for one test."""
    return f"sqlite:///{tmp_path / 'loom.db'}"


@functools.cache
def _admin() -> Engine:
    """The engine that creates and drops the test databases, one per worker process.

    Its pooled connection is reused by every PostgreSQL test of the worker (and by the crash
    harness' threads), instead of two fresh connections per test.
    """
    return create_engine(PG_URL, isolation_level="AUTOCOMMIT")


def fresh_postgres_database() -> Iterator[str]:
    """Create an empty database on the test server, yield its URL, drop it afterwards."""
    name = f"loom_t_{uuid.uuid4().hex[:16]}"
    with _admin().connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with _admin().connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty log database: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'loom.db'}"
        return
    if not PG_URL:
        pytest.skip(NO_PG)
    yield from fresh_postgres_database()


@pytest.fixture
def loom(db_url: str) -> Iterator[Loom]:
    """A Loom on a fresh log (each backend), closed after the test."""
    with Loom(db_url) as instance:
        yield instance
