"""The counts by position's term table keyed term before level, and a store keyed the old way
(ADR 0062).

``<prefix>terms_at`` is keyed ``(key, term, level, bucket)`` so a write's three levels of one
term share a page. A store written by older code keys it ``(key, level, term, bucket)``: at
open it is dropped and counted again from the rows (the table is derived, the rows are the
truth), after which reads at every position equal a recount and later writes keep them so.
``test_position_counts_layout_postgres`` runs them again on PostgreSQL.
"""

from __future__ import annotations

import random

from sqlalchemy import Engine, inspect

from loom_memory.validity import TemporalSqlStore
from replay_tests.memory.test_asof_pruned import KEY, OTHER, _history, _rows
from replay_tests.memory.test_kept_counts import _store, engine
from replay_tests.memory.test_position_counts import _read, _recount, _refilled, _tables

__all__ = ["engine"]  # the fixture these tests (and the PostgreSQL twin's) are given

NEW_KEY = ["key", "term", "level", "bucket"]
OLD_KEY = ["key", "level", "term", "bucket"]


def _terms_key(store: TemporalSqlStore) -> list[str]:
    with store.engine.connect() as conn:
        return list(inspect(conn).get_pk_constraint(store.terms_at_table)["constrained_columns"])


def _key_level_first(store: TemporalSqlStore) -> None:
    """Lay the term table out as older code did (level before term), keeping its rows."""
    table = store.terms_at_table
    rowid = " WITHOUT ROWID" if store.engine.dialect.name == "sqlite" else ""
    with store.engine.begin() as conn:
        kept = conn.exec_driver_sql(f"SELECT key, level, term, bucket, df FROM {table}").all()
        conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (key TEXT NOT NULL, level INTEGER NOT NULL, "
            "term TEXT NOT NULL, bucket BIGINT NOT NULL, df INTEGER NOT NULL, "
            f"PRIMARY KEY ({', '.join(OLD_KEY)})){rowid}"
        )
        mark = "?" if conn.dialect.name == "sqlite" else "%s"
        conn.exec_driver_sql(
            f"INSERT INTO {table} (key, level, term, bucket, df) VALUES ({', '.join([mark] * 5)})",
            [tuple(row) for row in kept],
        )


def test_a_new_store_keys_terms_before_levels(engine: Engine) -> None:
    assert _terms_key(_store(engine)) == NEW_KEY


def test_a_store_keyed_level_first_is_counted_again_at_open(engine: Engine) -> None:
    """The old layout is replaced at open by the new one, counted from the rows: the kept
    tables equal a refill, reads at every position a recount, before and after more writes."""
    store = _store(engine)
    rng = random.Random(62)
    last = _history(store, rng, 30)
    kept = _tables(store)
    _key_level_first(store)
    assert _terms_key(store) == OLD_KEY
    reopened = _store(engine)
    assert _terms_key(reopened) == NEW_KEY
    assert _tables(reopened) == kept == _refilled(reopened)
    reopened.end_validity(KEY, [row.entry_id for row in _rows(reopened, KEY)][:4], last + 1)
    for key in (KEY, OTHER):
        for position in range(-1, last + 3):
            assert _read(reopened, key, position) == _recount(reopened, key, position), position
    assert _tables(reopened) == _refilled(reopened)
    assert _terms_key(_store(engine)) == NEW_KEY  # an open of the new layout keeps it
