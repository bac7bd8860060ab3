"""PostgreSQL's count triggers delete every count they touch that is left at zero (ADR 0059,
amended "pgtrig").

The statement-level triggers of ``loom_memory.postgres_counts`` sum a statement's changes per
group once, add the non-zero sums, and delete the groups at zero among those the statement
touched: the ones the addition left at zero, and the ones whose changes cancelled (an insert
may have left one of those at zero, and an erasure must not leave its term there). These tests
drive the triggers by a caller's own UPDATE and DELETE and read the count tables directly: no
row at zero that the statement touched remains, and the counts equal a recount. Each fails
when the triggers skip the delete; the last two when they delete only what the addition left
at zero.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Engine, Integer

from loom_memory.validity import PostgresTemporalStore, TemporalSqlStore
from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_asof_pruned import KEY, OTHER, _entry
from replay_tests.memory.test_kept_counts import _kept, _recounted
from replay_tests.memory.test_position_counts import _read, _recount, _refilled, _tables

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

FAR = 70_000
"""A position in another level-1 and level-2 block than the others."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()


def _store(engine: Engine) -> TemporalSqlStore:
    return PostgresTemporalStore(engine, columns=[Column("revision", Integer, nullable=True)])


def _run(store: TemporalSqlStore, statement: str) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql(statement.format(entries=store.entries.name))


def _zeros(store: TemporalSqlStore, key: str) -> list[tuple[object, ...]]:
    """The rows of ``key`` at zero (or below, for the current counts) in the four tables."""
    rows, terms = _tables(store, zeros=True)
    current_rows, current_terms = _kept(store)
    return [
        *(row for row in rows | terms if row[0] == key and row[-1] == 0),
        *((k, n) for k, n in current_rows.items() if k == key and n <= 0),
        *((k, t, df) for (k, t), df in current_terms.items() if k == key and df <= 0),
    ]


def _key_rows(store: TemporalSqlStore, key: str) -> list[tuple[object, ...]]:
    """Every row of ``key`` in the four count tables."""
    rows, terms = _tables(store, zeros=True)
    current_rows, current_terms = _kept(store)
    return [
        *(row for row in rows | terms if row[0] == key),
        *((k, n) for k, n in current_rows.items() if k == key),
        *((k, t, df) for (k, t), df in current_terms.items() if k == key),
    ]


def _assert_exact(store: TemporalSqlStore, last: int) -> None:
    """The counts at every position and the current ones equal a recount from the rows."""
    for key in (KEY, OTHER):
        for position in (*range(-1, last + 2), FAR - 1, FAR, FAR + 1):
            assert _read(store, key, position) == _recount(store, key, position), (key, position)
    assert _tables(store) == _refilled(store)
    assert _kept(store) == _recounted(store)


def test_ending_then_deleting_every_row_of_a_key_leaves_no_count_of_it(engine: Engine) -> None:
    """A caller's own UPDATE ending every row of a key brings its current counts and the
    blocks holding both the rows' starts and their end to zero: they are deleted; a DELETE of
    the rows then takes out every change of the key: nothing of the key remains."""
    store = _store(engine)
    store.append_at(KEY, [_entry("a", "disk logs rotate"), _entry("b", "disk wal pool")], 1)
    store.append_at(KEY, [_entry("c", "logs stall disk"), _entry("d", "zebra quartz")], 3)
    store.append_at(OTHER, [_entry("a", "disk logs")], 2)
    _run(store, "UPDATE {entries} SET valid_to = 9 WHERE key = 'k:a'")
    assert _zeros(store, KEY) == []
    assert KEY not in _kept(store)[0]
    assert not [row for row in _tables(store, zeros=True)[0] if row[0] == KEY and row[1] > 0]
    _assert_exact(store, 10)
    _run(store, "DELETE FROM {entries} WHERE key = 'k:a'")
    assert _key_rows(store, KEY) == []
    _assert_exact(store, 10)


def test_a_statement_ending_and_restoring_rows_leaves_no_zero(engine: Engine) -> None:
    """One UPDATE that ends some rows, undoes the end of others and moves one to another key
    leaves no count it touched at zero, and every count exact."""
    store = _store(engine)
    store.append_at(KEY, [_entry("a", "disk logs"), _entry("b", "disk wal")], 1)
    store.append_at(KEY, [_entry("c", "disk logs stall")], 2)
    store.end_validity(KEY, ["c"], 4)
    store.append_at(OTHER, [_entry("x", "quartz")], 2)
    _run(
        store,
        "UPDATE {entries} SET valid_to = CASE WHEN valid_to IS NULL THEN 6 END, "
        "key = CASE WHEN entry_id = 'b' THEN 'k:b' ELSE key END WHERE key = 'k:a'",
    )
    assert _zeros(store, KEY) == []
    assert _zeros(store, OTHER) == []
    _assert_exact(store, 8)


def _revised(store: TemporalSqlStore) -> None:
    """``a`` written at 1 and revised at 5 (its end and the new row's append at one position),
    which leaves the buckets of their shared terms at 5 at zero: the insert that brings them
    there deletes nothing."""
    store.append_at(KEY, [_entry("a", "disk logs rotate"), _entry("b", "pool")], 1)
    store.append_at_batch([(KEY, [_entry("a", "disk logs wal")], 5, {})], ends=[(KEY, ["a"], 5)])
    zeros = {row[2] for row in _zeros(store, KEY) if len(row) == 5 and row[3] == 5}
    assert zeros == {"disk", "logs"}  # the case under test is there


def test_erasing_a_revised_document_leaves_no_term_of_it(engine: Engine) -> None:
    """A DELETE of both revisions adds nothing at the revision's position (their changes
    there cancel), yet the shared terms' buckets at zero there go: no term of the erased
    document stays in the tables."""
    store = _store(engine)
    _revised(store)
    _run(store, "DELETE FROM {entries} WHERE entry_id = 'a'")
    _, terms = _tables(store, zeros=True)
    assert {row[2] for row in terms} == {"pool"}
    assert _zeros(store, KEY) == []
    _assert_exact(store, 6)


def test_a_statement_deletes_a_zero_where_its_changes_cancel(engine: Engine) -> None:
    """Ending the revision far later takes its start out and puts it back (they cancel): the
    buckets at zero at its start, which that statement touched, are deleted as the
    statement's other zeros are."""
    store = _store(engine)
    _revised(store)
    _run(store, f"UPDATE {{entries}} SET valid_to = {FAR} WHERE valid_to IS NULL")
    assert not [row for row in _zeros(store, KEY) if len(row) == 5 and row[3] == 5]
    _assert_exact(store, 6)
