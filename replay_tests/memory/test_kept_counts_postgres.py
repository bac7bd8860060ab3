"""The PostgreSQL temporal store's kept counts and pruned current search (ADR 0056, amended).

The SQLite file's tests that hold for any backend run here again against a fresh PostgreSQL
database (imported below: pytest collects them in this module, with this module's ``engine``):
counts equal a recount after every verb and a caller's own UPDATE and DELETE, a rolled-back
write, the pruned search equal to ``rank()`` on random histories, a current search that never
recounts, pruning seen to happen, a bound one notch too low answering wrong, ties at the
boundary. What only PostgreSQL can do wrong is tested here: a connection killed by the server
mid-transaction, a store written by code without counts (no tables, no triggers), and two
writers of one key on two connections at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from loom_memory import MemoryEntry
from loom_memory.postgres_counts import drop_count_triggers
from loom_memory.sql import SqlMemoryStore
from loom_memory.validity import TemporalSqlStore
from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_kept_counts import (
    _churn,
    _counted,
    _kept,
    _pruned,
    _recounted,
    _store,
    test_a_bound_below_the_exact_one_would_miss_a_row,
    test_a_current_search_goes_through_the_kept_counts,
    test_a_rolled_back_write_leaves_the_counts_as_they_were,
    test_a_row_tying_the_last_place_is_never_pruned,
    test_kept_counts_equal_a_recount_after_random_writes,
    test_pruning_scores_fewer_rows_and_still_finds_the_best,
    test_the_pruned_search_returns_what_rank_returns,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (
    test_a_bound_below_the_exact_one_would_miss_a_row,
    test_a_current_search_goes_through_the_kept_counts,
    test_a_rolled_back_write_leaves_the_counts_as_they_were,
    test_a_row_tying_the_last_place_is_never_pruned,
    test_kept_counts_equal_a_recount_after_random_writes,
    test_pruning_scores_fewer_rows_and_still_finds_the_best,
    test_the_pruned_search_returns_what_rank_returns,
)
"""The SQLite file's backend-neutral tests, collected again in this module against PostgreSQL."""

WORDS = ["disk", "logs", "rotate", "volume", "worker", "pool", "stall", "wal", "zebra"]


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()


def _entry(entry_id: str, text: str) -> MemoryEntry:
    return MemoryEntry(id=entry_id, content={"text": text})


def test_a_connection_killed_mid_write_leaves_counts_and_rows_in_step(engine: Engine) -> None:
    store = _store(engine)
    store.append_at("k:a", [_entry("a", "disk logs disk")], 1)
    before = _kept(store)
    doomed = engine.connect()
    doomed.begin()
    store.end_validity("k:a", ["a"], 2, conn=doomed)
    store.append_at("k:a", [_entry("a", "zebra wal"), _entry("b", "zebra")], 2, conn=doomed)
    pid = doomed.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    with engine.connect() as killer:
        assert killer.exec_driver_sql("SELECT pg_terminate_backend(%s)", (pid,)).scalar()
    with pytest.raises(DBAPIError), doomed:  # the server ended it: nothing can commit
        doomed.commit()
    assert _kept(store) == before == _recounted(store)
    assert [e.id for e in store.search("k:a", "disk zebra")] == ["a"]


def _drop_counts(engine: Engine, store: TemporalSqlStore) -> None:
    """Make the store look written by code that kept no counts: no triggers, index, tables."""
    with engine.begin() as conn:
        for statement in drop_count_triggers(store.table_prefix):
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"DROP INDEX {store.current_index}")
        conn.exec_driver_sql(f"DROP TABLE {store.row_counts_table}")
        conn.exec_driver_sql(f"DROP TABLE {store.term_counts_table}")


def test_opening_a_store_written_without_counts_fills_them(engine: Engine) -> None:
    store = _store(engine)
    _churn(store, random.Random(7), 60)
    _drop_counts(engine, store)
    # Written by older code: nothing counts this row (the base class's insert, no trigger).
    rows, terms = store._rows("k:b", [_entry("late", "zebra pool")])
    with engine.begin() as conn:
        SqlMemoryStore._insert(store, conn, [{**row, "valid_from": 99} for row in rows], terms)
        conn.exec_driver_sql(f"DELETE FROM {store.entries.name} WHERE entry_id = 'e3'")
    reopened = _store(engine)
    counted = _recounted(reopened)
    assert counted[0]  # the churn left current rows to count
    assert _kept(reopened) == counted
    for query in ("zebra pool", "disk logs rotate", "the wal"):
        assert _pruned(reopened, "k:b", query, 3) == _counted(reopened, "k:b", query, 3)
    reopened.end_validity("k:b", ["late"], 100)  # the reopened store's triggers count it
    assert _kept(reopened) == _recounted(reopened)


def _wait_for_a_lock_wait(engine: Engine, deadline: float) -> None:
    """Return once some backend waits on a lock (the second writer queued on the first).

    The watcher polls in autocommit: inside one transaction PostgreSQL answers every read of
    ``pg_stat_activity`` from the snapshot its first read took, so a watcher that looked
    before the second writer queued would never see it queue.
    """
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).scalar()
            if waiting:
                return
            time.sleep(0.02)
    raise AssertionError("the second writer never waited for the first")


def test_a_second_writer_of_the_key_waits_and_adds_to_what_the_first_committed(
    engine: Engine,
) -> None:
    store = _store(engine)
    store.append_at("k:a", [_entry("a", "disk logs")], 1)
    failures: list[BaseException] = []

    def second() -> None:
        try:  # its own transaction, on its own connection
            store.append_at("k:a", [_entry("c", "zebra disk"), _entry("d", "pool")], 3)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    with engine.begin() as first:
        store.end_validity("k:a", ["a"], 2, conn=first)
        store.append_at("k:a", [_entry("a", "zebra wal")], 2, conn=first)
        writer = threading.Thread(target=second)
        writer.start()
        _wait_for_a_lock_wait(engine, time.monotonic() + 60)
    writer.join()
    assert not failures
    assert _kept(store) == _recounted(store)
    assert _kept(store)[1][("k:a", "zebra")] == 2  # one from each writer, neither lost


def test_two_writers_churning_one_key_keep_the_counts_exact(engine: Engine) -> None:
    store = _store(engine)
    failures: list[BaseException] = []

    def write(name: str, seed: int) -> None:
        rng = random.Random(seed)
        try:
            for position in range(1, 41):
                ids = [f"{name}{rng.randint(0, 8)}" for _ in range(rng.randint(1, 3))]
                entries = [_entry(i, " ".join(rng.sample(WORDS, 3))) for i in dict.fromkeys(ids)]
                with engine.begin() as conn:  # a revision: end, then append, one transaction
                    store.end_validity("k:a", ids, position, conn=conn)
                    store.append_at("k:a", entries, position, conn=conn)
                if rng.random() < 0.2:
                    store.remove("k:a", ids[:1])
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    writers = [threading.Thread(target=write, args=(name, n)) for n, name in enumerate("xy")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert not failures
    kept = _kept(store)
    assert kept == _recounted(store)
    assert kept[0]["k:a"] > 0
