"""SQLite search scores the rows of a query's head term in one statement, still exactly.

With three or four terms, every subset holding the head term (the rarest of the first, the
second and the last) used to be a conjunction of its own, each making FTS5's ``bm25()`` count
every phrase's documents again. ``head AND (others OR-ed)`` scores those rows in one
statement; its phrases keep the query's order but for the first two parts, which commute, so
``bm25()`` adds the same parts to the same sums as the OR query.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine

from loom_memory import MemoryEntry, SqliteMemoryStore, topk
from replay_tests.budgets import examples
from replay_tests.memory.test_topk import match_expressions

__all__ = ["match_expressions"]  # the fixture, shared with test_topk


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    yield engine
    engine.dispose()


def plain_or(store: SqliteMemoryStore, terms: list[str], limit: int) -> list[str]:
    fts = store.fts_table
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(
            f"SELECT e.entry_id FROM {store.entries.name} e JOIN {fts} ON e.seq = {fts}.rowid "
            f"WHERE {fts} MATCH ? AND e.key = 'k' ORDER BY bm25({fts}), e.seq LIMIT ?",
            (" OR ".join(f'"{term}"' for term in terms), limit),
        )
        return [row[0] for row in found]


def filled(engine: Engine) -> SqliteMemoryStore:
    store = SqliteMemoryStore(engine)
    rng = random.Random(5)
    rows = [
        " ".join(rng.choice(["c1", "c2", "c3", "filler", "more"]) for _ in range(rng.randint(1, 9)))
        for _ in range(300)
    ]
    rows += ["rare c1", "rare", "rare c2 c3", "rare rare c1 c1"] * 3
    store.append("k", [MemoryEntry(id=str(index), content=body) for index, body in enumerate(rows)])
    return store


@pytest.mark.parametrize(
    ("query", "expression"),
    [
        ("rare c1 c2", '"rare" AND ("c1" OR "c2")'),
        ("c1 c2 rare", '("c1" OR "c2") AND "rare"'),
        ("rare c1 c2 c3", '"rare" AND ("c1" OR "c2" OR "c3")'),
    ],
)
def test_the_head_term_s_rows_are_one_statement_in_query_order(
    engine: Engine, match_expressions: list[str], query: str, expression: str
) -> None:
    """The first statement is the head term AND the others, phrases in the query's order; no
    two-term subset holding the head runs."""
    store = filled(engine)
    terms = query.split()

    answered = [entry.id for entry in store.search("k", query, limit=5)]

    assert answered == plain_or(store, terms, 5)
    assert match_expressions[0] == expression
    assert not any(
        '"rare"' in expression and " AND " in expression and " OR " not in expression
        for expression in match_expressions
    )


def test_a_middle_rare_term_keeps_the_query_order(
    engine: Engine, match_expressions: list[str]
) -> None:
    """A rare third term of four is not the first head (it would move its part past two
    others): the head is the rarest of the first, second and last term, and the answer is the
    OR query's."""
    store = filled(engine)

    answered = [entry.id for entry in store.search("k", "c1 c2 rare c3", limit=5)]

    assert answered == plain_or(store, ["c1", "c2", "rare", "c3"], 5)
    assert not match_expressions[0].startswith('"rare" AND (')


def test_random_three_and_four_term_queries_answer_the_or_query(engine: Engine) -> None:
    """300 random queries (``examples``) of 3-4 terms, rare and common, any order: the OR
    query's ids."""
    store = filled(engine)
    rng = random.Random(3)
    for _ in range(examples(300)):
        terms = rng.sample(
            ["rare", "c1", "c2", "c3", "filler", "more", "absent"], rng.randint(3, 4)
        )
        limit = rng.choice([1, 2, 5, 10])
        answered = [entry.id for entry in store.search("k", " ".join(terms), limit=limit)]
        assert answered == plain_or(store, terms, limit), (terms, limit)


def test_leaving_out_the_head_term_alone_answers_wrong(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: without ``head`` alone, rows holding only the head term go unscored
    and the answer differs from the OR query's."""
    store = filled(engine)
    real = topk._head

    def head_without_alone(terms: Any, stats: Any, k: int, run: Any, best: Any) -> Any:
        return real(terms, stats, k, lambda match: [] if " " not in match else run(match), best)

    monkeypatch.setattr(topk, "_head", head_without_alone)
    answered = [entry.id for entry in store.search("k", "rare c1 c2", limit=10)]

    assert answered != plain_or(store, ["rare", "c1", "c2"], 10)
