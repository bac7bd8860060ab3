"""Counts kept by position and the as-of search reading them, on PostgreSQL.

Every test of ``test_position_counts`` that touches a store holds for any backend, so each
runs here again against a fresh PostgreSQL database (imported below: pytest collects them in
this module, with this module's ``engine``): the counts at every position equal a recount
after the store's writes and a caller's own UPDATEs and DELETE (the statement-level triggers
of ``loom_memory.postgres_counts``), the kept tables equal a refill, an erased row leaves no
count, the negative control, and a store opened without the tables filled.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_position_counts import (
    test_a_new_store_counts_no_rows_on_open,
    test_an_erased_row_leaves_no_count_and_as_of_answers_without_it,
    test_counts_at_every_position_equal_a_recount,
    test_opening_a_store_written_without_them_fills_them,
    test_the_as_of_search_answers_from_the_kept_counts,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (
    test_a_new_store_counts_no_rows_on_open,
    test_an_erased_row_leaves_no_count_and_as_of_answers_without_it,
    test_counts_at_every_position_equal_a_recount,
    test_opening_a_store_written_without_them_fills_them,
    test_the_as_of_search_answers_from_the_kept_counts,
)
"""The SQLite file's tests, collected again in this module against PostgreSQL."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()
