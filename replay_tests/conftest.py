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

import contextlib
import functools
import itertools
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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


class SqliteTemplates:
    """SQLite databases built once per worker session, each test given its own file copy.

    A fixture that fills a large store (hundreds of writes, each a transaction) paid that for
    every test using it, though its tests only read it or change it for themselves. Here
    ``build(url)`` runs once per worker, into a file no test opens; each test gets a copy made
    with SQLite's backup API (a consistent copy even if the builder left a write-ahead log
    behind) under its own ``tmp_path``, so what one test writes no other test can see
    (``replay_tests/test_sqlite_templates.py`` holds that). ``build`` must depend on nothing
    but the URL it is given: its module and name are the template's key.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._built: dict[str, Path] = {}
        self._lock = threading.Lock()

    def copy(self, build: Callable[[str], None], to: Path) -> str:
        """A SQLite URL of a new file at ``to`` holding what ``build`` wrote to the template."""
        key = f"{build.__module__}.{build.__qualname__}"
        with self._lock:
            template = self._built.get(key)
            if template is None:
                template = self._root / f"template-{len(self._built)}.db"
                build(f"sqlite:///{template}")
                self._built[key] = template
        with (
            contextlib.closing(sqlite3.connect(template)) as source,
            contextlib.closing(sqlite3.connect(to)) as target,
        ):
            source.backup(target)
        return f"sqlite:///{to}"


@pytest.fixture(scope="session")
def sqlite_templates(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplates:
    """This worker's :class:`SqliteTemplates` (templates live in its session's temp folder)."""
    return SqliteTemplates(tmp_path_factory.mktemp("sqlite-templates"))


@functools.cache
def _admin() -> Engine:
    """The engine that creates and drops the test databases, one per worker process.

    Its pooled connection is reused by every PostgreSQL test of the worker (and by the crash
    harness' threads), instead of two fresh connections per test.
    """
    return create_engine(PG_URL, isolation_level="AUTOCOMMIT")


def _create_database() -> str:
    name = f"loom_t_{uuid.uuid4().hex[:16]}"
    with _admin().connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(name: str) -> None:
    with _admin().connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _Databases:
    """Empty test databases, created one ahead and dropped behind on a thread of their own.

    CREATE and DROP DATABASE are mostly the server copying and deleting files: the test waited
    for both, about as long as a small PostgreSQL test's own work. Here the next test's
    database is created while the current test runs, and a used one is dropped while the next
    runs; each is still new and empty when its test gets it. A drop that fails is raised at
    the end of the session (:func:`pytest_sessionfinish`), not lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="loom-test-databases")
        self._next: Future[str] | None = None
        self._drops: list[Future[None]] = []

    def take(self) -> str:
        """A new empty database's name (the one made ahead); starts making the next."""
        with self._lock:
            ready = self._next or self._worker.submit(_create_database)
            self._next = self._worker.submit(_create_database)
        return ready.result()

    def give_back(self, name: str) -> None:
        """Drop ``name`` in the background."""
        with self._lock:
            self._drops.append(self._worker.submit(_drop_database, name))

    def close(self) -> None:
        """Drop the database made ahead, wait for every drop, raise the first that failed."""
        with self._lock:
            if self._next is not None:
                with contextlib.suppress(Exception):
                    self._drops.append(self._worker.submit(_drop_database, self._next.result()))
                self._next = None
            drops, self._drops = self._drops, []
        self._worker.shutdown(wait=True)
        for drop in drops:
            drop.result()


@functools.cache
def _databases() -> _Databases:
    """This worker's (and this module instance's) maker of test databases."""
    return _Databases()


def pytest_sessionfinish() -> None:
    if _databases.cache_info().currsize:
        _databases().close()


def fresh_postgres_database() -> Iterator[str]:
    """An empty database on the test server: yield its URL, drop it afterwards."""
    name = _databases().take()
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        _databases().give_back(name)


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
