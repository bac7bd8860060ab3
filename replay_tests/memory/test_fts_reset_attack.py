"""A SQLite store's reset never depends on its FTS5 index being sound.

An attack review emptied a store's FTS5 table by hand (``DELETE FROM <prefix>fts``): the
index then held none of the rows, and the entries' per-row delete trigger sent it a
``'delete'`` of each row's terms, which FTS5 answers with "database disk image is malformed".
So ``loom rebuild`` (a reset: ``clear_all``) failed, the knowledge base could not be rebuilt,
and a memory's next ``clear`` failed with the ``MemoryCleared`` already in the log, blocking
every catch-up. The repair itself must not need what it repairs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine

from loom_memory import EventSourcedMemory, MemoryEntry, SqliteMemoryStore
from loom_memory.validity import SqliteTemporalStore
from loom_runtime import Loom


def _emptied(conn: Connection, fts: str) -> None:
    conn.exec_driver_sql(f"DELETE FROM {fts}")


def _pages_lost(conn: Connection, fts: str) -> None:
    conn.exec_driver_sql(f"DELETE FROM {fts}_data WHERE id > 10")


DAMAGE: dict[str, Callable[[Connection, str], None]] = {
    "emptied": _emptied,
    "pages lost": _pages_lost,
}

STORES: dict[str, Callable[[Engine], SqliteMemoryStore]] = {
    "plain": lambda engine: SqliteMemoryStore(engine, table_prefix="m_"),
    "postings": lambda engine: SqliteMemoryStore(engine, table_prefix="m_", postings=True),
    "temporal": lambda engine: SqliteTemporalStore(engine, table_prefix="m_"),
}


def _sound(engine: Engine, fts: str) -> None:
    with engine.connect() as conn:  # raises if the index disagrees with the rows
        conn.exec_driver_sql(f"INSERT INTO {fts}({fts}, rank) VALUES('integrity-check', 1)")


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("kind", STORES)
def test_a_store_whose_index_was_damaged_by_hand_is_reset(
    tmp_path: Path, kind: str, damage: str
) -> None:
    """``clear_all`` empties the rows and leaves a sound, empty index the store writes again."""
    engine = create_engine(f"sqlite:///{tmp_path / 'm.db'}")
    store = STORES[kind](engine)
    for key in ("a", "b"):
        store.append(
            key, [MemoryEntry(content=f"restart worker {i}", id=f"{key}{i}") for i in range(30)]
        )
    with engine.begin() as conn:
        DAMAGE[damage](conn, store.fts_table)
    store.clear_all()
    assert store.read("a") == [] and store.read("b") == []
    _sound(engine, store.fts_table)
    store.append("a", [MemoryEntry(content="restart the worker", id="x")])
    store.clear("b")  # a delete through the index's trigger, after the reset
    assert [e.id for e in store.search("a", "worker")] == ["x"]
    _sound(engine, store.fts_table)
    engine.dispose()


def test_a_memory_whose_index_was_emptied_by_hand_is_rebuilt_and_cleared(tmp_path: Path) -> None:
    """``rebuild`` (what ``loom rebuild`` runs) restores the memory, and a ``clear`` after it
    is applied; before, both failed "malformed" and the clear's event blocked the memory."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        def opened() -> EventSourcedMemory:
            store = SqliteMemoryStore(loom.log.engine, table_prefix="mem_")
            return EventSourcedMemory(loom, store=store, name="m")

        memory = opened()
        for i in range(5):
            memory.append("k", [MemoryEntry(content=f"restart worker {i}", id=f"e{i}")])
        with loom.log.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM mem_fts")
        memory = opened()
        assert memory.rebuild() == loom.log.position
        assert next(e.id for e in memory.search("k", "worker 3")) == "e3"
        memory.clear("k")
        assert memory.read("k") == [] and memory.position == loom.log.position
        _sound(loom.log.engine, "mem_fts")
