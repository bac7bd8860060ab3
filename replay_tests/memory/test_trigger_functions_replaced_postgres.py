"""An open of a PostgreSQL store replaces trigger functions that older code defined differently
(ADR 0054, amended "pgfunc").

The counting triggers of a temporal store (``loom_memory.postgres_counts``), the term index
of a plain store (``loom_memory.postgres_terms``) and the key tokens of a vector store (a
key's token changes with its rows, ``loom_memory.vector``) run PL/pgSQL functions. A new release may
change a function's body (a faster grouping, a fixed count) without changing its tables, and an
open of an up-to-date schema runs no DDL: such a store would keep the old body for good. Each
test plants a body older code could have left (a trigger doing nothing), reopens the store,
and reads the function's source back from ``pg_proc``, then makes the trigger fire: the counts
it keeps must equal a recount. A second reopen of the repaired store runs no DDL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, text

from loom_memory import (
    HashingEmbedder,
    MemoryEntry,
    PostgresMemoryStore,
    PostgresTemporalStore,
    PostgresVectorStore,
)
from loom_memory.sql import DEFAULT_TABLE_PREFIX
from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.knowledge.test_open_reads_the_catalog import _ddl, _statements
from replay_tests.memory.test_kept_counts import _kept, _recounted

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

STUB = " BEGIN RETURN NULL; END "
"""A trigger body that changes nothing: what a function of older code looks like to a test."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()


def _sources(engine: Engine, names: list[str]) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT proname, prosrc FROM pg_proc WHERE proname = ANY(:names)"),
            {"names": names},
        )
        return {name: source for name, source in rows}


def _plant_stubs(engine: Engine, names: list[str]) -> None:
    with engine.begin() as conn:
        for name in names:
            conn.exec_driver_sql(
                f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql "
                f"AS $${STUB}$$"
            )


def _replaced(engine: Engine, opened: Callable[[], object], names: list[str]) -> None:
    """Open once, plant the stubs, reopen: every function is back to the current body, and a
    further reopen runs no DDL."""
    opened()
    current = _sources(engine, names)
    assert sorted(current) == sorted(names)
    _plant_stubs(engine, names)
    assert set(_sources(engine, names).values()) == {STUB}
    opened()
    assert _sources(engine, names) == current
    url = engine.url.render_as_string(hide_password=False)
    with _statements(url) as sent:
        opened()
    assert _ddl(sent) == []


def test_a_temporal_stores_counting_functions_are_replaced(engine: Engine) -> None:
    names = [
        f"{DEFAULT_TABLE_PREFIX}count_on_{event}"
        for event in ("update", "delete", "at_update", "at_delete")
    ]

    def opened() -> PostgresTemporalStore:
        return PostgresTemporalStore(engine)

    _replaced(engine, opened, names)
    store = opened()
    store.append("k", [MemoryEntry(content="disk full rotate logs"), MemoryEntry(content="disk")])
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {store.entries.name} SET valid_to = 1")
    assert _kept(store) == _recounted(store)


def test_a_plain_stores_term_index_functions_are_replaced(engine: Engine) -> None:
    names = [f"{DEFAULT_TABLE_PREFIX}index_on_{event}" for event in ("insert", "delete")]

    def opened() -> PostgresMemoryStore:
        return PostgresMemoryStore(engine)

    _replaced(engine, opened, names)
    store = opened()
    store.append("k", [MemoryEntry(content="disk full rotate logs")])
    assert [entry.content for entry in store.search("k", "rotate")] == ["disk full rotate logs"]


def test_a_vector_stores_token_function_is_replaced(engine: Engine) -> None:
    names = [f"{DEFAULT_TABLE_PREFIX}vector_touch"]

    def opened() -> PostgresVectorStore:
        return PostgresVectorStore(engine, embedder=HashingEmbedder(dimension=16), min_score=0.1)

    _replaced(engine, opened, names)
    store = opened()
    store.append("k", [MemoryEntry(content="disk full rotate logs")])
    with store.engine.connect() as conn:
        tokens = conn.execute(text(f"SELECT key FROM {store.key_tokens.name}")).scalars().all()
    assert tokens == ["k"]
