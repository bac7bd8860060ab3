"""Clearing one key, or every key, of the PostgreSQL temporal store: ``test_clear_keys``'s
tests collected again here against a fresh PostgreSQL database (this module's ``engine``).
PostgreSQL deletes through its statement-level triggers and the postings' foreign key, with
no shortcut of its own: the same answers, held by the same tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_clear_keys import (
    test_clearing_a_key_leaves_the_other_as_it_was_and_nothing_of_it,
    test_clearing_every_key_leaves_no_row_count_or_index_term,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (
    test_clearing_a_key_leaves_the_other_as_it_was_and_nothing_of_it,
    test_clearing_every_key_leaves_no_row_count_or_index_term,
)
"""The SQLite file's tests, collected again in this module against PostgreSQL."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()
