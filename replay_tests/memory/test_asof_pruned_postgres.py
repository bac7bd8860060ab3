"""The pruned search as of a position on PostgreSQL (ADR 0056, amended a second time).

Every test of ``test_asof_pruned`` holds for any backend, so each runs here again against a
fresh PostgreSQL database (imported below: pytest collects them in this module, with this
module's ``engine``): the pruned as-of ranking equal to a brute-force BM25 and to ``rank()``
at every position of random histories and every limit up to 120, boundary ties, pruning seen
to happen, the low-bound negative control, no recount, and the as-of filter re-bound per
position.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from replay_tests.conftest import NO_PG, PG_URL, fresh_postgres_engine
from replay_tests.memory.test_asof_pruned import (
    test_a_bound_below_the_exact_one_would_answer_wrong_as_of,
    test_a_store_with_the_older_validity_index_gets_the_admission_index,
    test_an_as_of_search_never_recounts_every_match,
    test_as_of_every_position_and_limit_equals_brute_force_and_the_old_plan,
    test_as_of_with_where_and_reads_follow_the_position,
    test_pruning_scores_fewer_rows_than_are_valid,
    test_ties_at_the_boundary_are_all_returned_as_of,
)

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=NO_PG)]

RUN_AGAIN_HERE = (
    test_a_bound_below_the_exact_one_would_answer_wrong_as_of,
    test_a_store_with_the_older_validity_index_gets_the_admission_index,
    test_an_as_of_search_never_recounts_every_match,
    test_as_of_every_position_and_limit_equals_brute_force_and_the_old_plan,
    test_as_of_with_where_and_reads_follow_the_position,
    test_pruning_scores_fewer_rows_than_are_valid,
    test_ties_at_the_boundary_are_all_returned_as_of,
)
"""The SQLite file's tests, collected again in this module against PostgreSQL."""


@pytest.fixture
def engine() -> Iterator[Engine]:
    yield from fresh_postgres_engine()
