"""``postgres_kit``'s databases: built once per worker, found by every test as just built.

A database of :class:`PostgresKits` is reset between tests instead of built again, so these
tests check that a reset leaves nothing of the previous test: no row it wrote (the rows the
build wrote are back, and no trigger ran twice), no sequence value it drew, no session it left
open, and no schema change (a changed schema means a new build, not a reset).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from replay_tests.conftest import NO_PG, PG_URL, PostgresKits

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

BUILDS: list[str] = []
"""The URL of every build of :func:`_schema`, in order."""


def _connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        make_url(url).set(drivername="postgresql").render_as_string(False), autocommit=True
    )


def _schema(url: str) -> None:
    """A table with a row the build writes, a serial, a standalone sequence drawn from once,
    and a trigger (made after the build's row) that logs every row inserted into ``seeded``:
    putting the build's row back must not fire it."""
    BUILDS.append(url)
    with _connect(url) as conn:
        conn.execute("CREATE TABLE seeded (id serial PRIMARY KEY, v text)")
        conn.execute("INSERT INTO seeded (v) VALUES ('built')")
        conn.execute("CREATE TABLE log (id bigserial PRIMARY KEY, v text)")
        conn.execute("CREATE SEQUENCE standalone")
        conn.execute("SELECT nextval('standalone')")
        conn.execute(
            "CREATE FUNCTION echo() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO log (v) VALUES ('echo ' || NEW.v); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER echo AFTER INSERT ON seeded FOR EACH ROW EXECUTE FUNCTION echo()"
        )


def _state(url: str) -> tuple[list[object], list[object], object, object]:
    """Every row of both tables and the state of both sequences (read, not drawn from)."""
    with _connect(url) as conn:
        return (
            conn.execute("SELECT id, v FROM seeded ORDER BY id").fetchall(),
            conn.execute("SELECT id, v FROM log ORDER BY id").fetchall(),
            conn.execute("SELECT last_value, is_called FROM log_id_seq").fetchone(),
            conn.execute("SELECT last_value, is_called FROM standalone").fetchone(),
        )


@pytest.fixture
def kits() -> Iterator[PostgresKits]:
    BUILDS.clear()
    kits = PostgresKits()
    yield kits
    kits.close()


def test_a_reset_database_holds_what_the_build_left_and_nothing_a_test_wrote(
    kits: PostgresKits,
) -> None:
    with kits.use(_schema) as url:
        built = _state(url)
        with _connect(url) as conn:
            conn.execute("INSERT INTO log (v) VALUES ('one'), ('two')")
            conn.execute("UPDATE seeded SET v = 'changed' WHERE v = 'built'")
            conn.execute("SELECT nextval('standalone')")
        assert _state(url) != built
    with kits.use(_schema) as again:
        assert again == url  # the same database, reset, not a new build
        assert _state(again) == built
        with _connect(again) as conn:
            assert conn.execute("INSERT INTO log (v) VALUES ('x') RETURNING id").fetchone() == (1,)
    assert len(BUILDS) == 1


def test_a_session_left_open_by_a_test_is_ended(kits: PostgresKits) -> None:
    with kits.use(_schema) as url:
        left_open = _connect(url)
    with kits.use(_schema), pytest.raises(psycopg.OperationalError):
        left_open.execute("SELECT 1")
    left_open.close()


@pytest.mark.parametrize(
    "change",
    [
        "CREATE TABLE extra (n int)",
        "ALTER TABLE log ADD COLUMN more text",
        "CREATE INDEX log_v ON log (v)",
        "DROP TRIGGER echo ON seeded",
        "CREATE OR REPLACE FUNCTION echo() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RETURN NEW; END $$",
        "ALTER SEQUENCE standalone INCREMENT BY 5",
    ],
)
def test_a_test_that_changes_the_schema_leaves_a_new_build_to_the_next(
    kits: PostgresKits, change: str
) -> None:
    with kits.use(_schema) as url:
        built = _state(url)
        with _connect(url) as conn:
            conn.execute(change)
    with kits.use(_schema) as again:
        assert again != url
        assert _state(again) == built
        with _connect(again) as conn:
            conn.execute("INSERT INTO seeded (v) VALUES ('x')")
            assert conn.execute("SELECT id, v FROM log").fetchall() == [(1, "echo x")]
    assert len(BUILDS) == 2
