"""A PostgreSQL search's round trips: the last scoring step returns the answer's rows.

Each round trip to the server is a fixed cost a search pays (ADR 0057): counting the ones a
search makes, from libpq's own trace of the protocol (one ``ReadyForQuery`` answers each
statement psycopg waits for), fails if a statement comes back, such as a separate read of
the rows after the ranking.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Column, DateTime, Engine, Integer, create_engine

from loom_memory import MemoryEntry, PostgresMemoryStore
from replay_tests.memory.test_postgres_term_index import spy_steps

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not PG_URL, reason="LOOM_TEST_PG_URL is not set (run under scripts/with-postgres)"
    ),
]


@pytest.fixture
def engine() -> Iterator[Engine]:
    # One pooled connection, so the traced connection is the one every search checks out.
    engine = create_engine(PG_URL, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(engine, table_prefix=f"r{uuid.uuid4().hex[:12]}_")
    store.append("k", [MemoryEntry(content=f"common0 filler{n}", id=f"f{n}") for n in range(300)])
    store.append("k", [MemoryEntry(content=f"rare1 common0 x{n}", id=f"r{n}") for n in range(3)])
    yield store
    store.drop()


def _round_trips(engine: Engine, search: Any) -> tuple[Any, int]:
    """``search()``'s answer and the statements the server answered while it ran."""
    with tempfile.TemporaryFile() as trace:
        with engine.connect() as conn:
            driver: Any = conn.connection.driver_connection
        driver.pgconn.trace(trace.fileno())
        try:
            answer = search()
        finally:
            driver.pgconn.untrace()
        trace.seek(0)
        return answer, trace.read().count(b"\tReadyForQuery\t")


def _ids(entries: list[MemoryEntry]) -> list[str]:
    return [entry.id for entry in entries]


def test_a_one_step_search_makes_four_round_trips(
    engine: Engine, store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BEGIN, the counts, one scoring step that returns the rows, COMMIT: no fifth."""
    steps = spy_steps(monkeypatch)
    answer, trips = _round_trips(engine, lambda: store.search("k", "rare1 common0", limit=3))
    assert _ids(answer) == ["r0", "r1", "r2"]
    assert steps == [{"rare1"}]
    assert trips == 4


def test_a_two_step_search_makes_five_round_trips(
    engine: Engine, store: PostgresMemoryStore
) -> None:
    """A second step replaces the first's rows with its own: still no read after it."""
    answer, trips = _round_trips(engine, lambda: store.search("k", "rare1 common0", limit=4))
    assert _ids(answer)[:3] == ["r0", "r1", "r2"]
    assert len(answer) == 4
    assert trips == 5


def test_a_store_with_extra_columns_reads_them_after_the_ranking(engine: Engine) -> None:
    """Extra columns are read through SQLAlchemy, which converts them: one read after the
    one step, and each entry comes back with its own values."""
    store = PostgresMemoryStore(
        engine,
        table_prefix=f"r{uuid.uuid4().hex[:12]}_",
        columns=[Column("batch", Integer), Column("at", DateTime(timezone=True))],
    )
    at = datetime(2026, 12, 1, tzinfo=UTC)
    try:
        for batch in range(3):
            store.append(
                "k",
                [MemoryEntry(content=f"rare{batch} common0", id=f"b{batch}")],
                values={"batch": batch, "at": at},
            )
        answer, trips = _round_trips(
            engine, lambda: store.search_annotated("k", "rare1 common0", limit=1)
        )
        assert [(entry.id, values) for entry, values in answer] == [("b1", {"batch": 1, "at": at})]
        assert trips == 5
    finally:
        store.drop()
