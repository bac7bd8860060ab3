"""SQLite search prunes the rows it scores (loom_memory.topk) and still answers exactly.

The reference is the plain query the pruning replaces: every row matching any term, ordered by
``bm25()`` then ``seq``. The corpus is built to make the bound tight where it can break: a
skewed vocabulary (a word in every row, words in a handful), duplicated rows (exact score
ties, broken by ``seq``), rows of one word repeated (the highest frequency a bound must cover)
and rows of very different lengths.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import Column, Engine, Integer, create_engine, event, text

from loom_memory import MemoryEntry, SqliteMemoryStore
from loom_memory.entry import decode_entry
from loom_memory.topk import SUBSET_TERMS, Hit, TermStats, top_k
from replay_tests.budgets import examples
from replay_tests.plans import sqlite_plans

if TYPE_CHECKING:
    from replay_tests.conftest import DatabaseTemplates

VOCABULARY = [f"w{index}" for index in range(60)]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    yield engine
    engine.dispose()


def _flag() -> list[Column[int]]:
    return [Column("flag", Integer, nullable=False)]


def _build_corpus(url: str) -> None:
    """The corpus, written once per worker (``database_templates``); each test gets a copy."""
    engine = create_engine(url)
    store = SqliteMemoryStore(engine, columns=_flag())
    rng = random.Random(7)
    texts = []
    for _ in range(700):
        length = rng.choice([1, 3, 8, 30, 120])
        # Zipf-like: w0 is in nearly every row, w59 in almost none.
        texts.append(" ".join(rng.choice(VOCABULARY[: rng.randint(1, 60)]) for _ in range(length)))
    texts += texts[:40]  # exact duplicates: equal scores, so seq decides
    texts += ["w50 w50 w50 w50 w50 w50", "w57", "w0 " * 50]
    for index, body in enumerate(texts):
        store.append("k", [MemoryEntry(content=body, id=str(index))], values={"flag": index % 3})
        if index % 97 == 0:
            store.append("other", [MemoryEntry(content=body, id=str(index))], values={"flag": 0})
    store.remove("k", ["5", "6", "7"])  # deleted rows must not count in the bound either
    store.close()
    engine.dispose()


@pytest.fixture
def store(database_templates: DatabaseTemplates, tmp_path: Path) -> Iterator[SqliteMemoryStore]:
    url, _ = database_templates.copy(_build_corpus, tmp_path / "corpus.db")
    engine = create_engine(url)
    yield SqliteMemoryStore(engine, columns=_flag())
    engine.dispose()


def plain_or(
    store: SqliteMemoryStore, terms: list[str], limit: int, flag: int | None
) -> list[object]:
    """Ids the query the pruning replaces returns: it scores every match, sorts, cuts."""
    fts = store.fts_table
    match = " OR ".join(f'"{term}"' for term in terms)
    flagged = "" if flag is None else f"AND e.flag = {flag}"
    with store.engine.begin() as conn:
        rows = conn.execute(
            text(
                f"SELECT e.entry FROM {store.entries.name} e JOIN {fts} ON e.seq = {fts}.rowid "
                f"WHERE {fts} MATCH :match AND e.key = 'k' {flagged} "
                f"ORDER BY bm25({fts}), e.seq LIMIT :limit"
            ),
            {"match": match, "limit": limit},
        )
        return [decode_entry(row.entry).id for row in rows]


def ids(entries: list[MemoryEntry]) -> list[object]:
    return [entry.id for entry in entries]


def test_search_returns_exactly_the_plain_or_query(store: SqliteMemoryStore) -> None:
    rng = random.Random(11)
    for _ in range(examples(300)):
        terms = rng.sample([*VOCABULARY, "absent"], rng.randint(1, 8))
        limit = rng.choice([1, 2, 5, 10, 25])
        flag = rng.choice([None, 0, 2])
        where = None if flag is None else store.entries.c.flag == flag
        found = store.search("k", " ".join(terms), limit=limit, where=where)
        assert ids(found) == plain_or(store, terms, limit, flag), (terms, limit, flag)


@pytest.fixture
def match_expressions(engine: Engine) -> Iterator[list[str]]:
    """Every FTS5 match expression the store runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if "MATCH" in statement:
            seen.extend(value for value in parameters if isinstance(value, str) and '"' in value)

    event.listen(engine, "before_cursor_execute", record)
    yield seen
    event.remove(engine, "before_cursor_execute", record)


def test_a_common_term_is_never_scored_on_its_own(
    engine: Engine, match_expressions: list[str]
) -> None:
    """The rule fires: with a rare term present, rows holding only the common one are skipped."""
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(content=f"common filler {n}") for n in range(300)])
    store.append("k", [MemoryEntry(content="rare common"), MemoryEntry(content="rare rare")])

    found = store.search("k", "rare common", limit=2)

    assert [entry.content for entry in found] == ["rare rare", "rare common"]
    assert match_expressions, "the probe saw no search at all"
    assert all('"common"' not in expression.split(" OR ") for expression in match_expressions)
    assert '"common"' not in match_expressions


def test_long_queries_take_the_essential_terms_plan(
    engine: Engine, match_expressions: list[str]
) -> None:
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(content=f"a1 a2 a3 a4 filler {n}") for n in range(300)])
    store.append("k", [MemoryEntry(content="a1 a2 a3 a4 zz zz")])
    terms = ["a1", "a2", "a3", "a4", "zz"]
    assert len(terms) > SUBSET_TERMS

    found = store.search("k", " ".join(terms), limit=1)

    assert [entry.content for entry in found] == ["a1 a2 a3 a4 zz zz"]
    assert match_expressions[0] == '("zz")'  # the rarest term alone first
    assert " OR ".join(f'"{term}"' for term in terms) not in "".join(match_expressions)


def test_term_stats_are_the_index_s_own(store: SqliteMemoryStore) -> None:
    """The bound's N and document counts equal what the rows say, deletions included."""
    with store.engine.begin() as conn:
        stats = store._term_stats(conn, ["w0", "w59", "absent"])
        rows = conn.execute(text(f"SELECT count(*) FROM {store.entries.name}")).scalar()
        w0 = conn.execute(
            text(f"SELECT count(*) FROM {store.fts_table} WHERE {store.fts_table} MATCH 'w0'")
        ).scalar()
    assert stats.rows == rows
    assert stats.documents["w0"] == w0
    assert "absent" not in stats.documents


def test_a_bound_below_a_real_score_would_be_caught() -> None:
    """Negative control: a wrong (too low) bound prunes a row that belongs in the answer."""

    class LowBound(TermStats):
        def upper_bound(self, terms: Any) -> float:
            return 0.0

    hits = {
        '"a" AND "b"': [Hit(rowid=1, score=12.0)],  # row 1 holds a and b
        '"a"': [Hit(rowid=1, score=6.0)],
        '"b"': [Hit(rowid=2, score=13.0), Hit(rowid=1, score=6.0)],  # row 2 holds only b
    }
    documents = {"a": 1, "b": 2}  # ub(a) = 14.3, ub(b) = 13.2 of 1,000 rows: b-only can win
    honest = top_k(["a", "b"], TermStats(rows=1000, documents=documents), 1, hits.__getitem__)
    pruned = top_k(["a", "b"], LowBound(rows=1000, documents=documents), 1, hits.__getitem__)
    assert honest == [2]
    assert pruned == [1]


def test_the_key_check_reads_the_key_index_not_the_rows(store: SqliteMemoryStore) -> None:
    """Each ranked statement checks the key on the covering (key, seq) index: no row lookups."""
    _, plans = sqlite_plans(store.engine, "bm25(", lambda: store.search("k", "w0 w59", limit=3))
    assert plans, "the probe saw no ranked statement"
    for plan in plans:
        assert "COVERING INDEX loom_memory_entries_key_seq" in plan, plan
