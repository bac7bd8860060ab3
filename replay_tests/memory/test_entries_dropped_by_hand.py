"""A memory store whose entries table was dropped by hand opens empty and works (ADR 0054,
amended "pgfunc").

Only the entries table gone, an open used to create it beside the postings, counts and search
index of the rows that were dropped: the new rows' numbers restart where the old ones began, so
the first write collided with a stale posting (SQLite), and a search or a count could read the
dropped rows' terms. Now an open that finds the entries missing drops what was kept beside
them. For each kind of SQL store, on both backends: after the drop and a reopen, a new row is
written, a search finds it and nothing of the dropped rows, and a temporal store's counts equal
a recount.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loom_memory import (
    MemoryEntry,
    PostgresMemoryStore,
    PostgresTemporalStore,
    SqliteMemoryStore,
    SqliteTemporalStore,
)
from loom_memory.sql import SqlMemoryStore
from loom_memory.validity import TemporalSqlStore
from replay_tests.memory.test_kept_counts import _kept, _recounted

STORES: dict[str, dict[str, Callable[[str], SqlMemoryStore]]] = {
    "plain": {"sqlite": SqliteMemoryStore, "postgresql": PostgresMemoryStore},
    "plain, postings": {
        "sqlite": lambda url: SqliteMemoryStore(url, postings=True),
        "postgresql": lambda url: PostgresMemoryStore(url, postings=True),
    },
    "temporal": {"sqlite": SqliteTemporalStore, "postgresql": PostgresTemporalStore},
}


@pytest.mark.parametrize("kind", sorted(STORES))
def test_an_open_after_the_entries_were_dropped_starts_empty(db_url: str, kind: str) -> None:
    dialect = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    opened = STORES[kind][dialect]
    store = opened(db_url)
    store.append("k", [MemoryEntry(content="disk full rotate logs"), MemoryEntry(content="wal")])
    cascade = "" if dialect == "sqlite" else " CASCADE"
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {store.entries.name}{cascade}")
    store.close()
    store = opened(db_url)
    try:
        store.append("k", [MemoryEntry(content="volume stall")])
        assert [entry.content for entry in store.search("k", "volume")] == ["volume stall"]
        assert store.search("k", "rotate wal disk") == []  # the dropped rows' terms
        if isinstance(store, TemporalSqlStore):
            assert _kept(store) == _recounted(store)
            assert _kept(store)[0] == {"k": 1}
    finally:
        store.close()
