"""Two logs in two schemas of one PostgreSQL database (ADR 0015, amended 2026-12-05
"schema").

A URL naming a schema in its ``search_path`` (``?options=-csearch_path%3Dtenant_a``) reached
the projections' engine but not the log: eventsourcing qualifies the log's tables with its own
schema setting, ``public`` unless told, so two tenants' Looms wrote one shared log and each
listed and opened the other's executions. The log now lives in the first schema of the URL's
search path; since the amendment "current schema" (2026-12-06), in the schema PostgreSQL
creates the connection's tables in (the first of the effective search path that exists: the
URL's, the role's, ``$user``), where loom's other tables are.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import ConfigurationError, ExecutionNotFoundError, Loom, MasterKey

pytestmark = pytest.mark.postgres


@pytest.fixture
def tenants(pg_url: str) -> Iterator[dict[str, str]]:
    libpq = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as admin:
        for schema in ("tenant_a", "tenant_b"):
            admin.execute(f"CREATE SCHEMA {schema}")
    yield {
        schema: make_url(pg_url)
        .update_query_dict({"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
        for schema in ("tenant_a", "tenant_b")
    }


def _run(url: str, n: int) -> Any:
    with Loom(url) as loom:

        @loom.flow("f")
        def f(ctx: Any, x: int) -> int:
            return int(ctx.decide("d", lambda: x * 2))

        return loom.run("f", x=n).execution_id


def test_two_schemas_hold_two_logs(tenants: dict[str, str], pg_url: str) -> None:
    first = _run(tenants["tenant_a"], 1)
    second = _run(tenants["tenant_b"], 2)
    with Loom(tenants["tenant_b"]) as loom:
        assert [s.execution_id for s in loom.executions()] == [second]
        with pytest.raises(ExecutionNotFoundError):
            loom.execution(first)
        assert loom.log.verify().ok
    libpq = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq) as admin:
        found = admin.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'loom_events'"
        ).fetchall()
    assert sorted(row[0] for row in found) == ["tenant_a", "tenant_b"]


@pytest.mark.parametrize(
    ("options", "schema"),
    [
        ("-csearch_path=tenant_a", "tenant_a"),
        ('-c search_path="$user",tenant_b,public -c lock_timeout=5000', "tenant_b"),
        ("-csearch_path=Upper", "upper"),
        ('-csearch_path="Mixed"', "Mixed"),
        ("--search_path=tenant_b,public", "tenant_b"),
        ("-c lock_timeout=5000 --search-path=tenant_c", "tenant_c"),
        ("-c statement_timeout=5000", ""),
        ("", ""),
        # PostgreSQL review of 6 December: a quoted name holding a comma or a doubled quote
        ('-csearch_path="sch,ema",public', "sch,ema"),
        ('-csearch_path="we""ird"', 'we"ird'),
    ],
)
def test_the_first_schema_a_url_names_is_read_from_its_options(options: str, schema: str) -> None:
    from loom_runtime.storage.application import search_path_schemas

    assert next(iter(search_path_schemas(options)), "") == schema


@pytest.mark.parametrize("schema", ["My Schema", "o'brien", "a.b", "select"])
def test_a_schema_whose_name_needs_quoting_is_refused_at_open(pg_url: str, schema: str) -> None:
    """PostgreSQL review of 6 December: eventsourcing writes the log's schema into its SQL
    unquoted, so a schema whose name needs quoting opened with an untyped syntax error
    (``My Schema``, ``o'brien``, ``select``) or a "cross-database reference" (``a.b``).
    Refused, saying why, nothing created."""
    quoted = '"' + schema.replace('"', '""') + '"'
    with _admin(pg_url) as admin:
        admin.execute(f"CREATE SCHEMA {quoted}")
    url = (
        make_url(pg_url)
        # libpq splits options at spaces: one inside a value is written "\ "
        .update_query_dict({"options": "-csearch_path=" + quoted.replace(" ", "\\ ")})
        .render_as_string(hide_password=False)
    )
    try:
        with pytest.raises(ConfigurationError, match="needs quoting"), Loom(url) as loom:
            loom.executions()
        with _admin(pg_url) as admin:
            made = admin.execute(
                "SELECT count(*) FROM pg_class AS c JOIN pg_namespace AS n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s",
                [schema],
            ).fetchone()
        assert made == (0,)
    finally:
        with _admin(pg_url) as admin:
            admin.execute(f"DROP SCHEMA {quoted} CASCADE")


def test_a_search_path_that_reaches_another_log_is_refused_at_open(
    tenants: dict[str, str], pg_url: str
) -> None:
    """loom's tables other than the log's are unqualified, found on the search path: a URL
    naming ``tenant_a,public``, where ``public`` holds another log, shared every table of
    that log ``tenant_a`` lacked, the key table among them (one tenant's erasure then destroys
    the other's keys). Found by a review of ``loom verify``'s key check (ADR 0015, amended
    2026-12-06 "shared path"). Refused, with nothing created; a path whose other schemas hold
    no log opens as before."""
    both = make_url(pg_url).update_query_dict({"options": "-csearch_path=tenant_a,public"})
    url = both.render_as_string(hide_password=False)
    _run(url, 1)  # public holds no log yet: fine, the log is tenant_a's
    _run(pg_url, 2)  # now public holds one
    libpq = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)

    def backends() -> int:
        with psycopg.connect(libpq) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchone()
        return int(row[0]) if row else 0

    before = backends()
    for _ in range(3):  # a refused open keeps no connection (its pool's two, its engine's one)
        with (
            pytest.raises(ConfigurationError, match=r"public.*holds another loom log"),
            Loom(url) as loom,
        ):
            loom.executions()
    # A closed connection's server process exits a moment after the client goes (seen
    # taking 0.16 s with the cores busy): a connection a refused open kept would stay.
    deadline = time.monotonic() + 10
    while backends() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backends() <= before
    assert _run(tenants["tenant_a"], 3) is not None  # naming only the log's schema still works


# -- the schema PostgreSQL creates in (ADR 0015, amended 2026-12-06 "current schema") ----------


def _admin(url: str) -> psycopg.Connection[Any]:
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return psycopg.connect(libpq, autocommit=True)


@contextmanager
def _role(pg_url: str, *, own_schema: bool) -> Iterator[str]:
    """A new login role's URL, with a schema of its own name if ``own_schema``; roles are the
    server's, not the database's, so each test makes its own and drops it."""
    name = f"loom_role_{uuid.uuid4().hex[:8]}"
    with _admin(pg_url) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        if own_schema:
            admin.execute(f"CREATE SCHEMA {name} AUTHORIZATION {name}")
    try:
        yield make_url(pg_url).set(username=name).render_as_string(hide_password=False)
    finally:
        with _admin(pg_url) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [name],
            )
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


@pytest.fixture
def role(pg_url: str) -> Iterator[str]:
    """A login role owning a schema of its own name and nothing else: PostgreSQL's advice for a
    database many users share (its docs' "secure schema usage pattern"). On PostgreSQL 15 it
    may not create anything in ``public``."""
    with _role(pg_url, own_schema=True) as url:
        yield url


def _schemas_of(url: str, table: str) -> list[str]:
    with _admin(url) as admin:
        rows = admin.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = %s ORDER BY 1",
            [table],
        ).fetchall()
    return [row[0] for row in rows]


def test_a_role_s_own_schema_holds_its_log(role: str, pg_url: str) -> None:
    """With no search path in the URL, the log goes where PostgreSQL creates the connection's
    tables (``$user`` first, then ``public``), beside loom's other tables: it went to
    ``public``, which a PostgreSQL 15 role may not create in ("permission denied for schema
    public"), and where it did (an older server, a grant) every role's log was one table."""
    name = make_url(role).username
    first = _run(role, 1)
    with Loom(role) as loom:
        assert [s.execution_id for s in loom.executions()] == [first]
        assert loom.log.verify().ok
    assert _schemas_of(pg_url, "loom_events") == [name]
    assert _schemas_of(pg_url, "loom_chain") == [name]


def test_a_search_path_set_for_the_role_places_the_log(role: str, pg_url: str) -> None:
    """A search path set on the role (``ALTER ROLE ... SET search_path``), which the URL does
    not show, is the one PostgreSQL uses, so it is the log's."""
    name = make_url(role).username
    with _admin(pg_url) as admin:
        admin.execute(f"CREATE SCHEMA tenant_x AUTHORIZATION {name}")
        database = make_url(pg_url).database
        admin.execute(f'ALTER ROLE {name} IN DATABASE "{database}" SET search_path = tenant_x')
    _run(role, 1)
    assert _schemas_of(pg_url, "loom_events") == ["tenant_x"]


def test_a_log_where_earlier_versions_put_it_is_not_silently_left_behind(pg_url: str) -> None:
    """Earlier versions put the log in ``public`` when the URL named no schema, even where the
    connection creates its tables elsewhere. Such a log is not opened as a new empty one in
    the schema loom now uses: the open is refused, naming both schemas and the fix, and the
    URL that names ``public`` still reads it."""
    public = make_url(pg_url).update_query_dict({"options": "-csearch_path=public"})
    old = public.render_as_string(hide_password=False)
    first = _run(old, 1)  # written in public, as earlier versions wrote it
    user = make_url(pg_url).username
    with _admin(pg_url) as admin:
        admin.execute(f'CREATE SCHEMA "{user}"')  # now "$user" comes first on the path
    with (
        pytest.raises(ConfigurationError, match=rf"'public'.*'{user}'.*search_path"),
        Loom(pg_url) as loom,
    ):
        loom.executions()
    assert _schemas_of(pg_url, "loom_events") == ["public"]  # nothing made in the new one
    with Loom(old) as loom:
        assert [s.execution_id for s in loom.executions()] == [first]


@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])
def test_a_role_that_may_not_create_where_its_tables_go_is_told_how_to_fix_it(
    pg_url: str, usage: bool
) -> None:
    """A role with no schema of its own: its tables go to ``public``, where PostgreSQL 15 lets
    only the owner create (``usage``: as PostgreSQL 15 makes it; else a ``public`` made again,
    which grants nothing, so the role may not even use it). The open is refused before
    anything is made, naming the schema, the role and the fixes, not with the server's
    "permission denied" from inside eventsourcing nor "no schema exists"; once the role owns
    a schema of its name, the same URL opens."""
    with _admin(pg_url) as admin:
        grant = "GRANT USAGE ON SCHEMA public TO" if usage else "REVOKE USAGE ON SCHEMA public FROM"
        admin.execute(f"{grant} PUBLIC")
    problem = (
        "may not create tables in schema 'public'"
        if usage
        else "schema 'public' of this connection's search path exists, but role {name} may "
        "not use it"
    )
    fix = "GRANT CREATE ON SCHEMA public" if usage else "GRANT USAGE, CREATE ON SCHEMA public"
    with _role(pg_url, own_schema=False) as url:
        name = make_url(url).username
        with (
            pytest.raises(
                ConfigurationError,
                match=rf"{problem.format(name=name)}.*CREATE SCHEMA {name} AUTHORIZATION "
                rf"{name}.*{fix} TO {name}; nothing was created",
            ),
            Loom(url) as loom,
        ):
            loom.executions()
        assert _schemas_of(pg_url, "loom_events") == []
        with _admin(pg_url) as admin:
            admin.execute(f"CREATE SCHEMA {name} AUTHORIZATION {name}")
        first = _run(url, 1)
        with Loom(url) as loom:
            assert [s.execution_id for s in loom.executions()] == [first]
        assert _schemas_of(pg_url, "loom_events") == [name]


def test_a_schema_the_url_names_that_does_not_exist_is_a_configuration_error(
    pg_url: str,
) -> None:
    missing = make_url(pg_url).update_query_dict({"options": "-csearch_path=nowhere,public"})
    with (
        pytest.raises(ConfigurationError, match=r"'nowhere'.*does not exist"),
        Loom(missing.render_as_string(hide_password=False)) as loom,
    ):
        loom.executions()
    assert _schemas_of(pg_url, "loom_events") == []


def test_pgoptions_places_the_log_and_every_other_table_alike(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq reads ``PGOPTIONS`` when the URL sets no ``options``: the log's pool did, and the
    projections' engine, whose ``options`` carry its lock timeout, did not, so with the log
    placed by the server's search path the log went to ``tenant_x`` and the read models and
    their tracking to ``public``."""
    with _admin(pg_url) as admin:
        admin.execute("CREATE SCHEMA tenant_x")
    monkeypatch.setenv("PGOPTIONS", "-c search_path=tenant_x")
    with Loom(pg_url, encryption=MasterKey(b"k" * 32)) as loom:
        loom.flow("f")(lambda ctx: ctx.decide("d", lambda: 1))
        loom.run("f")  # its key, in the key table
        open_knowledge_base(loom, "kb").put_doc(Doc(id="a", text="hello"))  # a read model
    for table in ("loom_events", "loom_subject_keys", "loom_tracking"):
        assert _schemas_of(pg_url, table) == ["tenant_x"], table


@pytest.mark.parametrize("schema", ["Mixed", "ünï", "x$y", "type"])
def test_a_schema_named_in_capitals_another_script_or_an_unreserved_word_holds_a_log(
    pg_url: str, schema: str
) -> None:
    """The control: names eventsourcing's statements hold unquoted still take the log."""
    quoted = '"' + schema + '"'
    with _admin(pg_url) as admin:
        admin.execute(f"CREATE SCHEMA {quoted}")
    url = (
        make_url(pg_url)
        .update_query_dict({"options": f"-csearch_path={quoted}"})
        .render_as_string(hide_password=False)
    )
    try:
        execution = _run(url, 4)
        with Loom(url) as loom:
            assert [s.execution_id for s in loom.executions()] == [execution]
            assert loom.log.verify().ok
    finally:
        with _admin(pg_url) as admin:
            admin.execute(f"DROP SCHEMA {quoted} CASCADE")
