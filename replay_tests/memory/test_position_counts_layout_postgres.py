"""The counts by position's term table layout, and a store keyed the old way, on PostgreSQL.

``test_position_counts_layout``'s tests, collected again here against a fresh PostgreSQL
database (this module's ``engine``): a new store keys the term table term before level, and
one keyed level first by older code is counted again at open, its triggers counting on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_position_counts_layout import (
    test_a_new_store_keys_terms_before_levels,
    test_a_store_keyed_level_first_is_counted_again_at_open,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (
    test_a_new_store_keys_terms_before_levels,
    test_a_store_keyed_level_first_is_counted_again_at_open,
)
"""The SQLite file's tests, collected again in this module against PostgreSQL."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()
