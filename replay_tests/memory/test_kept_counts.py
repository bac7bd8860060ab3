"""The SQLite temporal store's kept counts, and the pruned current search that reads them.

A current search ranks from ``N`` per key and each term's document frequency per key, kept by
triggers as rows are written instead of counted at query time, and scores only the rows that
can reach the top (``loom_memory.postings.rank_current``). These tests hold the counts to a
recount from the rows after every kind of write (and after a write that never committed), the
migration that fills them for a store written without them, and the pruned search to
``rank()``'s answer, with a negative control showing that a bound one notch too low would
change answers the pruning gives right.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Engine, Integer, create_engine

from loom_memory import MemoryEntry, PostgresTemporalStore, SqliteTemporalStore
from loom_memory import postings as postings_module
from loom_memory.postings import rank
from loom_memory.sql import SqlMemoryStore
from loom_memory.validity import TemporalSqlStore
from replay_tests.budgets import seeds

KEYS = ("k:a", "k:b")
WORDS = ("disk", "logs", "rotate", "volume", "worker", "pool", "stall", "wal", "zebra", "the")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    yield engine
    engine.dispose()


def _store(engine: Engine) -> TemporalSqlStore:
    """The engine's temporal store (``test_kept_counts_postgres`` runs these tests again)."""
    temporal = PostgresTemporalStore if engine.dialect.name == "postgresql" else SqliteTemporalStore
    return temporal(engine, columns=[Column("revision", Integer, nullable=True)])


def _kept(store: TemporalSqlStore) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    with store.engine.connect() as conn:
        rows = dict(conn.exec_driver_sql(f"SELECT key, n FROM {store.row_counts_table}").all())
        terms = conn.exec_driver_sql(f"SELECT key, term, df FROM {store.term_counts_table}")
        return rows, {(key, term): df for key, term, df in terms}


def _recounted(
    store: TemporalSqlStore,
) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    assert store.postings is not None
    entries, postings = store.entries.name, store.postings.name
    with store.engine.connect() as conn:
        rows = dict(
            conn.exec_driver_sql(
                f"SELECT key, count(*) FROM {entries} WHERE valid_to IS NULL GROUP BY key"
            ).all()
        )
        terms = conn.exec_driver_sql(
            f"SELECT e.key, p.term, count(*) FROM {postings} AS p JOIN {entries} AS e "
            "ON e.seq = p.seq WHERE e.valid_to IS NULL GROUP BY e.key, p.term"
        )
        return rows, {(key, term): df for key, term, df in terms}


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))


def _churn(store: TemporalSqlStore, rng: random.Random, steps: int) -> None:
    """Random appends, revisions (end_validity then append), removals, replaces, clears."""
    position = 1
    for _ in range(steps):
        key = rng.choice(KEYS)
        action = rng.random()
        ids = [f"e{rng.randint(0, 30)}" for _ in range(rng.randint(1, 3))]
        entries = [MemoryEntry(id=i, content={"text": _text(rng)}) for i in dict.fromkeys(ids)]
        if action < 0.45:
            store.append_at(key, entries, position)
        elif action < 0.75:
            with store.engine.begin() as conn:
                store.end_validity(key, [e.id for e in entries], position, conn=conn)
                store.append_at(key, entries, position, conn=conn)
        elif action < 0.85:
            store.remove(key, ids)
        elif action < 0.93:
            store.end_validity(key, ids, position)
        elif action < 0.98:
            store.replace(key, entries)
        else:
            store.clear(key)
        position += 1


@pytest.mark.parametrize("seed", seeds(4))
def test_kept_counts_equal_a_recount_after_random_writes(engine: Engine, seed: int) -> None:
    store = _store(engine)
    rng = random.Random(seed)
    for _ in range(6):
        _churn(store, rng, 25)
        assert _kept(store) == _recounted(store)
    # A caller's own statements are counted too: an UPDATE bringing a row back, a DELETE.
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {store.entries.name} SET valid_to = NULL")
    assert _kept(store) == _recounted(store)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {store.entries.name} WHERE seq = (seq / 2) * 2")
    assert _kept(store) == _recounted(store)
    store.clear_all()  # a projection's reset, then its rebuild
    assert _kept(store) == ({}, {})
    _churn(store, rng, 40)
    assert _kept(store) == _recounted(store)
    store.drop()  # dropped and reopened: the count tables go and come back with the rows
    rebuilt = _store(engine)
    assert _kept(rebuilt) == ({}, {})
    _churn(rebuilt, rng, 40)
    assert _kept(rebuilt) == _recounted(rebuilt)


def test_a_rolled_back_write_leaves_the_counts_as_they_were(engine: Engine) -> None:
    store = _store(engine)
    store.append_at("k:a", [MemoryEntry(id="a", content={"text": "disk logs"})], 1)
    before = _kept(store)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        store.append_at("k:a", [MemoryEntry(id="b", content={"text": "disk wal"})], 2, conn=conn)
        store.end_validity("k:a", ["a"], 2, conn=conn)
        raise RuntimeError("the caller fails before committing")
    assert _kept(store) == before == _recounted(store)


_CRASHING_WRITER = """
import os, sys
from sqlalchemy import Column, Integer, create_engine
from loom_memory import MemoryEntry, PostgresTemporalStore, SqliteTemporalStore
engine = create_engine(sys.argv[1])
store = SqliteTemporalStore(engine, columns=[Column("revision", Integer, nullable=True)])
with engine.begin() as conn:
    store.end_validity("k:a", ["a"], 2, conn=conn)
    store.append_at("k:a", [MemoryEntry(id="a", content={"text": "zebra wal"})], 2, conn=conn)
    os._exit(3)  # the process dies mid-transaction: nothing commits, counts included
"""


def test_a_process_dying_mid_write_leaves_counts_and_rows_in_step(engine: Engine) -> None:
    store = _store(engine)
    store.append_at("k:a", [MemoryEntry(id="a", content={"text": "disk logs disk"})], 1)
    before = _kept(store)
    engine.dispose()
    died = subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(engine.url)], check=False, timeout=120
    )
    assert died.returncode == 3
    reopened = _store(engine)
    assert _kept(reopened) == before == _recounted(reopened)


def _drop_counts(engine: Engine, store: TemporalSqlStore) -> None:
    """Make the store look written by code that kept no counts."""
    assert store.postings is not None
    with engine.begin() as conn:
        for name in ("count_delete", "count_end", "count_start"):
            conn.exec_driver_sql(f"DROP TRIGGER {store.entries.name}_{name}")
        conn.exec_driver_sql(f"DROP INDEX {store.current_index}")
        conn.exec_driver_sql(f"DROP TABLE {store.row_counts_table}")
        conn.exec_driver_sql(f"DROP TABLE {store.term_counts_table}")


def test_opening_a_store_written_without_counts_fills_them(engine: Engine) -> None:
    store = _store(engine)
    _churn(store, random.Random(7), 60)
    _drop_counts(engine, store)
    # Written by older code: nothing counts this row (the base class's insert).
    rows, terms = store._rows("k:b", [MemoryEntry(id="late", content={"text": "zebra pool"})])
    with engine.begin() as conn:
        SqlMemoryStore._insert(store, conn, [{**row, "valid_from": 99} for row in rows], terms)
    reopened = _store(engine)
    counted = _recounted(reopened)
    assert counted[0]  # the churn left current rows to count
    assert _kept(reopened) == counted
    for query in ("zebra pool", "disk logs rotate", "the wal"):
        assert _pruned(reopened, "k:b", query, 3) == _counted(reopened, "k:b", query, 3)
    reopened.end_validity("k:b", ["late"], 100)
    assert _kept(reopened) == _recounted(reopened)


def _counted(store: TemporalSqlStore, key: str, query: str, limit: int) -> list[tuple[int, int]]:
    """``rank()``: the statistics counted over the current rows at query time."""
    assert store.postings is not None
    rows = store.entries.c
    admitted = [rows.key == key, rows.valid_to.is_(None)]
    terms = list(store.tokenizer.query_terms(query))
    with store.engine.connect() as conn:
        return [
            tuple(row) for row in rank(conn, store.entries, store.postings, admitted, terms, limit)
        ]  # type: ignore[misc]


def _pruned(
    store: TemporalSqlStore,
    key: str,
    query: str,
    limit: int,
    scored: list[int] | None = None,
) -> list[tuple[int, int]]:
    terms = list(store.tokenizer.query_terms(query))
    with store.engine.connect() as conn:
        return store._rank_current(conn, key, terms, limit, scored)


@pytest.mark.parametrize("seed", seeds(3))
def test_the_pruned_search_returns_what_rank_returns(engine: Engine, seed: int) -> None:
    store = _store(engine)
    rng = random.Random(100 + seed)
    _churn(store, rng, 150)
    questions = ["disk", "zebra wal", "the logs rotate pool", "absent", "stall stall worker"]
    questions += [_text(rng) for _ in range(20)]
    for query in questions:
        for limit in (1, 2, 3, 10):
            for key in (*KEYS, "k:none"):
                assert _pruned(store, key, query, limit) == _counted(store, key, query, limit)


def test_a_current_search_goes_through_the_kept_counts(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(engine)
    store.append_at("k:a", [MemoryEntry(id="a", content={"text": "disk logs"})], 1)

    def refuse(*args: object, **kwargs: object) -> list[tuple[int, int]]:
        raise AssertionError("a current search recounted its statistics")

    monkeypatch.setattr("loom_memory.sql.rank", refuse)
    assert [entry.id for entry in store.search("k:a", "disk")] == ["a"]
    with pytest.raises(AssertionError):  # narrowed by where=: counted at query time
        store.search("k:a", "disk", where=store.entries.c.revision.is_(None))


def _skewed(store: TemporalSqlStore) -> None:
    """One row holds the rare term once; a few hold the common term, one of them 20 times;
    the rest hold neither. The common row outscores the rare one only through its count."""
    entries = [MemoryEntry(id="rare", content={"text": "zebra"})]
    entries += [MemoryEntry(id="heavy", content={"text": " ".join(["logs"] * 20)})]
    entries += [MemoryEntry(id=f"light{i}", content={"text": "logs"}) for i in range(2)]
    entries += [MemoryEntry(id=f"other{i}", content={"text": "pool"}) for i in range(16)]
    store.append_at("k:a", entries, 1)


def test_pruning_scores_fewer_rows_and_still_finds_the_best(engine: Engine) -> None:
    store = _store(engine)
    entries = [MemoryEntry(id=f"c{i}", content={"text": "logs volume"}) for i in range(200)]
    entries.append(MemoryEntry(id="r", content={"text": "zebra logs"}))
    store.append_at("k:a", entries, 1)
    scored: list[int] = []
    found = _pruned(store, "k:a", "zebra logs", 1, scored)
    assert found == _counted(store, "k:a", "zebra logs", 1)
    assert scored == [1]  # only the row holding the rare term: 200 common rows never scored
    assert [entry.id for entry in store.search("k:a", "zebra logs", limit=1)] == ["r"]


def test_a_bound_below_the_exact_one_would_miss_a_row(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(engine)
    _skewed(store)
    expected = _counted(store, "k:a", "zebra logs", 1)
    assert _pruned(store, "k:a", "zebra logs", 1) == expected
    with store.engine.connect() as conn:
        heavy = conn.exec_driver_sql(
            f"SELECT seq FROM {store.entries.name} WHERE entry_id = 'heavy'"
        ).scalar()
    assert expected[0][0] == heavy
    # Negative control: bound a term by its share at tf = 1 (below the exact bound) and the
    # pruned search stops after the rare row, answering wrong. The real bound prevents that.
    monkeypatch.setattr(postings_module, "term_bound", lambda weight: weight)
    assert _pruned(store, "k:a", "zebra logs", 1) != expected


def test_a_row_tying_the_last_place_is_never_pruned(engine: Engine) -> None:
    store = _store(engine)
    twins = [MemoryEntry(id=f"t{i}", content={"text": "disk logs"}) for i in (9, 10, 2, 1)]
    others = [MemoryEntry(id=f"o{i}", content={"text": "logs pool"}) for i in range(6)]
    store.append_at("k:a", [*twins, *others], 1)
    found = _pruned(store, "k:a", "disk logs", 2)
    assert found == _counted(store, "k:a", "disk logs", 2)
    assert len(found) == 4  # every twin ties the second place, so every twin is returned
    assert [e.id for e in store.search("k:a", "disk logs", limit=2)] == ["t1", "t10"]
