"""Clearing one key, or every key, of the PostgreSQL temporal store: ``test_clear_keys``'s
tests collected again here against a fresh PostgreSQL database (this module's ``engine``).

PostgreSQL's delete triggers delete every count of a key the statement left with no row
instead of summing its rows' changes (``loom_memory.postgres_counts._emptied``). What only
PostgreSQL can get wrong is tested here: a writer adding rows to the key while it is cleared,
committing first or waiting for the clear, keeps exactly its own rows' counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Connection, Engine

from loom_memory import MemoryEntry
from loom_memory.validity import TemporalSqlStore
from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_asof_pruned import KEY, OTHER
from replay_tests.memory.test_clear_keys import (
    _counts_in_step,
    test_clearing_a_key_leaves_the_other_as_it_was_and_nothing_of_it,
    test_clearing_every_key_leaves_no_row_count_or_index_term,
    test_one_delete_emptying_one_key_and_thinning_another_counts_both,
)
from replay_tests.memory.test_kept_counts import _store
from replay_tests.memory.test_kept_counts_postgres import _wait_for_a_lock_wait

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (
    test_clearing_a_key_leaves_the_other_as_it_was_and_nothing_of_it,
    test_clearing_every_key_leaves_no_row_count_or_index_term,
    test_one_delete_emptying_one_key_and_thinning_another_counts_both,
)
"""The SQLite file's tests, collected again in this module against PostgreSQL."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()


def _filled(store: TemporalSqlStore) -> None:
    for position in range(1, 6):
        entries = [
            MemoryEntry(id=f"e{n}", content={"text": f"disk logs wal pool {n}"}) for n in range(4)
        ]
        store.append_at(KEY, entries, position)
    store.append_at(OTHER, [MemoryEntry(id="o", content={"text": "zebra disk"})], 1)


def _written(store: TemporalSqlStore, *, conn: Connection | None = None) -> None:
    """A writer's rows of the key: a row of an id the clear deletes, and a new one."""
    store.append_at(
        KEY,
        [
            MemoryEntry(id="e1", content={"text": "disk volume"}),
            MemoryEntry(id="new", content={"text": "worker stall disk"}),
        ],
        7,
        conn=conn,
    )


@pytest.mark.parametrize("writer_first", [True, False], ids=["writer-first", "clear-first"])
def test_a_key_cleared_while_a_writer_adds_to_it_keeps_the_writers_counts(
    engine: Engine, writer_first: bool
) -> None:
    store = _store(engine)
    _filled(store)
    failures: list[BaseException] = []

    def in_thread(work: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the main thread
                failures.append(exc)

        return threading.Thread(target=run)

    with engine.begin() as conn:
        if writer_first:
            _written(store, conn=conn)
            other = in_thread(lambda: store.clear(KEY))
        else:
            store.clear(KEY, conn=conn)
            other = in_thread(lambda: _written(store))
        other.start()
        _wait_for_a_lock_wait(engine, time.monotonic() + 60)
    other.join()
    assert not failures
    kept = store.read(KEY)
    # The clear deleted what it saw: the writer's two rows stay either way.
    assert sorted(entry.id for entry in kept) == ["e1", "new"]
    _counts_in_step(store, 8)
