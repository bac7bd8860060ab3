"""Counts kept by position, and the as-of search that reads them (ADR 0059).

A temporal store keeps how ``N`` and each term's document frequency changed at each position,
summed per bucket at three levels (``loom_memory.position_counts``); a search as of P sums
them instead of counting the rows valid at P. These tests hold the counts at every position to
a recount from the rows after every kind of write (a caller's own UPDATE and DELETE, an
erasure-like delete and a clear included), the kept tables to a refill from scratch (so no
bucket is left at zero and no erased row's term stays), the bucket ranges to an exact
partition of the positions, and the as-of search to a brute-force BM25 after an erasure; a
negative control shows the search answers from the kept counts (corrupt them and its answer
changes) and never counts the valid rows. ``test_position_counts_postgres`` runs them again on
PostgreSQL.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, event

from loom_memory.entry import MemoryEntry
from loom_memory.position_counts import SHIFTS, ranges, read_counts, refill_statements
from loom_memory.postgres_counts import drop_position_triggers
from loom_memory.validity import TemporalSqlStore, ValidAt
from replay_tests.budgets import seeds
from replay_tests.memory.test_asof_pruned import KEY, OTHER, _brute_force, _history, _rows, _top
from replay_tests.memory.test_kept_counts import _store, engine

__all__ = ["engine"]  # the fixture these tests (and test_position_counts_postgres's) are given

WORDS = ("disk", "logs", "rotate", "volume", "worker", "pool", "stall", "wal", "zebra", "quartz")


def _recount(store: TemporalSqlStore, key: str, position: int) -> tuple[int, dict[str, int]]:
    """``N`` and every word's document frequency among the rows valid at ``position``."""
    valid = [
        row
        for row in _rows(store, key)
        if row.valid_from <= position and (row.valid_to is None or row.valid_to > position)
    ]
    return len(valid), dict(Counter(term for row in valid for term in row.terms))


def _read(store: TemporalSqlStore, key: str, position: int) -> tuple[int, dict[str, int]]:
    with store.engine.connect() as conn:
        return read_counts(
            conn,
            rows=store.rows_at_table,
            terms=store.terms_at_table,
            key=key,
            words=[*WORDS, "absent"],
            position=position,
        )


def _tables(
    store: TemporalSqlStore, *, zeros: bool = False
) -> tuple[set[tuple[object, ...]], set[tuple[object, ...]]]:
    """The kept tables' rows; without ``zeros``, the buckets summing to zero are left out (an
    end and an append at one position cancel on their shared terms; a delete clears them)."""
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT key, level, bucket, n FROM {store.rows_at_table}")
        terms = conn.exec_driver_sql(
            f"SELECT key, level, term, bucket, df FROM {store.terms_at_table}"
        )
        return (
            {tuple(row) for row in rows if zeros or row[-1]},
            {tuple(row) for row in terms if zeros or row[-1]},
        )


def _refilled(store: TemporalSqlStore) -> tuple[set[tuple[object, ...]], set[tuple[object, ...]]]:
    """The tables as counted from scratch from the rows (what opening a store without them
    fills), in a transaction rolled back so the kept ones stay."""
    assert store.postings is not None
    with store.engine.connect() as conn, conn.begin() as transaction:
        for statement in refill_statements(
            entries=store.entries.name,
            postings=store.postings.name,
            rows=store.rows_at_table,
            terms=store.terms_at_table,
        ):
            conn.exec_driver_sql(statement)
        rows = conn.exec_driver_sql(f"SELECT key, level, bucket, n FROM {store.rows_at_table}")
        terms = conn.exec_driver_sql(
            f"SELECT key, level, term, bucket, df FROM {store.terms_at_table}"
        )
        found = {tuple(row) for row in rows}, {tuple(row) for row in terms}
        transaction.rollback()
    return found


def _callers_own_writes(store: TemporalSqlStore, rng: random.Random, last: int) -> None:
    """What the store never issues but anyone may: an entry moved to another key, a start
    moved, an end undone, an end before the start, and a plain DELETE (as an erasure does)."""
    table = store.entries.name
    with store.engine.begin() as conn:
        seqs = [seq for (seq,) in conn.exec_driver_sql(f"SELECT seq FROM {table} ORDER BY seq")]
        picked = rng.sample(seqs, 5)
        conn.exec_driver_sql(f"UPDATE {table} SET key = '{OTHER}' WHERE seq = {picked[0]}")
        conn.exec_driver_sql(f"UPDATE {table} SET valid_from = 2 WHERE seq = {picked[1]}")
        conn.exec_driver_sql(f"UPDATE {table} SET valid_to = NULL WHERE seq = {picked[2]}")
        conn.exec_driver_sql(
            f"UPDATE {table} SET valid_from = {last}, valid_to = 3 WHERE seq = {picked[3]}"
        )
        conn.exec_driver_sql(f"DELETE FROM {table} WHERE seq = {picked[4]}")


@pytest.mark.parametrize("seed", seeds(2))
def test_counts_at_every_position_equal_a_recount(engine: Engine, seed: int) -> None:
    """After random appends, ends, re-appends and clears, then a caller's own UPDATEs and
    DELETE, ``N`` and every term's frequency read at each position equal a recount of the
    rows valid then, and the kept tables' non-zero buckets equal a refill from scratch."""
    store = _store(engine)
    rng = random.Random(500 + seed)
    last = _history(store, rng, 36)
    for phase in ("store", "caller"):
        for key in (KEY, OTHER):
            for position in range(-1, last + 2):
                assert _read(store, key, position) == _recount(store, key, position), (
                    phase,
                    key,
                    position,
                )
        assert _tables(store) == _refilled(store)
        _callers_own_writes(store, rng, last)


def test_the_ranges_partition_the_positions_up_to_p() -> None:
    """Each position at or below P lands in exactly one bucket the ranges of P select, and
    none above P does: around every block edge of every level, far out, and below zero."""
    edges = {0, 1, 256, 4096, 65_536, 20_002, 10**7 + 3}
    probes = sorted({p + d for p in edges for d in (-2, -1, 0, 1, 2)} | {-70_000})
    for position in probes:
        chosen = ranges(position)
        for probe in probes:
            buckets = [(first, probe >> SHIFTS[level], last) for level, first, last in chosen]
            hits = sum(
                1 for first, at, last in buckets if (first is None or first <= at) and at <= last
            )
            assert hits == (1 if probe <= position else 0), (position, probe)


def test_an_erased_row_leaves_no_count_and_as_of_answers_without_it(engine: Engine) -> None:
    """Deleting a row (an erasure) takes its changes out: its only term is in no bucket,
    and the as-of search at every position equals a brute force over the remaining rows."""
    store = _store(engine)
    rng = random.Random(77)
    last = _history(store, rng, 24)
    store.append_at(KEY, [MemoryEntry(id="secret", content={"text": "xylophone disk"})], last)
    store.end_validity(KEY, ["secret"], last + 2)
    assert _pruned_search(store, "xylophone", last + 1, 4)  # found before the erasure
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {store.entries.name} WHERE entry_id = 'secret'")
    _, terms = _tables(store, zeros=True)
    assert not [row for row in terms if row[2] == "xylophone"]
    assert _tables(store) == _refilled(store)
    rows = _rows(store, KEY)
    for position in range(last + 4):
        for query in ("xylophone disk", "pool wal", "zebra"):
            words = list(store.tokenizer.query_terms(query))
            expected = _top(_brute_force(rows, position, words), 4)
            assert _pruned_search(store, query, position, 4) == expected, (position, query)


def _pruned_search(
    store: TemporalSqlStore, query: str, position: int, limit: int
) -> list[tuple[int, int]]:
    terms = list(store.tokenizer.query_terms(query))
    with store.engine.connect() as conn:
        valid = ValidAt(store.entries, position)
        return store._rank_as_of(conn, KEY, terms, limit, valid, None)


@contextmanager
def _statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements ``engine`` sends inside the block, in order."""
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _emptied_or_filled(statements: list[str], tables: list[str]) -> list[str]:
    """The statements that delete from or insert into any of ``tables``."""
    return [
        statement
        for statement in statements
        for table in tables
        if statement.startswith((f"DELETE FROM {table}", f"INSERT INTO {table} "))
    ]


def test_the_as_of_search_answers_from_the_kept_counts(engine: Engine) -> None:
    """Negative control: with a change of ``N`` slipped into the kept counts (at a position
    before any write) the as-of scores change (the search reads them), and no statement of an
    as-of search counts rows."""
    store = _store(engine)
    last = _history(store, random.Random(9), 30)
    position = last - 3
    before = _pruned_search(store, "disk zebra", position, 5)
    assert before == _top(
        _brute_force(_rows(store, KEY), position, ["disk", "zebra"]), 5
    )  # right before tampering
    with _statements(store.engine) as seen:
        store.search_as_of(KEY, "disk zebra", position, limit=5)
    assert any(store.terms_at_table in statement for statement in seen)
    assert not any("count(" in statement.lower() for statement in seen)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO {store.rows_at_table} (key, level, bucket, n) "
            f"VALUES ('{KEY}', 2, -1, 1000)"
        )
    assert _pruned_search(store, "disk zebra", position, 5) != before


def test_a_new_store_counts_no_rows_on_open(engine: Engine) -> None:
    """A store whose entries table this open creates has nothing to count: no statement of
    the open empties or fills a count table (they are created empty with it), and the store
    then counts its writes as any other does. The refill still runs where there are rows
    (``test_opening_a_store_written_without_them_fills_them``, and without the current
    counts in ``test_kept_counts``)."""
    with _statements(engine) as seen:
        store = _store(engine)
    counted = [
        store.row_counts_table,
        store.term_counts_table,
        store.rows_at_table,
        store.terms_at_table,
    ]
    assert _emptied_or_filled(seen, counted) == []
    assert any(f"CREATE TABLE {store.terms_at_table}" in statement for statement in seen)
    last = _history(store, random.Random(5), 12)
    for position in range(last + 1):
        assert _read(store, KEY, position) == _recount(store, KEY, position), position


def _drop_position_counts(store: TemporalSqlStore) -> None:
    """Make the store look written by code that kept no counts by position."""
    with store.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            for statement in drop_position_triggers(store.table_prefix):
                conn.exec_driver_sql(statement)
        else:
            for name in ("at_end", "at_move", "at_delete"):
                conn.exec_driver_sql(f"DROP TRIGGER {store.entries.name}_{name}")
        conn.exec_driver_sql(f"DROP TABLE {store.rows_at_table}")
        conn.exec_driver_sql(f"DROP TABLE {store.terms_at_table}")


def test_opening_a_store_written_without_them_fills_them(engine: Engine) -> None:
    """A store opened without the tables counts every row into them, and its triggers keep
    them from then on: reads at every position equal a recount, after an end too."""
    store = _store(engine)
    last = _history(store, random.Random(21), 30)
    _drop_position_counts(store)
    store.end_validity(KEY, [row.entry_id for row in _rows(store, KEY)][:5], last + 1)
    reopened = _store(engine)
    reopened.end_validity(KEY, [row.entry_id for row in _rows(store, KEY)][5:9], last + 2)
    for position in range(last + 3):
        assert _read(reopened, KEY, position) == _recount(reopened, KEY, position), position
    assert _read(reopened, KEY, last + 2)[0] > 0  # the history left rows to count
