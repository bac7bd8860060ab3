"""SQLite search keeps each term's document count between writes and still answers exactly.

The counts are kept per version of the FTS index (its structure and averages records and the
schema version, read in the search's first statement); a write changes the version, so the
next search counts again. The reference is the plain OR query, ``ORDER BY bm25(), seq``, run
on the same connection after every write.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event

from loom_memory import MemoryEntry, SqliteMemoryStore
from loom_memory.sqlite import _IndexState
from replay_tests.budgets import examples

VOCABULARY = [f"w{index}" for index in range(40)]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    yield engine
    engine.dispose()


def text_of(rng: random.Random) -> str:
    """Zipf-like rows of very different lengths: w0 in nearly every row, w39 in few."""
    length = rng.choice([1, 3, 8, 30])
    return " ".join(rng.choice(VOCABULARY[: rng.randint(1, 40)]) for _ in range(length))


def plain_or(store: SqliteMemoryStore, conn: Connection, terms: list[str], limit: int) -> list[str]:
    """Ids the query the pruning replaces returns: it scores every match, sorts, cuts."""
    fts = store.fts_table
    match = " OR ".join(f'"{term}"' for term in terms)
    found = conn.exec_driver_sql(
        f"SELECT e.entry_id FROM {store.entries.name} e JOIN {fts} ON e.seq = {fts}.rowid "
        f"WHERE {fts} MATCH ? AND e.key = 'k' ORDER BY bm25({fts}), e.seq LIMIT ?",
        (match, limit),
    )
    return [row[0] for row in found]


def vocabulary_reads(store: SqliteMemoryStore) -> list[str]:
    """Record the statements that count documents (the ``fts5vocab`` view) from now on."""
    reads: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if store.vocabulary_table in statement:
            reads.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    return reads


def test_searches_between_random_writes_answer_the_plain_or_query(engine: Engine) -> None:
    """Counts kept across searches never outlive a write: every answer is the plain query's."""
    store = SqliteMemoryStore(engine)
    rng = random.Random(16)
    ids = 0
    for round_ in range(examples(60)):
        verb = rng.choice(["append", "append", "remove", "replace", "other key", "none"])
        if verb == "append":
            batch = [MemoryEntry(id=f"e{ids + i}", content=text_of(rng)) for i in range(30)]
            ids += len(batch)
            store.append("k", batch)
            store.append("k", batch[:3])  # duplicates: equal scores, so seq decides
        elif verb == "remove" and ids:
            store.remove("k", [f"e{rng.randrange(ids)}" for _ in range(15)])
        elif verb == "replace" and round_ % 20 == 0:
            store.replace("k", [MemoryEntry(id=f"r{i}", content=text_of(rng)) for i in range(50)])
        elif verb == "other key":
            store.append("other", [MemoryEntry(id=f"o{round_}", content=text_of(rng))])
        for _ in range(8):
            terms = rng.sample([*VOCABULARY, "absent"], rng.randint(1, 6))
            limit = rng.choice([1, 3, 10])
            answered = [entry.id for entry in store.search("k", " ".join(terms), limit=limit)]
            with engine.connect() as conn:
                assert answered == plain_or(store, conn, terms, limit), (round_, terms, limit)


def test_a_repeated_search_counts_nothing_until_a_write(engine: Engine) -> None:
    """The second search of the same terms reads no count; after a write, it counts again."""
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(id=str(i), content=f"w{i % 5} w9") for i in range(40)])
    reads = vocabulary_reads(store)

    store.search("k", "w1 w9", limit=3)
    first = len(reads)
    store.search("k", "w9 w1", limit=3)
    unchanged = len(reads)
    store.search("k", "w1 w2", limit=3)  # only w2 is new at this version
    store.append("k", [MemoryEntry(id="late", content="w1")])
    store.search("k", "w1 w9", limit=3)

    assert first == 1
    assert unchanged == first
    assert reads[1].count("?") == 1
    assert len(reads) == 3


def test_a_writing_transaction_counts_its_own_pending_rows(engine: Engine) -> None:
    """Inside a transaction that has written, kept counts are not trusted: its rows count."""
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(id=f"c{i}", content="w1 filler") for i in range(30)])
    store.search("k", "w1 w2", limit=3)  # counts kept at the committed version
    reads = vocabulary_reads(store)
    with engine.begin() as conn:
        store.append("k", [MemoryEntry(id=f"n{i}", content="w2 w2") for i in range(60)], conn=conn)
        store.append("k", [MemoryEntry(id="only-w1", content="w1 w1 w1")], conn=conn)
        answered = [entry.id for entry in store.search("k", "w1 w2", limit=3, conn=conn)]
        expected = plain_or(store, conn, ["w1", "w2"], 3)
        conn.rollback()

    assert answered == expected
    assert reads, "the writing transaction's search used the committed version's counts"


def test_counts_kept_past_a_write_answer_wrong(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: counts from before a write (a version that ignores writes) prune a
    row that belongs in the answer."""
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(id=f"b{i}", content="w2") for i in range(200)])
    store.append("k", [MemoryEntry(id=f"a{i}", content="w1") for i in range(200)])
    store.append("k", [MemoryEntry(id="both", content="w1 w2 filler filler filler")])
    read_state = SqliteMemoryStore._index_state

    def frozen(self: SqliteMemoryStore, conn: Connection) -> _IndexState:
        state = read_state(self, conn)
        return _IndexState(
            version=(0, b"frozen", b""),
            rows=state.rows,
            low_key=state.low_key,
            high_key=state.high_key,
        )

    monkeypatch.setattr(SqliteMemoryStore, "_index_state", frozen)
    store.search("k", "w1 w2", limit=1)  # w2 in 201 of 401 rows: its bound is near zero
    store.remove("k", [f"b{i}" for i in range(200)])
    store.append("k", [MemoryEntry(id=f"z{i}", content="filler") for i in range(200)])
    store.append("k", [MemoryEntry(id="short", content="w2")])  # w2 is now rare: it wins

    answered = [entry.id for entry in store.search("k", "w1 w2", limit=1)]
    with engine.connect() as conn:
        expected = plain_or(store, conn, ["w1", "w2"], 1)
    monkeypatch.undo()
    honest = [entry.id for entry in store.search("k", "w1 w2", limit=1)]

    assert honest == expected
    assert answered != expected
