"""A batch's ends are one UPDATE on PostgreSQL, with the sequential ends' result (ADR 0059,
amended).

``append_at_batch(..., ends=...)`` used to issue one ``UPDATE`` per end; each fired the
statement-level count triggers, which upserted the same common-term rows again and again in
one transaction, so a corpus reconcile ending thousands of documents slowed super-linearly.
Now every end of the batch is one ``UPDATE ... FROM unnest(...)``. These tests hold it to the
per-end result (a row ended by an earlier end is not ended again by a later one; an id not
current ends nothing; rows ended at different positions are counted each at its own) and to
the statement count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, event

from loom_memory import InvalidArgumentError, MemoryEntry
from loom_memory.validity import PostgresTemporalStore, TemporalSqlStore
from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_asof_pruned import KEY, OTHER, _entry
from replay_tests.memory.test_kept_counts import _kept
from replay_tests.memory.test_position_counts import _read, _recount, _refilled, _tables

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

Appends = Sequence[tuple[str, Sequence[MemoryEntry], int, dict[str, Any]]]
Ends = Sequence[tuple[str, Sequence[str], int]]

FAR = 70_000
"""A position in another level-1 and level-2 block than the batch's others."""

ENDS: Ends = [
    (KEY, ["a", "b"], 5),
    (OTHER, ["a"], 5),
    (KEY, ["b", "c", "e", "never"], 6),  # b ended at 5 already; e not current; never: no row
    (OTHER, ["a", "c"], 7),  # a ended at 5 already
    (KEY, [], 7),
    (KEY, ["d"], FAR),  # two current rows of d: both end
]
APPENDS: Appends = [
    (KEY, [_entry("a", "disk wal rotate zebra")], 5, {}),  # a revised at its end's position
    (OTHER, [_entry("x", "pool worker quartz")], 7, {}),
]


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()


def _store(engine: Engine, prefix: str) -> TemporalSqlStore:
    return PostgresTemporalStore(
        engine, table_prefix=prefix, columns=[Column("revision", Integer, nullable=True)]
    )


def _written(store: TemporalSqlStore) -> TemporalSqlStore:
    """``store`` with rows at two keys to end: some current, one (``e``) ended already, one
    id (``d``) with two current rows."""
    store.append_at_batch(
        [
            (
                KEY,
                [
                    _entry("a", "disk logs rotate"),
                    _entry("b", "disk wal pool"),
                    _entry("c", "logs stall worker disk"),
                    _entry("d", "zebra quartz disk"),
                    _entry("e", "volume pool disk"),
                ],
                1,
                {},
            ),
            (OTHER, [_entry("a", "disk logs"), _entry("c", "wal wal pool")], 1, {}),
            (KEY, [_entry("d", "zebra volume")], 3, {}),
        ]
    )
    store.append_at_batch([], ends=[(KEY, ["e"], 2)])
    return store


def _rows(store: TemporalSqlStore) -> list[tuple[object, ...]]:
    with store.engine.connect() as conn:
        return [
            tuple(row)
            for row in conn.exec_driver_sql(
                f"SELECT key, entry_id, valid_from, valid_to FROM {store.entries.name} ORDER BY seq"
            )
        ]


def _updates(engine: Engine, store: TemporalSqlStore, appends: Appends, ends: Ends) -> list[str]:
    """The UPDATE statements of ``entries`` the client sent for one ``append_at_batch``."""
    sent: list[str] = []

    def watch(*args: Any) -> None:
        statement: str = args[2]
        if statement.lstrip().upper().startswith("UPDATE") and store.entries.name in statement:
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", watch)
    try:
        store.append_at_batch(appends, ends=ends)
    finally:
        event.remove(engine, "before_cursor_execute", watch)
    return sent


def test_batched_ends_leave_what_the_ends_one_by_one_leave(engine: Engine) -> None:
    """Ends at several positions in one batch (an id ended twice, ids not current, an id with
    two current rows, a revision) leave the rows, current counts and counts by position that
    the same ends leave as ``end_validity`` calls, one UPDATE each; and those equal a
    recount."""
    batched, one_by_one = _written(_store(engine, "b_")), _written(_store(engine, "s_"))
    batched.append_at_batch(APPENDS, ends=ENDS)
    for key, ids, position in ENDS:
        one_by_one.end_validity(key, ids, position)
    one_by_one.append_at_batch(APPENDS)

    assert _rows(batched) == _rows(one_by_one)
    assert _rows(batched) == [
        (KEY, "a", 1, 5),
        (KEY, "b", 1, 5),  # the first end wins
        (KEY, "c", 1, 6),
        (KEY, "d", 1, FAR),
        (KEY, "e", 1, 2),  # not ended again
        (OTHER, "a", 1, 5),
        (OTHER, "c", 1, 7),
        (KEY, "d", 3, FAR),
        (KEY, "a", 5, None),
        (OTHER, "x", 7, None),
    ]
    assert _kept(batched) == _kept(one_by_one)
    assert _tables(batched, zeros=True) == _tables(one_by_one, zeros=True)
    assert _tables(batched) == _refilled(batched)
    for key in (KEY, OTHER):
        for position in (*range(9), 255, 256, FAR - 1, FAR, FAR + 1):
            assert _read(batched, key, position) == _recount(batched, key, position), (
                key,
                position,
            )


def test_a_batch_ends_with_one_update(engine: Engine) -> None:
    """All of a batch's ends, at several keys and positions, are one UPDATE statement: the
    count triggers fire once per batch, not once per end."""
    store = _written(_store(engine, "b_"))
    assert len(_updates(engine, store, APPENDS, ENDS)) == 1
    assert _updates(engine, store, [], [(KEY, [], 9)]) == []  # nothing to end, no statement


def test_a_refused_end_ends_nothing(engine: Engine) -> None:
    """A batch with one invalid end (after valid ones) raises and ends nothing."""
    store = _written(_store(engine, "b_"))
    before = _rows(store), _kept(store), _tables(store, zeros=True)
    with pytest.raises(InvalidArgumentError):
        store.append_at_batch(APPENDS, ends=[*ENDS, (KEY, ["a"], -1)])
    assert (_rows(store), _kept(store), _tables(store, zeros=True)) == before
