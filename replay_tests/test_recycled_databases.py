"""A PostgreSQL test database is emptied and handed to a later test, never dropped and created
again (``replay_tests/conftest.py``, ADR 0054): creating one cost the server 0.1-0.2 s of CPU.

What one test leaves in its database (tables, sequences, functions, types, schemas of its own,
a session still open) must be gone when a later test gets it, as if it were new.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from freezegun import freeze_time
from sqlalchemy import create_engine, make_url
from sqlalchemy.pool import NullPool

from loom_runtime.log import LogSettings
from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_database

ROOT = Path(__file__).parents[1]

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

LEAVINGS = [
    "CREATE TABLE kept (id serial PRIMARY KEY, body text)",
    "INSERT INTO kept (body) VALUES ('left behind')",
    "CREATE SEQUENCE counter",
    "CREATE TYPE mood AS ENUM ('calm', 'loud')",
    "CREATE FUNCTION answer() RETURNS int LANGUAGE sql AS 'SELECT 42'",
    "CREATE SCHEMA side",
    "CREATE TABLE side.kept (id int)",
    "CREATE VIEW kept_view AS SELECT * FROM kept",
]
CONTENTS = """
    SELECT 'schema ' || nspname FROM pg_namespace
     WHERE left(nspname, 3) <> 'pg_' AND nspname NOT IN ('information_schema', 'public')
    UNION ALL
    SELECT 'relation ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE left(n.nspname, 3) <> 'pg_' AND n.nspname <> 'information_schema'
    UNION ALL
    SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'public'
    UNION ALL
    SELECT 'type ' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = 'public'
    UNION ALL
    SELECT 'session ' || pid FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid()
       AND backend_type = 'client backend'
"""
"""What a test could have left in a database. A session is a client's: the server's own
autovacuum worker visits a database whose catalogs churned (schemas dropped and made again)
whenever its schedule says, which is not a test's leaving."""


def test_a_database_given_back_comes_back_empty() -> None:
    """Filled and left with a session open, the database is the one a later test gets (it was
    not dropped), and it holds nothing."""
    database = contextmanager(fresh_postgres_database)
    with database() as used:
        engine = create_engine(used)
        left_open = engine.connect()
        for statement in LEAVINGS:
            left_open.exec_driver_sql(statement)
        left_open.commit()
        with engine.connect() as conn:
            assert conn.exec_driver_sql(CONTENTS).scalars().all() != []  # the control
    with database() as later, database() as later_still:
        again = [url for url in (later, later_still) if url == used]
        assert again, "the given-back database was not handed out again"
        with create_engine(again[0]).connect() as conn:
            assert conn.exec_driver_sql(CONTENTS).scalars().all() == []
            public = "SELECT count(*) FROM pg_namespace WHERE nspname = 'public'"
            assert conn.exec_driver_sql(public).scalar() == 1
    with contextlib.suppress(Exception):
        left_open.close()
    engine.dispose()


# Run in a fresh interpreter: in this one, earlier tests have created every logger already.
LOGGERS_MADE_OFF_THE_MAIN_THREAD = """
import contextlib, json, logging, threading
made = []
make = logging.Manager.getLogger
def watched(manager, name):
    if not isinstance(manager.loggerDict.get(name), logging.Logger):
        if threading.current_thread() is not threading.main_thread():
            made.append(name)
    return make(manager, name)
logging.Manager.getLogger = watched
from replay_tests import conftest as suite
database = contextlib.contextmanager(suite.fresh_postgres_database)
for _ in range(3):
    with database():
        pass
suite.pytest_sessionfinish()
print(json.dumps(made))
"""


def test_the_database_maker_s_thread_creates_no_logger() -> None:
    """pytest's log capture walks ``logging``'s table of loggers, without its lock, as each
    test is set up. A logger created on another thread meanwhile (the maker's first import of
    psycopg, SQLAlchemy's first engine of a pool class) made a crash-harness test error with
    "dictionary changed size during iteration". The maker's thread must find every logger it
    uses made already, on the thread that made the maker."""
    run = subprocess.run(
        [sys.executable, "-c", LOGGERS_MADE_OFF_THE_MAIN_THREAD],
        cwd=ROOT,
        env={**os.environ, "LOOM_TEST_PG_URL": PG_URL},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == []


def _connect_to_server() -> socket.socket:
    """A raw socket to the test server: its Unix socket when the URL names one, else TCP."""
    connect = LogSettings(PG_URL).postgres_connect_args()
    host, port = connect.get("host", "127.0.0.1"), int(connect.get("port", "5432"))
    if not host.startswith("/"):
        return socket.create_connection((host, port))
    unix = socket.socket(socket.AF_UNIX)
    unix.connect(f"{host}/.s.PGSQL.{port}")
    return unix


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def test_a_connection_opened_on_another_thread_while_a_test_freezes_the_clock_succeeds() -> None:
    """The maker empties databases on its own thread while tests run, and some of those tests
    freeze the clock. freezegun's clock is every thread's: psycopg, mid-connect, compared its
    deadline (the real monotonic clock + the connect timeout) with the frozen clock (seconds
    since 1970) and gave up at once, "connection timeout expired", which failed a session at
    its end. Here the server's answer is held back until the clock is frozen, so the connect
    is waiting exactly then; it must succeed."""
    server = make_url(PG_URL)
    listener = socket.create_server(("127.0.0.1", 0))
    accepted, frozen = threading.Event(), threading.Event()

    def relay() -> None:
        client, _ = listener.accept()
        accepted.set()
        frozen.wait(30)
        time.sleep(0.3)  # psycopg looks at its clock between waits of at most 0.1 s
        upstream = _connect_to_server()
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join(30)
        client.close()
        upstream.close()

    outcome: list[object] = []

    def connect() -> None:
        port = listener.getsockname()[1]
        relayed = server.difference_update_query(["host", "port"]).set(host="127.0.0.1", port=port)
        engine = create_engine(relayed, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                outcome.append(conn.exec_driver_sql("SELECT 1").scalar())
        except Exception as error:
            outcome.append(error)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=work, daemon=True) for work in (relay, connect)]
    for thread in threads:
        thread.start()
    assert accepted.wait(30), "psycopg never reached the relay"
    with freeze_time("2020-01-01"):
        frozen.set()
        threads[1].join(30)
    threads[0].join(30)
    listener.close()
    assert outcome == [1], outcome


def test_an_emptied_database_has_no_session_left() -> None:
    """Emptying a database opens a session of its own; closing it does not wait for its server
    process to exit, and 1 emptying in 100 left that process listed for the next test."""
    from replay_tests.conftest import _admin, _create_database, _drop_database, _empty_database

    name = _create_database()
    try:
        left = []
        for _ in range(600):
            _empty_database(name)
            with _admin().connect() as conn:
                left += conn.exec_driver_sql(
                    "SELECT pid, state, query FROM pg_stat_activity"
                    f" WHERE datname = '{name}' AND backend_type = 'client backend'"
                ).all()
        assert left == []
    finally:
        _drop_database(name)
