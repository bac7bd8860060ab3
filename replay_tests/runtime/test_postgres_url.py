"""Every connection of a PostgreSQL log goes where its URL says, with the URL's parameters.

A loom on PostgreSQL has two clients: the projections' SQLAlchemy engine, which reads the
whole URL, and eventsourcing's pool, which takes a host, port, database, user and password.
The pool's were copied from the URL's parts, so a URL that names a Unix socket in its query
(``postgresql+psycopg://app@/loom?host=/run/postgresql``: a local server, a cloud SQL proxy)
or leaves the host to libpq (``PGHOST``, the default socket) sent the engine there and the
log to 127.0.0.1 over TCP, and the query's libpq parameters (``sslmode``,
``application_name``, ``options``) reached the engine only. Now both are given the same
connection arguments: the ones SQLAlchemy's psycopg dialect makes of the URL (ADR 0015,
amended "url").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from loom_runtime import DatabaseUnavailableError, Loom
from loom_runtime.log import Row

pytestmark = pytest.mark.postgres


@pytest.fixture
def socket_url(pg_url: str) -> Iterator[str]:
    """``pg_url``'s database, reached through the server's Unix socket named in the query."""
    engine = create_engine(pg_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            directories = conn.exec_driver_sql("SHOW unix_socket_directories").scalar_one()
            port = str(conn.exec_driver_sql("SHOW port").scalar_one())
    finally:
        engine.dispose()
    directory = str(directories).split(",")[0].strip()
    tcp = make_url(pg_url)
    url = URL.create(
        tcp.drivername,
        username=tcp.username,
        password=tcp.password,
        database=tcp.database,
        query={"host": directory, "port": port},
    )
    yield url.render_as_string(hide_password=False)


def _connections(url: str) -> set[tuple[str | None, str]]:
    """(client address, application name) of every other backend on ``url``'s database."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT host(client_addr), application_name FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return {(address, name) for address, name in rows}
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "parameter",
    [{"application_name": "loom-url-test"}, {"options": "-c application_name=loom-url-test"}],
    ids=["application_name", "options"],
)
def test_a_url_naming_a_socket_and_libpq_parameters_is_followed_by_every_connection(
    socket_url: str, parameter: dict[str, str]
) -> None:
    """After an append and a read, every backend of the database is on the socket (no client
    address) and has the name the URL gives: the log's pool's and the engine's. Given through
    ``options``, the engine used to drop it for its own lock timeout option."""
    named = make_url(socket_url).update_query_dict(parameter)
    with Loom(named.render_as_string(hide_password=False)) as loom:
        stream = uuid.uuid4()
        loom.log.insert_rows([Row(stream=stream, version=1, topic="test.Noted", state=b"{}")])
        assert len(loom.log.rows(stream)) == 1 and loom.log.position == 1
        assert _connections(socket_url) == {(None, "loom-url-test")}


def _opening_error(url: str) -> DatabaseUnavailableError:
    """The error opening a loom's log on ``url`` raises."""
    loom = Loom(url)
    with pytest.raises(DatabaseUnavailableError) as raised:
        _ = loom.log
    return raised.value


def test_an_unreachable_socket_is_named_in_the_error(socket_url: str) -> None:
    """The error says where the log looked: the socket directory, not a made-up 127.0.0.1."""
    missing = f"/nonexistent-{uuid.uuid4().hex[:8]}"
    url = make_url(socket_url).update_query_dict({"host": missing})
    message = str(_opening_error(url.render_as_string(hide_password=False)))
    assert missing in message and "127.0.0.1" not in message


def test_what_the_url_leaves_out_is_named_as_libpq_fills_it_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``postgresql+psycopg://`` leaves the host, port, user and database to libpq (PGHOST,
    PGPORT, PGUSER, PGDATABASE), and the error names those, not 127.0.0.1 and ``postgres``.
    No server is needed: the socket directory does not exist."""
    missing = f"/nonexistent-{uuid.uuid4().hex[:8]}"
    for name, value in {
        "PGHOST": missing,
        "PGPORT": "6543",
        "PGUSER": "alice",
        "PGDATABASE": "incidents",
    }.items():
        monkeypatch.setenv(name, value)
    error = _opening_error("postgresql+psycopg://")
    assert f"at {missing}:6543 as alice" in str(error) and "createdb incidents" in str(error)
    assert error.database == "incidents"


def test_a_user_without_a_name_still_gets_the_connection_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libpq's default user is the operating system's; a uid with no name (some containers)
    must not turn the connection error into a KeyError from looking it up."""

    def nameless() -> str:
        raise KeyError("getpwuid(): uid not found: 12345")

    monkeypatch.setattr("getpass.getuser", nameless)
    monkeypatch.setenv("PGHOST", f"/nonexistent-{uuid.uuid4().hex[:8]}")
    for name in ("PGUSER", "PGDATABASE", "PGPORT"):
        monkeypatch.delenv(name, raising=False)
    assert "as the operating-system user" in str(_opening_error("postgresql+psycopg://"))
