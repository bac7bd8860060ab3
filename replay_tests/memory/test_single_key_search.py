"""SQLite search leaves the entries table out while every row is at the searched key.

The key check joins each ranked statement to the entries table's ``(key, seq)`` index; when the
key's rows are all the store's rows (a store per agent or per conversation), that join rejects
nothing and costs a lookup per matched row. The answer must stay exactly the plain OR query's,
and the join must come back the moment another key holds a row.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text

from loom_memory import MemoryEntry, SqliteMemoryStore
from loom_memory.entry import decode_entry
from replay_tests.budgets import examples

VOCABULARY = [f"w{index}" for index in range(40)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    store = SqliteMemoryStore(engine)
    rng = random.Random(5)
    texts = [
        " ".join(
            rng.choice(VOCABULARY[: rng.randint(1, 40)]) for _ in range(rng.choice([1, 4, 30]))
        )
        for _ in range(400)
    ]
    texts += texts[:30]  # exact duplicates: ties fall to seq
    store.append("k", [MemoryEntry(content=body, id=str(n)) for n, body in enumerate(texts)])
    store.remove("k", ["3", "4"])
    yield store
    engine.dispose()


def plain_or(store: SqliteMemoryStore, terms: list[str], limit: int) -> list[object]:
    """The ids of the query the pruning replaces: every match scored, sorted, cut."""
    fts = store.fts_table
    with store.engine.begin() as conn:
        rows = conn.execute(
            text(
                f"SELECT e.entry FROM {store.entries.name} e JOIN {fts} ON e.seq = {fts}.rowid "
                f"WHERE {fts} MATCH :match AND e.key = 'k' ORDER BY bm25({fts}), e.seq "
                "LIMIT :limit"
            ),
            {"match": " OR ".join(f'"{term}"' for term in terms), "limit": limit},
        )
        return [decode_entry(row.entry).id for row in rows]


def ranked_statements(engine: Engine, search: Any) -> list[str]:
    """The ranked (``bm25``) statements ``search()`` runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "bm25(" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        search()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return seen


def test_a_single_key_store_answers_exactly_the_plain_or_query(store: SqliteMemoryStore) -> None:
    """300 random queries (``examples``) on a one-key store: the plain OR query's ids, in
    its order."""
    rng = random.Random(13)
    for _ in range(examples(300)):
        terms = rng.sample([*VOCABULARY, "absent"], rng.randint(1, 7))
        limit = rng.choice([1, 3, 10, 25])
        found = [entry.id for entry in store.search("k", " ".join(terms), limit=limit)]
        assert found == plain_or(store, terms, limit), (terms, limit)


def test_the_key_check_is_left_out_only_while_one_key_holds_every_row(
    store: SqliteMemoryStore,
) -> None:
    """No join to the entries while the key holds every row; the join as soon as another does."""
    rows = store.entries.name

    alone = ranked_statements(store.engine, lambda: store.search("k", "w0 w30", limit=5))
    assert alone, "the probe saw no ranked statement"
    assert all(rows not in statement for statement in alone)

    store.append("other", [MemoryEntry(content="w0 w30 w30 w30", id="elsewhere")])
    shared = ranked_statements(store.engine, lambda: store.search("k", "w0 w30", limit=5))
    assert shared and all(rows in statement for statement in shared)
    found = [entry.id for entry in store.search("k", "w0 w30", limit=5)]
    assert "elsewhere" not in found
    assert found == plain_or(store, ["w0", "w30"], 5)


def test_a_search_of_another_key_finds_nothing_in_a_one_key_store(
    store: SqliteMemoryStore,
) -> None:
    """Negative control: leaving the key check out must never answer for a different key."""
    assert store.search("k2", "w0 w1 w2", limit=10) == []
