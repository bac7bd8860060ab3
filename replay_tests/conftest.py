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
import re
import sqlite3
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import freezegun
import pydantic
import pytest
import typer
import typer.core
import typer.main
import typer.testing
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from loom_runtime import Loom

if TYPE_CHECKING:
    import psycopg

pytest_plugins = ["pytester"]
pytest.register_assert_rewrite("loom_runtime.projection_conformance")

# Every HTTP client a provider SDK builds (one per test that makes a client) loads the CA file
# of its TLS context: certifi's bundle cost ~25 ms a client (the capture tests: 9.3 s of CPU
# with it, 7.3 s without; ADR 0054, "quick3"). No test talks TLS, so the suite's processes
# (and those they start) trust one certificate that verifies nothing (see the file), even where
# the environment names a bundle of its own: no test can depend on which, and a machine that
# sets SSL_CERT_FILE for every process (this project's does) lost the saving in every run.
os.environ["SSL_CERT_FILE"] = str(Path(__file__).with_name("trusts-nothing.pem"))

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
NO_PG = "PostgreSQL half skipped: LOOM_TEST_PG_URL is not set (run the suite with scripts/test)"
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
"""The backends of ``db_url`` and ``database_copy``: the PostgreSQL half carries the marker."""
T = TypeVar("T")
Copy: TypeAlias = Callable[[Callable[[str], T]], tuple[str, T]]
"""What ``database_copy`` gives: ``copy(build)`` -> a copy's URL and what ``build`` returned."""
PostgresKit: TypeAlias = Callable[[Callable[[str], object]], str]
"""What ``postgres_kit`` gives: ``kit(build)`` -> the URL of ``build``'s database as just built."""
SqliteCopy: TypeAlias = Callable[[Callable[[str], object], str], str]
"""What ``sqlite_copy`` gives: ``copy(build, name)`` -> the URL of a copy named ``name``."""


def _commands_of(app: typer.Typer) -> tuple[object, ...]:
    """What :func:`typer.main.get_command` builds a Click command from: the app's callback,
    commands and groups, each group's own recursively (by identity: any registration changes it)."""
    return (
        id(app.registered_callback),
        *map(id, app.registered_commands),
        *(
            (id(group), group.typer_instance and _commands_of(group.typer_instance))
            for group in app.registered_groups
        ),
    )


_Command: TypeAlias = typer.core.TyperGroup | typer.core.TyperCommand
"""What :func:`typer.main.get_command` builds: a group, or one command for a one-command app."""
_built_commands: dict[int, tuple[tuple[object, ...], typer.Typer, _Command]] = {}


def _built_command(app: typer.Typer) -> _Command:
    """``typer.main.get_command(app)``, built once per app for every ``CliRunner().invoke``.

    Typer's runner builds the whole Click command tree again on each invoke, reading every
    command function's signature and type hints: ~40 ms for ``loom``'s, 400 times in the quick
    run (~9% of its CPU). The command is rebuilt when anything is registered on the app
    since; Click creates a new context per invocation, so a built command holds no state of a
    previous one (``replay_tests/test_cli_command_cache.py``).
    """
    shape = _commands_of(app)
    built = _built_commands.get(id(app))
    if built is None or built[0] != shape or built[1] is not app:
        command = typer.main.get_command(app)
        assert isinstance(command, typer.core.TyperGroup | typer.core.TyperCommand)
        built = (shape, app, command)
        _built_commands[id(app)] = built
    return built[2]


# The name typer.testing's runner calls; typed there as returning its vendored Click's Command.
typer.testing._get_command = _built_command  # type: ignore[assignment]


FROZEN_CLOCK_SKIPS: Final = (
    "anthropic",
    "openai",
    "llama_index",
    "mcp",
    "numpy",
    "hypothesis",
    "psycopg",
)
"""Packages whose modules ``freeze_time`` leaves alone (freezegun's ``extend_ignore_list``).

Each ``freeze_time`` walked every loaded module with ``dir()`` to find the clock functions it
imported: ~0.1 s per start in a worker that had loaded the provider SDKs (anthropic's types
alone are 3,300 modules), 8.6 s of the quick run. No test freezes the clock around these
packages' code. One that did would see the real clock wherever one of their frames is among
the five nearest callers (freezegun's rule for ignored modules): add such a test's package
nowhere here.

psycopg (and psycopg_pool) is here for the opposite reason: it must always see the real clock.
A frozen clock is every thread's, and the test databases are emptied on a thread of their own
(:class:`_Databases`) while other tests freeze it. psycopg, connecting, compared its deadline
on the real monotonic clock with a frozen one (seconds since 1970) and timed out at once
(``replay_tests/test_recycled_databases.py``). Its timeouts are the network's, never a test's."""
freezegun.configure(extend_ignore_list=list(FROZEN_CLOCK_SKIPS))


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


_IMPORTED_AT_COLLECTION = pytest.StashKey["tuple[frozenset[str], frozenset[Path]]"]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note what collection imported (:func:`imported_at_collection`), then move everything
    collection made (every module, test item and fixture definition) out
    of the garbage collector's sight.

    A worker holds some thousands of modules after collecting the suite, and each full
    collection walked all of them again: every automatic one during the tests, and every
    ``gc.collect()`` a test or the benchmark harness calls (the harness calls one per sample).
    Frozen objects are never collected, which costs nothing here: they live for the whole
    session anyway. Objects the tests create are collected as before.

    The oldest generation is collected after 100 collections of the middle one instead of 10:
    modules the tests import later (SDKs, the CLI's toolkit) and their caches are not frozen,
    and each full collection walked them again, 0.15-0.25 s a time, ~11% of a worker's CPU.
    A cycle that outlives two young collections waits longer to be freed; none holds
    anything a test waits for (ADR 0054, amended "gcfreeze").
    """
    modules = list(sys.modules.items())
    session.config.stash[_IMPORTED_AT_COLLECTION] = (
        frozenset(name.partition(".")[0] for name, _ in modules),
        frozenset(
            Path(file) for _, module in modules if (file := getattr(module, "__file__", None))
        ),
    )
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 100)


@pytest.fixture
def imported_at_collection(pytestconfig: pytest.Config) -> frozenset[str] | None:
    """The top-level packages imported once this session had collected its tests, or None
    when it collected only part of the suite (some test file was not imported).

    Every pytest-xdist worker collects every test file before it runs one, so this is what
    each worker paid for collection alone (``replay_tests/test_collection_imports.py``)."""
    names, files = pytestconfig.stash[_IMPORTED_AT_COLLECTION]
    suite = Path(__file__).parent
    return names if set(suite.rglob("test_*.py")) <= files else None


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


@pytest.fixture
def demo_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where ``loom demo`` without ``--db`` runs in a test: the working directory, with
    ``LOOM_DB_URL`` unset (the demo must not touch either)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    return tmp_path


@pytest.fixture(scope="session", autouse=True)
def session_tempfiles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder :mod:`tempfile` makes its files in, in this process, for the session: one in
    the session's base folder, which pytest removes with its older runs.

    What the code under test keeps there on purpose (``loom demo``'s log and the LangGraph
    example's, which they print for the user to explore; a worker's output files) went to the
    system's temporary folder, and every run of the suite left such folders behind. A process
    the tests start uses ``TMPDIR`` as before."""
    folder = tmp_path_factory.getbasetemp() / "tempfile"
    folder.mkdir(exist_ok=True)
    previous, tempfile.tempdir = tempfile.tempdir, str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous


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


_CATALOG_FINGERPRINT = """
WITH ns AS (
  SELECT oid, nspname FROM pg_namespace
  WHERE left(nspname, 3) <> 'pg_' AND nspname <> 'information_schema'
), rel AS (SELECT * FROM pg_class WHERE relnamespace IN (SELECT oid FROM ns))
SELECT md5(concat_ws('|',
  (SELECT string_agg(concat_ws(':', nspname, nspowner, nspacl), ',' ORDER BY nspname)
     FROM pg_namespace WHERE oid IN (SELECT oid FROM ns)),
  (SELECT string_agg(concat_ws(':', oid::regclass, relkind, relpersistence, relowner, relacl,
       reloptions, relrowsecurity, relreplident), ',' ORDER BY oid) FROM rel),
  (SELECT string_agg(concat_ws(':', a.attrelid::regclass, a.attname, a.atttypid, a.atttypmod,
       a.attnotnull, a.attisdropped, a.attidentity, a.attgenerated,
       pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY a.attrelid, a.attnum)
     FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid IN (SELECT oid FROM rel) AND a.attnum > 0),
  (SELECT string_agg(pg_get_indexdef(indexrelid), ',' ORDER BY indexrelid) FROM pg_index
     WHERE indrelid IN (SELECT oid FROM rel)),
  (SELECT string_agg(concat_ws(':', conname, pg_get_constraintdef(oid)), ',' ORDER BY oid)
     FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ns)),
  (SELECT string_agg(concat_ws(':', pg_get_triggerdef(oid), tgenabled), ',' ORDER BY oid)
     FROM pg_trigger WHERE NOT tgisinternal),
  (SELECT string_agg(pg_get_functiondef(oid), ',' ORDER BY oid) FROM pg_proc
     WHERE pronamespace IN (SELECT oid FROM ns) AND prokind IN ('f', 'p')),
  (SELECT string_agg(concat_ws(':', typname, typtype), ',' ORDER BY oid) FROM pg_type
     WHERE typnamespace IN (SELECT oid FROM ns)),
  (SELECT string_agg(concat_ws(':', seqrelid, seqstart, seqincrement, seqmax, seqmin, seqcycle),
     ',' ORDER BY seqrelid) FROM pg_sequence),
  (SELECT string_agg(concat_ws(':', ev_class::regclass, rulename, ev_enabled), ',' ORDER BY oid)
     FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM rel)),
  (SELECT string_agg(polname, ',' ORDER BY oid) FROM pg_policy),
  (SELECT string_agg(concat_ws(':', extname, extversion), ',' ORDER BY oid) FROM pg_extension),
  (SELECT string_agg(setconfig::text, ',') FROM pg_db_role_setting),
  (SELECT count(*) FROM pg_largeobject_metadata)
))
"""
"""One digest of everything a test could add to, change in or drop from a database's schemas
besides rows: relations, columns and defaults, indexes, constraints, triggers, functions,
types, sequences' parameters, rules and views, policies, extensions, settings, large objects.
The system's schemas are left out, as is what TRUNCATE itself changes (files, statistics)."""


TERMINATE_WAIT_MS = 10_000
"""How long ending a recycled database's sessions waits for each to exit. Without a timeout
``pg_terminate_backend`` only signals: on a loaded machine a session was still listed when
the next test got the database (``test_a_database_given_back_comes_back_empty`` failed)."""


class _KitDatabase:
    """One database of :class:`PostgresKits`: its name, its tables and what they held when
    built (rows in COPY's binary form, each sequence's value), the digest of its schema, and
    the one session that resets it (kept open: a new session costs the server a process)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.url = _postgres_url(name)
        self._conninfo = make_url(self.url).set(drivername="postgresql").render_as_string(False)
        import psycopg  # here, not at the top: a session without PostgreSQL never needs it

        self._conn = conn = psycopg.connect(self._conninfo, autocommit=True)
        with conn.transaction():
            self.fingerprint = conn.execute(_CATALOG_FINGERPRINT).fetchone()
            tables = conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p')"
                " AND left(n.nspname, 3) <> 'pg_' AND n.nspname <> 'information_schema'"
                " ORDER BY c.oid"
            ).fetchall()
            self.tables = [table for (table,) in tables]
            self.rows: dict[str, bytes] = {}
            for table in self.tables:
                if conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() == (True,):
                    with conn.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
                        self.rows[table] = b"".join(bytes(block) for block in copy)
            self.sequences = self._sequences(conn)

    @staticmethod
    def _sequences(conn: psycopg.Connection[Any]) -> list[tuple[str, int, bool]]:
        names = conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE c.relkind = 'S'"
            " AND left(n.nspname, 3) <> 'pg_' AND n.nspname <> 'information_schema'"
            " ORDER BY c.oid"
        ).fetchall()
        return [
            (name, *conn.execute(f"SELECT last_value, is_called FROM {name}").fetchone())
            for (name,) in names
        ]

    def reset(self) -> bool:
        """Bring the database back to its just-built state, after ending its other sessions;
        False, and nothing restored, when its schema is no longer the one built."""
        conn = self._conn
        with conn.transaction():
            conn.execute(  # with a timeout, it waits until each session has gone
                f"SELECT pg_terminate_backend(pid, {TERMINATE_WAIT_MS}) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if conn.execute(_CATALOG_FINGERPRINT).fetchone() != self.fingerprint:
                return False
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(f"TRUNCATE {', '.join(self.tables)} RESTART IDENTITY")
            for table, rows in self.rows.items():
                with conn.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                    copy.write(rows)
            for name, value, called in self.sequences:
                conn.execute("SELECT setval(%s, %s, %s)", (name, value, called))
        return True

    def give_back(self) -> None:
        """Close the resetting session and give the database back to be emptied."""
        self._conn.close()
        _databases().give_back(self.name)


class PostgresKits:
    """PostgreSQL databases whose schema is built once per worker and reset for every test.

    The memory kits' PostgreSQL classes (about 600 tests) each created a store's tables, its
    indexes, functions and triggers (and, for the event-sourced ones, a log's), then dropped
    them: the server's catalog work that ADR 0054 measured as most of its CPU. Here
    ``build(url)`` runs once per worker into a database of :class:`_Databases`, and each test
    that asks for it afterwards gets that database back as it was just built: every table
    emptied (TRUNCATE, in one transaction), the rows ``build`` wrote put back, every sequence
    set to its built value, every other session ended. A test whose schema changed (a table
    added, dropped or altered, a function replaced: :data:`_CATALOG_FINGERPRINT`) gives the
    database back to be emptied instead, and the next test gets a new build.
    ``replay_tests/test_postgres_kits.py`` holds all of that.
    """

    def __init__(self) -> None:
        self._built: dict[str, _KitDatabase] = {}

    @contextlib.contextmanager
    def use(self, build: Callable[[str], object]) -> Iterator[str]:
        """Yield the URL of ``build``'s database in its just-built state; reset it after."""
        key = f"{build.__module__}.{build.__qualname__}"
        database = self._built.pop(key, None)
        if database is None:
            name = _databases().take()
            try:
                build(_postgres_url(name))
                database = _KitDatabase(name)
            except BaseException:
                _databases().give_back(name)
                raise
        try:
            yield database.url
        finally:
            try:
                kept = database.reset()
            except Exception:
                kept = False
            if kept:
                self._built[key] = database
            else:
                database.give_back()

    def close(self) -> None:
        """Give every built database back (at the end of the worker's session)."""
        for database in self._built.values():
            database.give_back()
        self._built = {}


@pytest.fixture(scope="session")
def postgres_kits() -> Iterator[PostgresKits]:
    """This worker's :class:`PostgresKits`."""
    kits = PostgresKits()
    yield kits
    kits.close()


@pytest.fixture
def postgres_kit(postgres_kits: PostgresKits) -> Iterator[PostgresKit]:
    """``postgres_kit(build)``: the URL of ``build``'s database, built once per worker, in its
    just-built state for this test (:class:`PostgresKits`); skips without a server."""
    if not PG_URL:
        pytest.skip(NO_PG)
    with contextlib.ExitStack() as stack:
        yield lambda build: stack.enter_context(postgres_kits.use(build))


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
    (each table, sequence, view, function and type in it), create ``public`` again, and end
    the emptying's own session too: a client's goodbye does not wait for its server process to
    exit, which was still listed when the next test got the database (1% of the time)."""
    _end_sessions(name)
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
    _end_sessions(name)


def _end_sessions(name: str) -> None:
    """End every session on database ``name``, waiting (up to a timeout) until each is gone."""
    _admin_sql(
        f"SELECT pg_terminate_backend(pid, {TERMINATE_WAIT_MS}) FROM pg_stat_activity"
        f" WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )


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
        """Emptied databases; read and written on the worker thread only (once it exists)."""
        self._jobs: list[Future[None]] = []
        # The first database is made and emptied here, on the caller's thread, while the worker
        # has no job yet: that runs every import and first engine the worker's jobs need, so
        # the worker never creates a logger. pytest walks logging's table of loggers without
        # its lock as it sets up each test, and a logger created meanwhile fails that set-up.
        self._recycle(_create_database())

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


def postgres_databases() -> Callable[[], contextlib.AbstractContextManager[str]]:
    """:func:`fresh_postgres_database` as a factory of ``with`` blocks, for threads of a test's
    own: this worker's maker of databases is made here, on the caller's thread (see
    :class:`_Databases`), not on the first of those threads to ask."""
    _databases()
    return contextlib.contextmanager(fresh_postgres_database)


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


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's ``tmp_path``, without its numbering: to number a test's folder pytest lists
    every folder made so far in the session's base folder, a scan that grows with each test
    (0.8 ms a test by a worker's 1,500th; ADR 0054, "quick3"). This one is made by
    :func:`tempfile.mkdtemp` in the same base folder, named after its test as pytest names
    it, and kept with the session's folder (pytest's default; the suite sets no
    ``tmp_path_retention_policy``, whose ``failed`` this fixture would not apply)."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp_path_factory.getbasetemp()))


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
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, for a test of that backend alone (skipped without
    a test server)."""
    if not PG_URL:
        pytest.skip(NO_PG)
    yield from fresh_postgres_database()


@pytest.fixture
def loom(db_url: str) -> Iterator[Loom]:
    """A Loom on a fresh log (each backend), closed after the test."""
    with Loom(db_url) as instance:
        yield instance
