"""Fixtures shared by the whole suite.

``db_url`` is parametrised over both backends: every test that takes it (or ``loom``) runs on
a fresh SQLite file AND on a fresh PostgreSQL database of the server ``scripts/test`` starts
(``LOOM_TEST_PG_URL``). Without that server the PostgreSQL half is skipped, and the session
says so in one line. That half carries the ``postgres`` marker, so ``-m "not postgres"``
(``scripts/test --quick``) leaves it out instead of reporting a skip per test. Every test gets a
database of its own under a random name, so pytest-xdist workers never share one; a PostgreSQL
database a test is done with is emptied and given to a later test of the same worker. Tests about
SQLite itself (pragmas, the FTS5 index, the file) take ``sqlite_url`` instead.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

import pydantic
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from loom_runtime import Loom

pytest_plugins = ["pytester"]
pytest.register_assert_rewrite("loom_runtime.projection_conformance")

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
NO_PG = "PostgreSQL half skipped: LOOM_TEST_PG_URL is not set (run the suite with scripts/test)"
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
"""The backends of ``db_url`` and ``database_copy``: the PostgreSQL half carries the marker."""
T = TypeVar("T")
Copy: TypeAlias = Callable[[Callable[[str], T]], tuple[str, T]]
"""What ``database_copy`` gives: ``copy(build)`` -> a copy's URL and what ``build`` returned."""
SqliteCopy: TypeAlias = Callable[[Callable[[str], object], str], str]
"""What ``sqlite_copy`` gives: ``copy(build, name)`` -> the URL of a copy named ``name``."""


def pytest_report_header() -> str:
    return f"loom backends: sqlite, {'postgresql at ' + PG_URL if PG_URL else NO_PG}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the ``slow`` tests first, keeping the collection order within each part.

    pytest-xdist (``--dist loadgroup``) hands out every ``xdist_group`` first, largest first,
    then the other tests one by one in this order. Collection puts ``replay_tests/test_*.py``
    last, and with it the long single tests there (mypy, the import-cost subprocesses, the CLI
    walk): they started in the last minute and one worker ran them alone while the other had
    nothing left. Begun first, they overlap the thousands of short tests instead. The sort is
    stable and the same in every worker, as xdist requires of each worker's collection.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionstart() -> None:
    """Build pydantic's schema machinery with the real clock, before any test freezes it.

    typer imports pydantic on its first parse of a command line, and several tests run the CLI
    inside ``freeze_time``: pydantic then captured freezegun's fake ``datetime`` and refused,
    for the rest of that worker, to build any model with a ``datetime`` field (the LangChain
    guide's test failed whenever it ran after such a test on the same worker).
    """
    pydantic.TypeAdapter(datetime)


def pytest_collection_finish() -> None:
    """Move everything collection made (every module, test item and fixture definition) out
    of the garbage collector's sight.

    A worker holds some thousands of modules after collecting the suite, and each full
    collection walked all of them again: every automatic one during the tests, and every
    ``gc.collect()`` a test or the benchmark harness calls (the harness calls one per sample).
    Frozen objects are never collected, which costs nothing here: they live for the whole
    session anyway. Objects the tests create are collected as before.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> pytest.Pytester:
    """pytest's ``pytester``, whose inner sessions block the plugins this suite blocks.

    An inner session reads its own (temporary) project's configuration, not this one, so it
    loaded every installed plugin again, LangChain's kit's among them (langsmith's alone is
    about a second), on each of the plugin tests' runs. The ``-p no:NAME`` options of this
    suite's ``addopts`` are handed on through ``PYTEST_ADDOPTS`` (pytester clears it when it
    starts, and subprocess runs inherit it). So is pytest-asyncio's loop scope, which this
    suite's configuration sets and an inner session's does not (it warned in every one).
    """
    addopts: list[str] = pytestconfig.getini("addopts")
    blocked = [f"-p {value}" for flag, value in itertools.pairwise(addopts) if flag == "-p"]
    scope = "-o asyncio_default_fixture_loop_scope=" + pytestconfig.getini(
        "asyncio_default_fixture_loop_scope"
    )
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join([*blocked, scope]))
    return pytester


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite log file for one test."""
    return f"sqlite:///{tmp_path / 'loom.db'}"


class DatabaseTemplates:
    """Databases built once per worker session, each test given its own copy.

    A fixture that fills a large store (hundreds of writes, each a transaction) paid that for
    every test using it, though its tests only read it or change it for themselves. Here
    ``build(url)`` runs once per worker and backend, into a database no test opens; each test
    gets a copy, so what one test writes no other test can see
    (``replay_tests/test_sqlite_templates.py`` holds that on both backends):

    - SQLite: a file copy made with SQLite's backup API (consistent even if the builder left a
      write-ahead log behind) under the test's own ``tmp_path``;
    - PostgreSQL: ``CREATE DATABASE ... TEMPLATE``, the server's own file copy, given back
      after the test like every test database (emptied for a later one). The builder must
      close its connections (a database with a session open cannot be a template).

    ``build`` must depend on nothing but the URL it is given: its module and name are the
    template's key. What it returns (positions it wrote at, say) is handed to every copy.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._built: dict[tuple[str, str], tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def _template(self, build: Callable[[str], T], backend: str) -> tuple[str, T]:
        """The template's file or database name and the builder's answer, built on first use."""
        key = (backend, f"{build.__module__}.{build.__qualname__}")
        with self._lock:
            if key not in self._built:
                if backend == "sqlite":
                    where = str(self._root / f"template-{len(self._built)}.db")
                    url = f"sqlite:///{where}"
                else:
                    where = f"loom_tpl_{uuid.uuid4().hex[:16]}"
                    _admin_sql(f'CREATE DATABASE "{where}"')
                    url = _postgres_url(where)
                self._built[key] = (where, build(url))
            return self._built[key]

    def copy(self, build: Callable[[str], T], to: Path) -> tuple[str, T]:
        """A SQLite URL of a new file at ``to`` holding what ``build`` wrote to the template,
        and what ``build`` returned."""
        template, answer = self._template(build, "sqlite")
        with (
            contextlib.closing(sqlite3.connect(template)) as source,
            contextlib.closing(sqlite3.connect(to)) as target,
        ):
            source.backup(target)
        return f"sqlite:///{to}", answer

    @contextlib.contextmanager
    def copy_postgres(self, build: Callable[[str], T]) -> Iterator[tuple[str, T]]:
        """A new PostgreSQL database copied from ``build``'s template: yield its URL and what
        ``build`` returned, give it back afterwards."""
        template, answer = self._template(build, "postgresql")
        name = f"loom_t_{uuid.uuid4().hex[:16]}"
        _admin_sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        try:
            yield _postgres_url(name), answer
        finally:
            _databases().give_back(name)

    def drop_postgres(self) -> None:
        """Drop this worker's PostgreSQL templates (at the end of its session)."""
        with self._lock:
            names = [
                where for (backend, _), (where, _) in self._built.items() if backend != "sqlite"
            ]
            self._built = {key: built for key, built in self._built.items() if key[0] == "sqlite"}
        for name in names:
            _drop_database(name)


@pytest.fixture(scope="session")
def database_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseTemplates]:
    """This worker's :class:`DatabaseTemplates` (SQLite templates in its session's temp
    folder; PostgreSQL ones dropped when the session ends)."""
    templates = DatabaseTemplates(tmp_path_factory.mktemp("database-templates"))
    yield templates
    templates.drop_postgres()


@pytest.fixture
def sqlite_copy(tmp_path: Path, database_templates: DatabaseTemplates) -> SqliteCopy:
    """``sqlite_copy(build, name)``: the URL of this test's own SQLite file ``name`` (under its
    ``tmp_path``), a copy of ``build``'s template; for SQLite-only fixtures such as the memory
    kits' stores, whose schema is built once per worker instead of once per test (ADR 0054)."""
    return lambda build, name: database_templates.copy(build, tmp_path / name)[0]


@pytest.fixture(params=BACKENDS)
def database_copy(
    request: pytest.FixtureRequest, tmp_path: Path, database_templates: DatabaseTemplates
) -> Iterator[Copy[Any]]:
    """``database_copy(build)``: a copy of ``build``'s template on each backend (as ``db_url``
    is a fresh database on each), with what ``build`` returned."""
    if request.param == "sqlite":
        names = (tmp_path / f"copy-{n}.db" for n in itertools.count())
        yield lambda build: database_templates.copy(build, next(names))
        return
    if not PG_URL:
        pytest.skip(NO_PG)
    with contextlib.ExitStack() as stack:
        yield lambda build: stack.enter_context(database_templates.copy_postgres(build))


@functools.cache
def _admin() -> Engine:
    """The engine that creates and drops the test databases, one per worker process.

    Its pooled connection is reused by every PostgreSQL test of the worker (and by the crash
    harness' threads), instead of two fresh connections per test.
    """
    return create_engine(PG_URL, isolation_level="AUTOCOMMIT")


def _admin_sql(statement: str) -> None:
    with _admin().connect() as conn:
        conn.exec_driver_sql(statement)


def _postgres_url(name: str) -> str:
    """The test server's URL for database ``name``."""
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


def _create_database() -> str:
    name = f"loom_t_{uuid.uuid4().hex[:16]}"
    _admin_sql(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(name: str) -> None:
    _admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _empty_database(name: str) -> None:
    """Make a used test database as empty as a new one: end its sessions, drop every schema
    (each table, sequence, view, function and type in it), create ``public`` again."""
    _admin_sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )
    engine = create_engine(_postgres_url(name), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            schemas = conn.exec_driver_sql(
                "SELECT nspname FROM pg_namespace"
                " WHERE left(nspname, 3) <> 'pg_' AND nspname <> 'information_schema'"
            ).scalars()
            for schema in list(schemas):
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            conn.exec_driver_sql("CREATE SCHEMA public")
    finally:
        engine.dispose()


class _Databases:
    """Empty test databases, made one ahead and emptied behind on a thread of their own.

    CREATE DATABASE is the server copying a template's files: about 0.1-0.2 s of its CPU
    each, which a thousand PostgreSQL tests paid on a 2-core machine the tests share with it
    (ADR 0054). So a database a test gives back is emptied (:func:`_empty_database`: a few
    milliseconds) and handed to a later test; one is created only when none is free. Each is
    empty when its test gets it, the next made ready while the current test runs, and used
    ones are emptied while the next runs (``replay_tests/test_recycled_databases.py``). One
    that cannot be emptied is dropped instead; the pool is dropped at the end of the session
    (:func:`pytest_sessionfinish`), where a failure to empty or drop one is raised, not lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="loom-test-databases")
        self._next: Future[str] | None = None
        self._free: list[str] = []
        """Emptied databases; read and written on the worker thread only."""
        self._jobs: list[Future[None]] = []

    def _ready(self) -> str:
        """An emptied database, or a new one when none is free (on the worker thread)."""
        return self._free.pop() if self._free else _create_database()

    def _recycle(self, name: str) -> None:
        try:
            _empty_database(name)
        except Exception:
            _drop_database(name)
            raise
        self._free.append(name)

    def take(self) -> str:
        """An empty database's name (the one made ready ahead); starts readying the next."""
        with self._lock:
            ready = self._next or self._worker.submit(self._ready)
            self._next = self._worker.submit(self._ready)
        return ready.result()

    def give_back(self, name: str) -> None:
        """Empty ``name`` in the background, for a later test."""
        with self._lock:
            self._jobs.append(self._worker.submit(self._recycle, name))

    def close(self) -> None:
        """Wait for every emptying, drop every database of the pool (the one made ready ahead
        too), raise the first failure."""
        with self._lock:
            if self._next is not None:
                with contextlib.suppress(Exception):
                    self._free.append(self._next.result())
                self._next = None
            jobs, self._jobs = self._jobs, []
        failure: BaseException | None = None
        for job in jobs:
            failure = failure or job.exception()
        drops = [self._worker.submit(_drop_database, name) for name in self._free]
        self._free = []
        self._worker.shutdown(wait=True)
        for drop in drops:
            drop.result()
        if failure is not None:
            raise failure


@functools.cache
def _databases() -> _Databases:
    """This worker's (and this module instance's) maker of test databases."""
    return _Databases()


def pytest_sessionfinish() -> None:
    if _databases.cache_info().currsize:
        _databases().close()


def fresh_postgres_database() -> Iterator[str]:
    """An empty database on the test server: yield its URL, empty it for a later test
    afterwards."""
    name = _databases().take()
    try:
        yield _postgres_url(name)
    finally:
        _databases().give_back(name)


def fresh_postgres_engine() -> Iterator[Engine]:
    """An engine on an empty database of the test server (:func:`fresh_postgres_database`),
    disposed of before the database is given back: the body of a PostgreSQL twin's ``engine``
    fixture, which re-runs a SQLite file's store tests against PostgreSQL."""
    for url in fresh_postgres_database():
        engine = create_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


@pytest.fixture(params=BACKENDS)
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
