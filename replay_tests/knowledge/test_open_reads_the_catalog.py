"""Opening an up-to-date schema reads its catalog once per step and changes nothing (ADR 0054,
amended "pgopen"); a schema missing something, or laid out by older code, is still repaired.

A log, a memory store or a knowledge base opened on an existing database used to ask once per
table whether it existed, reflect a primary key and run its idempotent DDL again: on PostgreSQL
some thirty statements before the first search. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, make_url

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.corpus_index import TABLE_PREFIX
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_memory import (
    HashingEmbedder,
    PostgresMemoryStore,
    PostgresTemporalStore,
    PostgresVectorStore,
    SqliteMemoryStore,
    SqliteTemporalStore,
    SqliteVectorStore,
)
from loom_runtime import Loom, read_catalog
from replay_tests.memory.test_position_counts_layout import (
    NEW_KEY,
    OLD_KEY,
    _key_level_first,
    _terms_key,
)

CATALOG_WORDS = ("pg_catalog", "pg_class", "information_schema", "sqlite_master", "pragma")
DDL_WORDS = ("create ", "drop ", "alter ", "pg_advisory_xact_lock")
MAX_CATALOG_READS = 3
"""The store's own open, the projection's tables, the corpus's stemmer table."""

CATALOG_READS = {"plain": 1, "temporal": 1, "vector": 3}
"""A vector store opens its vectors' table and its own tables beside the entries."""
STORES: dict[str, dict[str, Callable[[str], Any]]] = {
    "plain": {"sqlite": SqliteMemoryStore, "postgresql": PostgresMemoryStore},
    "temporal": {"sqlite": SqliteTemporalStore, "postgresql": PostgresTemporalStore},
    "vector": {
        "sqlite": lambda url: SqliteVectorStore(
            url, embedder=HashingEmbedder(dimension=16), min_score=0.1
        ),
        "postgresql": lambda url: PostgresVectorStore(
            url, embedder=HashingEmbedder(dimension=16), min_score=0.1
        ),
    },
}


@contextmanager
def _statements(url: str) -> Iterator[list[str]]:
    """Every statement sent to ``url``'s database while the block runs, lower-cased (the
    suite may be recycling another test's database meanwhile)."""
    sent: list[str] = []
    database = make_url(url).database

    def record(conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if conn.engine.url.database == database:
            sent.append(" ".join(statement.split()).lower())

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def _catalog_reads(sent: list[str]) -> list[str]:
    return [s for s in sent if any(word in s for word in CATALOG_WORDS)]


def _ddl(sent: list[str]) -> list[str]:
    return [s for s in sent if any(word in s for word in DDL_WORDS)]


def _built(url: str) -> list[str]:
    """A knowledge base with a document, then its answer to a query."""
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.sync([Doc(id="disk.md", text="Disk full: rotate the logs.")])
        return [p.text for p in kb.search("rotate logs")]


def _reopened(url: str, *changes: str) -> tuple[Loom, list[str]]:
    """The knowledge base at ``url`` opened again after running ``changes`` on its database,
    and its answer to the query."""
    with Loom(url) as loom, loom.log.engine.begin() as conn:
        for change in changes:
            conn.exec_driver_sql(change)
    loom = Loom(url)
    return loom, [p.text for p in open_knowledge_base(loom, "ops").search("rotate logs")]


def _objects(loom: Loom) -> dict[str, str | None]:
    with loom.log.engine.connect() as conn:
        return dict(read_catalog(conn).objects)


def test_reopening_a_knowledge_base_runs_no_ddl_and_reads_the_catalog_thrice(db_url: str) -> None:
    """An open of an up-to-date knowledge base, and its search, change no schema."""
    expected = _built(db_url)
    with _statements(db_url) as sent:
        loom, found = _reopened(db_url)
        loom.close()
    assert found == expected != []
    assert _ddl(sent) == []
    assert len(_catalog_reads(sent)) <= MAX_CATALOG_READS, _catalog_reads(sent)


@pytest.mark.parametrize("kind", sorted(STORES))
def test_reopening_a_memory_store_runs_no_ddl_and_reads_the_catalog_once(
    db_url: str, kind: str
) -> None:
    """An open of an up-to-date store of each kind reads the catalog once, changes nothing."""
    dialect = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    STORES[kind][dialect](db_url).close()
    with _statements(db_url) as sent:
        STORES[kind][dialect](db_url).close()
    assert _ddl(sent) == []
    assert len(_catalog_reads(sent)) == CATALOG_READS[kind], _catalog_reads(sent)


@pytest.mark.parametrize(
    "table",
    [
        f"{TABLE_PREFIX}entries",
        f"{TABLE_PREFIX}postings",
        f"{TABLE_PREFIX}current_terms",
        f"{TABLE_PREFIX}terms_at",
    ],
)
def test_a_table_dropped_by_hand_is_created_and_filled_again(db_url: str, table: str) -> None:
    expected = _built(db_url)
    cascade = "" if db_url.startswith("sqlite") else " CASCADE"
    loom, found = _reopened(db_url, f"DROP TABLE {table}{cascade}")
    with loom:
        assert found == expected
        assert table in _objects(loom)


def test_the_partial_index_of_current_rows_dropped_by_hand_is_created_again(
    db_url: str,
) -> None:
    _built(db_url)
    loom, _ = _reopened(db_url, f"DROP INDEX {TABLE_PREFIX}entries_current")
    with loom:
        assert f"{TABLE_PREFIX}entries_current" in _objects(loom)


def test_counts_by_position_keyed_level_first_are_keyed_again(db_url: str) -> None:
    expected = _built(db_url)
    with Loom(db_url) as loom:
        open_knowledge_base(loom, "ops")
        _key_level_first(corpus_index(loom).store)
        assert _terms_key(corpus_index(loom).store) == OLD_KEY
    loom, found = _reopened(db_url)
    with loom:
        assert _terms_key(corpus_index(loom).store) == NEW_KEY
        assert found == expected


def test_the_search_index_of_older_code_is_dropped(pg_url: str) -> None:
    """A postings store written before it left its GIN index out loses it at open."""
    _built(pg_url)
    index = f"{TABLE_PREFIX}entries_search"
    loom, _ = _reopened(
        pg_url, f"CREATE INDEX {index} ON {TABLE_PREFIX}entries USING gin (search_vector)"
    )
    with loom:
        assert index not in _objects(loom)


def test_a_trigger_of_older_code_is_replaced(tmp_path: Any) -> None:
    """On SQLite, an end-counting trigger whose definition differs is dropped and recreated."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    _built(url)
    trigger = f"{TABLE_PREFIX}entries_at_end"
    with Loom(url) as loom:
        current = _objects(loom)[trigger]
    loom, _ = _reopened(
        url,
        f"DROP TRIGGER {trigger}",
        f"CREATE TRIGGER {trigger} AFTER UPDATE OF valid_to "
        f"ON {TABLE_PREFIX}entries BEGIN SELECT 1; END",
    )
    with loom:
        assert _objects(loom)[trigger] == current
