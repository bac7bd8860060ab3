"""Batched ends and appends keep the counts by position exact on PostgreSQL.

``test_position_counts_batched``'s tests that touch a store, collected again here against a
fresh PostgreSQL database (this module's ``engine``): there the ends of ``append_at_batch``
are counted by the statement-level triggers, and the counts at every position, the kept
tables and the current counts must come out the same as on SQLite (the zero buckets a
revision leaves there are not tested: the triggers count its end apart).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_position_counts_batched import (
    test_batched_ends_keep_the_counts_exact,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (test_batched_ends_keep_the_counts_exact,)
"""The SQLite file's tests, collected again in this module against PostgreSQL."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()
