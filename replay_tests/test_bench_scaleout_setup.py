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
from benchmarks.harness import Arm, Stats
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


def test_the_recording_table_names_the_rows_measured_in_fewer_rounds() -> None:
    """A quick run measures the "N logs on one server" rows in its first round only (ADR 0047,
    quick, second): the table's note must say so, or a reader takes their one sample for a
    median of every round."""

    def stats(*values: float) -> Stats:
        return Stats(samples=values)

    def figures(per_s: float) -> dict[str, Stats]:
        return {"per_s": stats(per_s), "at_once": stats(1.0), "decisions": stats(10.0)}

    one = Arm("PostgreSQL, 1 worker", lambda: {})
    capped = Arm("PostgreSQL, 2 logs on one server, 1 worker each", lambda: {}, rounds=1)
    results = {one.name: figures(100.0), capped.name: figures(180.0)}

    note = scaleout._recording_table([one, capped], results, rounds=2).note
    assert f"{capped.name}: the first 1 round(s) only" in note
    assert "1 worker: the first" not in note  # an arm of every round is not named

    full = scaleout._recording_table([one, capped], results, rounds=1).note
    assert "round(s) only" not in full  # capped at the run's own rounds: nothing to say
