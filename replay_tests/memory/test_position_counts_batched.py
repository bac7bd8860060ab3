"""A store's own ends counted by position with its inserts (ADR 0059, amended).

``append_at_batch(..., ends=...)`` ends rows and appends others in one call; on SQLite it
counts the ends with the inserts in one ``bucketed`` batch (the per-row end trigger skips
them while the store's marker row is in place), so a revision's end and append cancel on their
shared terms before any upsert. These tests hold that path to the same invariants as every
other write (counts at every position equal a recount, the kept tables equal a refill, so the
marker never stays and no zero bucket is written), the current counts to a recount, a caller's
own UPDATE after it to the trigger, and a store whose end trigger predates the marker to the
replaced one. ``test_position_counts_batched_postgres`` runs the first again on PostgreSQL,
where the statement-level triggers count the ends (the other two are about SQLite's path).
"""

from __future__ import annotations

import random
from collections import Counter

from sqlalchemy import Engine

from loom_memory.validity import TemporalSqlStore
from replay_tests.memory.test_asof_pruned import KEY, OTHER, _entry, _rows
from replay_tests.memory.test_kept_counts import _kept, _store, engine
from replay_tests.memory.test_position_counts import (
    WORDS,
    _callers_own_writes,
    _read,
    _recount,
    _refilled,
    _tables,
)

__all__ = ["engine"]  # the fixture these tests (and the PostgreSQL twin's) are given


def _batched_history(store: TemporalSqlStore, rng: random.Random, steps: int) -> int:
    """Random pages as the corpus writes them: revisions (ends and appends at one position,
    several keys and positions per batch), ends alone, appends alone. Returns the last position."""
    position = 0
    for _ in range(steps):
        ends: list[tuple[str, list[str], int]] = []
        appends: list[tuple[str, list[object], int, dict[str, object]]] = []
        for _ in range(rng.randint(1, 4)):
            position += rng.randint(0, 1)
            key = KEY if rng.random() < 0.8 else OTHER
            ids = list(dict.fromkeys(f"e{rng.randint(0, 60)}" for _ in range(rng.randint(1, 8))))
            entries = [
                _entry(i, " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))))
                for i in ids
            ]
            action = rng.random()
            if action < 0.6:  # a revision: the same ids ended and appended again
                ends.append((key, ids, position))
                appends.append((key, entries, position, {"revision": position}))
            elif action < 0.8:
                ends.append((key, ids, position))
            else:
                appends.append((key, entries, position, {"revision": position}))
        store.append_at_batch(appends, ends=ends)  # type: ignore[arg-type]
    return position


def _current_recount(store: TemporalSqlStore) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    rows: dict[str, int] = {}
    terms: Counter[tuple[str, str]] = Counter()
    for key in (KEY, OTHER):
        current = [row for row in _rows(store, key) if row.valid_to is None]
        if current:
            rows[key] = len(current)
        terms.update((key, term) for row in current for term in row.terms)
    return rows, dict(terms)


def test_batched_ends_keep_the_counts_exact(engine: Engine) -> None:
    """After random batches of ends and appends, then a caller's own UPDATEs and DELETE, the
    counts at every position equal a recount, the kept tables' non-zero buckets equal a
    refill (and no marker stays), and the current counts equal a recount."""
    store = _store(engine)
    rng = random.Random(41)
    last = _batched_history(store, rng, 40)
    for phase in ("store", "caller"):
        for key in (KEY, OTHER):
            for position in range(-1, last + 2):
                assert _read(store, key, position) == _recount(store, key, position), (
                    phase,
                    key,
                    position,
                )
        assert _tables(store) == _refilled(store)
        assert not [row for row in _tables(store, zeros=True)[0] if row[1] < 0]  # no marker
        assert _kept(store) == _current_recount(store)
        _callers_own_writes(store, rng, last)


def test_an_unchanged_revision_writes_no_bucket(engine: Engine) -> None:
    """A revision whose text is unchanged, batched, cancels whole: the kept tables are
    exactly as before it (where an end counted apart left a zero bucket per term and level)."""
    store = _store(engine)
    entries = [_entry("a", "disk logs rotate"), _entry("b", "wal pool disk")]
    store.append_at_batch([(KEY, entries, 3, {"revision": 1})])
    before = _tables(store, zeros=True)
    store.append_at_batch([(KEY, entries, 9, {"revision": 2})], ends=[(KEY, ["a", "b"], 9)])
    assert _tables(store, zeros=True) == before
    assert (
        _read(store, KEY, 9)
        == _recount(store, KEY, 9)
        == (2, {"disk": 2, "logs": 1, "rotate": 1, "wal": 1, "pool": 1})
    )
    assert _read(store, KEY, 8) == _recount(store, KEY, 8)


def test_an_end_trigger_from_before_the_marker_is_replaced(engine: Engine) -> None:
    """A store whose end trigger was created without the marker's test (older code) gets the
    new one when opened: batched ends are then counted once, not twice."""
    store = _store(engine)
    with engine.begin() as conn:
        (sql,) = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = ?", (f"{store.entries.name}_at_end",)
        ).one()
        start, end = sql.index(" AND NOT EXISTS"), sql.index(" BEGIN ")
        conn.exec_driver_sql(f"DROP TRIGGER {store.entries.name}_at_end")
        conn.exec_driver_sql(sql[:start] + sql[end:])
    reopened = _store(engine)
    last = _batched_history(reopened, random.Random(5), 12)
    for position in range(last + 2):
        assert _read(reopened, KEY, position) == _recount(reopened, KEY, position), position
    assert _tables(reopened) == _refilled(reopened)
