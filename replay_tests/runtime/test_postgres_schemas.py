"""Two logs in two schemas of one PostgreSQL database (ADR 0015, amended 2026-12-05
"schema").

A URL naming a schema in its ``search_path`` (``?options=-csearch_path%3Dtenant_a``) reached
the projections' engine but not the log: eventsourcing qualifies the log's tables with its own
schema setting, ``public`` unless told, so two tenants' Looms wrote one shared log and each
listed and opened the other's executions. The log now lives in the first schema of the URL's
search path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from loom_runtime import ConfigurationError, ExecutionNotFoundError, Loom

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
    ],
)
def test_the_log_s_schema_is_the_first_of_the_search_path(options: str, schema: str) -> None:
    from loom_runtime.storage.application import search_path_schema

    assert search_path_schema(options) == schema


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
    assert backends() <= before
    assert _run(tenants["tenant_a"], 3) is not None  # naming only the log's schema still works
