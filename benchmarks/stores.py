"""Fresh databases for one sample each, and the facts about them a report must state.

Every sample gets a database nobody has written to: a SQLite file in a new ``mktemp -d``
directory, or a new PostgreSQL database created on the server named by ``LOOM_TEST_PG_URL``
and dropped afterwards. A log that grew in an earlier sample would make later samples slower
and turn the order of arms into a result.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import make_url

from benchmarks.harness import scratch_directory
from loom_runtime import Loom

_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@contextmanager
def fresh_sqlite() -> Iterator[tuple[str, Path]]:
    """A loom URL for a SQLite file in a new scratch directory, and the file's path."""
    with scratch_directory() as directory:
        path = directory / "loom.db"
        yield f"sqlite:///{path}", path


def sqlite_bytes(path: Path) -> int:
    """The database's size once the WAL is checkpointed into it (call after closing loom).

    Without the checkpoint the size would depend on when SQLite last moved WAL pages into the
    main file, not on what was stored.
    """
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def synchronous_in_effect(loom: Loom) -> str:
    """The ``PRAGMA synchronous`` the log's own write connection actually runs with.

    Asked of the connection rather than read from the settings, because a persistence module
    may ignore the setting; a comparison between arms in different durability classes would
    otherwise be reported as a comparison of persistence modules.
    """
    return synchronous_name(_pool_synchronous(loom))


def synchronous_name(level: float) -> str:
    """SQLite's name for a ``PRAGMA synchronous`` number (``2`` -> ``FULL``)."""
    return _SYNCHRONOUS_NAMES.get(int(level), str(level))


def writer_synchronous(loom: Loom) -> int:
    """The ``PRAGMA synchronous`` of the connection the log's appends are committed on, as a
    number (``synchronous_name`` names it).

    The built-in recorder commits every append on a connection it holds (``writing()``, ADR
    0048), not on one of its pool's: that one is asked, inside the transaction its appends
    take (an empty one here, committed with nothing to write). Call it on the ``Loom`` a timed
    run used, after the run, so the answer is that run's writer's. ``sqlalchemy`` commits
    through its datastore's sessions, which are asked instead."""
    if loom.log.settings.persistence == "sqlalchemy":
        return _pool_synchronous(loom)
    recorder: Any = loom.log.application.recorder  # type: ignore[attr-defined]
    with recorder.writing() as cursor:
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])


def _pool_synchronous(loom: Loom) -> int:
    """``PRAGMA synchronous`` asked through the datastore's own transaction (its pool)."""
    datastore: Any = loom.log.application.recorder.datastore  # type: ignore[attr-defined]
    if loom.log.settings.persistence == "sqlalchemy":
        with datastore.transaction(commit=False) as session:
            level = session.execute(text("PRAGMA synchronous")).scalar()
    else:
        with datastore.transaction(commit=False) as cursor:
            cursor.execute("PRAGMA synchronous")
            level = cursor.fetchone()[0]
    return int(level)


@contextmanager
def fresh_postgres(admin_url: str, *, template: str | None = None) -> Iterator[str]:
    """A loom URL for a new database on the server at ``admin_url``; dropped after.

    Empty, or a copy of the database named ``template`` (see :func:`loom_schema_template`)."""
    name = f"loom_bench_{uuid.uuid4().hex[:12]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
    with _admin(admin_url) as connection:
        connection.execute(create)
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with _admin(admin_url) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def loom_schema_template(admin_url: str) -> Iterator[str]:
    """The name of a database holding loom's schema and nothing else, made once, to pass as
    :func:`fresh_postgres`'s ``template``; dropped after.

    A sample that needs the schema in place before its clock starts (workers that must not
    race on ``CREATE TABLE``) gets it by the server's file copy instead of loom creating it
    again: the same catalog, none of the DDL's round trips and server work per sample."""
    with fresh_postgres(admin_url) as url:
        with Loom(url) as loom:
            loom.log  # noqa: B018 - creates the schema
        # closed: a template may have no other session while the server copies it
        database = make_url(url).database
        assert database is not None
        yield database


def postgres_description(admin_url: str) -> str:
    """Server version and the durability settings in force: PG figures mean little without."""
    with _admin(admin_url) as connection:
        version = connection.execute("SHOW server_version").fetchone()
        fsync = connection.execute("SHOW fsync").fetchone()
        commit = connection.execute("SHOW synchronous_commit").fetchone()
    assert version is not None and fsync is not None and commit is not None
    return f"PostgreSQL {version[0]}, fsync={fsync[0]}, synchronous_commit={commit[0]}"


def _admin(admin_url: str) -> psycopg.Connection[Any]:
    url = make_url(admin_url).set(drivername="postgresql")
    return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)
