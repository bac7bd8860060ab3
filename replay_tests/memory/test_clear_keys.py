"""Clearing one key, or every key, of a temporal store: what a projection's reset does.

Deleting rows one at a time through the triggers reads each row's postings and uncounts its
terms at every level, most of a corpus projection's rebuild; the SQLite store deletes the
postings first and then every count of what it cleared (``SqliteMemoryStore._delete_rows``,
``SqliteTemporalStore._delete_rows``). These tests hold that shortcut to the answer of the
slow way: the cleared key keeps no row, posting or count; every other key's rows, postings
and counts are exactly as they were (zero buckets aside, which a delete may clear); the FTS5
index passes its own integrity check and indexes only what is left; the counts at every
position equal a recount. ``test_clear_keys_postgres`` runs them again on PostgreSQL.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from sqlalchemy import Engine, text

from loom_memory.validity import TemporalSqlStore
from replay_tests.budgets import seeds
from replay_tests.memory.test_asof_pruned import KEY, OTHER, _history
from replay_tests.memory.test_kept_counts import _kept, _recounted, _store, engine
from replay_tests.memory.test_position_counts import _read, _recount, _refilled, _tables

__all__ = ["engine"]

Snapshot = dict[str, set[tuple[object, ...]]]


def _held(store: TemporalSqlStore, key: str) -> Snapshot:
    """Every row of ``key`` in each of the store's tables, zero buckets left out."""
    assert store.postings is not None
    entries, postings = store.entries.name, store.postings.name
    with store.engine.connect() as conn:

        def rows(sql: str) -> set[tuple[object, ...]]:
            return {tuple(row) for row in conn.execute(text(sql), {"key": key})}

        held = {
            "entries": rows(
                f"SELECT seq, entry, valid_from, valid_to FROM {entries} WHERE key = :key"
            ),
            "postings": rows(
                f"SELECT p.term, p.seq, p.tf FROM {postings} AS p "
                f"JOIN {entries} AS e ON e.seq = p.seq WHERE e.key = :key"
            ),
            "current_rows": rows(f"SELECT n FROM {store.row_counts_table} WHERE key = :key"),
            "current_terms": rows(
                f"SELECT term, df FROM {store.term_counts_table} WHERE key = :key"
            ),
        }
    at_rows, at_terms = _tables(store)
    held["rows_at"] = {row for row in at_rows if row[0] == key}
    held["terms_at"] = {row for row in at_terms if row[0] == key}
    return held


def _orphans(store: TemporalSqlStore) -> int:
    """Postings whose row is gone (a count of what a clear left behind)."""
    assert store.postings is not None
    with store.engine.connect() as conn:
        return conn.exec_driver_sql(
            f"SELECT count(*) FROM {store.postings.name} WHERE seq NOT IN "
            f"(SELECT seq FROM {store.entries.name})"
        ).scalar_one()


def _fts_in_step(store: TemporalSqlStore) -> None:
    """SQLite only: FTS5's integrity check (an external-content index sent a delete of a row
    it does not hold fails it), and its vocabulary's document counts equal a recount."""
    if store.engine.dialect.name != "sqlite":
        return
    fts, entries = f"{store.table_prefix}fts", store.entries.name
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
        vocabulary = dict(
            conn.exec_driver_sql(f"SELECT term, doc FROM {store.table_prefix}fts_terms").all()
        )
        texts = conn.exec_driver_sql(f"SELECT search_text FROM {entries}").scalars().all()
    assert vocabulary == Counter(term for terms in texts for term in set(terms.split()))


def _counts_in_step(store: TemporalSqlStore, last: int) -> None:
    assert _kept(store) == _recounted(store)
    assert _tables(store) == _refilled(store)
    for key in (KEY, OTHER):
        for position in range(0, last + 2):
            assert _read(store, key, position) == _recount(store, key, position), (key, position)


@pytest.mark.parametrize("seed", seeds(3))
def test_clearing_a_key_leaves_the_other_as_it_was_and_nothing_of_it(
    engine: Engine, seed: int
) -> None:
    store = _store(engine)
    rng = random.Random(seed)
    last = _history(store, rng, 40)
    other = _held(store, OTHER)
    assert _held(store, KEY)["terms_at"] and other["terms_at"]  # both keys hold counts

    store.clear(KEY)

    assert _held(store, KEY) == {table: set() for table in other}
    assert _held(store, OTHER) == other
    assert _orphans(store) == 0
    _fts_in_step(store)
    _counts_in_step(store, last)
    # Written again after the clear, it is counted from nothing.
    last = _history(store, rng, 12)
    _counts_in_step(store, last)
    _fts_in_step(store)


@pytest.mark.parametrize("seed", seeds(3))
def test_clearing_every_key_leaves_no_row_count_or_index_term(engine: Engine, seed: int) -> None:
    store = _store(engine)
    last = _history(store, random.Random(seed), 40)
    assert _held(store, KEY)["entries"] and _held(store, OTHER)["entries"]

    store.clear_all()

    empty = {table: set() for table in _held(store, KEY)}
    assert _held(store, KEY) == empty and _held(store, OTHER) == empty
    assert _kept(store) == ({}, {})
    assert _tables(store, zeros=True) == (set(), set())
    assert _orphans(store) == 0
    _fts_in_step(store)
    _counts_in_step(store, last)


@pytest.mark.parametrize("seed", seeds(2))
def test_one_delete_emptying_one_key_and_thinning_another_counts_both(
    engine: Engine, seed: int
) -> None:
    """A caller's own DELETE taking every row of one key and some of the other: the emptied
    key's counts go whole, the other's are uncounted row by row, in one statement."""
    store = _store(engine)
    last = _history(store, random.Random(seed), 40)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"DELETE FROM {store.entries.name} WHERE key = '{KEY}' OR seq / 2 * 2 = seq"
        )
    assert _held(store, KEY) == {table: set() for table in _held(store, KEY)}
    assert _held(store, OTHER)["entries"]
    assert _orphans(store) == 0
    _fts_in_step(store)
    _counts_in_step(store, last)
