"""The scale-out section's untimed set-up (ADR 0063, amended): the recording arms' PostgreSQL
databases are copies of one holding loom's schema, and the replay and rebuild fixtures are
filled by :func:`benchmarks.scaleout._populate` (the PostgreSQL one in a second process), then
opened here. Both must give the arms what they were given before: a log whose schema is in
place before any worker starts, and a fixture whose executions replay and whose corpus
rebuilds."""

from __future__ import annotations

import os
from contextlib import ExitStack

import psycopg
import pytest
from sqlalchemy.engine import make_url

from benchmarks import scaleout
from benchmarks.harness import spawned
from benchmarks.stores import fresh_sqlite, loom_schema_template
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


@pytest.mark.slow  # a spawned interpreter imports loom
def test_a_fixture_filled_in_a_second_process_replays_and_rebuilds_here() -> None:
    values = make_values(5)
    with ExitStack() as stack:
        url, _ = stack.enter_context(fresh_sqlite())
        with spawned() as pool:
            executions = pool.submit(scaleout._populate, url, 12, values).result()
        fixture = scaleout._open_fixture(stack, "SQLite", url, 12, values, executions)

        assert len(executions) == scaleout.REPLAY_EXECUTIONS
        assert fixture.corpus_events > 12  # every document's event, and the sync's
        assert fixture.replay_arm().measure()["per_s"] > 0
        assert fixture.rebuild_arm().measure()["seconds"] > 0  # checks the manifest lists all
