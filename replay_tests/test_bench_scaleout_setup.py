"""The scale-out section's untimed set-up (ADR 0063, amended): the recording arms' PostgreSQL
databases are copies of one holding loom's schema. They must give the arms what loom's own
DDL per sample gave them: a log whose schema is in place before any worker starts, one
database per sample."""

from __future__ import annotations

import os
from contextlib import ExitStack

import psycopg
import pytest
from sqlalchemy.engine import make_url

from benchmarks import scaleout
from benchmarks.stores import loom_schema_template
from benchmarks.workload import FLOW, make_values, recording_flow
from loom_runtime import Loom

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")


@pytest.mark.postgres
def test_a_log_copied_from_the_template_holds_the_schema_before_loom_opens_it() -> None:
    if not PG_URL:
        pytest.skip("LOOM_TEST_PG_URL is not set")
    with ExitStack() as stack:
        template = stack.enter_context(loom_schema_template(PG_URL))
        server = scaleout._Server(PG_URL, template)
        urls = [scaleout._fresh_log(stack, "PostgreSQL", server) for _ in range(2)]

        dsn = make_url(urls[0]).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn) as connection:
            tables = connection.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchone()
        assert tables is not None and tables[0] > 0
        assert len(set(urls)) == 2  # a copy per sample, never the template itself
        with Loom(urls[0]) as loom:
            loom.flow(FLOW)(recording_flow(make_values(3)))
            loom.run(FLOW, n=3)
        with Loom(urls[1]) as loom:
            assert scaleout._decision_events(loom) == 0  # the copies share nothing
