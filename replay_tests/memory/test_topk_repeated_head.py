"""SQLite search heads: the second term may be the head, and four terms take a second head.

After the first head step (``topk._head``) every row holding the head is scored; the rows left
hold only the other three terms. Those are again scored by ``head AND (others OR-ed)`` over
the three, not by their seven conjunctions, each of which made FTS5's ``bm25()`` count its
phrases' documents again. The head may also be the query's second term: ``bm25()`` then adds
the first two parts in swapped order, and floating addition is commutative (``x + y == y + x``
exactly), so every score is still the OR query's, bit for bit. The answer stays the plain OR
query's, ids and order.
"""

from __future__ import annotations

import random

from sqlalchemy import Engine

from replay_tests.budgets import examples
from replay_tests.memory.test_topk_head_term import engine, filled, match_expressions, plain_or

__all__ = ["engine", "match_expressions"]  # fixtures, shared with test_topk_head_term


def test_the_three_terms_left_take_a_head_step_of_their_own(
    engine: Engine, match_expressions: list[str]
) -> None:
    """With theta still 0 after the first head, the three terms left run as head AND others
    (in the query's order), never as their three-term conjunction."""
    store = filled(engine)

    answered = [entry.id for entry in store.search("k", "rare c1 c2 c3", limit=25)]

    assert answered == plain_or(store, ["rare", "c1", "c2", "c3"], 25)
    assert match_expressions[0] == '"rare" AND ("c1" OR "c2" OR "c3")'
    assert {'"c1" AND ("c2" OR "c3")', '("c1" OR "c2") AND "c3"'} & set(match_expressions)
    assert '"c1" AND "c2" AND "c3"' not in match_expressions


def test_a_rare_second_term_is_the_head(engine: Engine, match_expressions: list[str]) -> None:
    """The rarest of the first, second and last term is the head, so a rare second term's rows
    are scored first, its phrase moved only past the first."""
    store = filled(engine)

    answered = [entry.id for entry in store.search("k", "c1 rare c2", limit=5)]

    assert answered == plain_or(store, ["c1", "rare", "c2"], 5)
    assert match_expressions[0] == '"rare" AND ("c1" OR "c2")'


def test_random_four_term_queries_with_large_limits_answer_the_or_query(engine: Engine) -> None:
    """300 random four-term queries (``examples``), limits up to past every rare row (so the
    second head step runs): the OR query's ids, in order."""
    store = filled(engine)
    rng = random.Random(11)
    for _ in range(examples(300)):
        terms = rng.sample(["rare", "c1", "c2", "c3", "filler", "more", "absent"], 4)
        limit = rng.choice([1, 5, 13, 25, 60, 100])
        answered = [entry.id for entry in store.search("k", " ".join(terms), limit=limit)]
        assert answered == plain_or(store, terms, limit), (terms, limit)
