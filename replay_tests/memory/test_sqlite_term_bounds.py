"""SQLite's per-term bounds (``<prefix>term_bounds``): kept exactly, never below a real score.

A search of a store without ``postings=True`` takes each term's document count and a bound
from this table (loom_memory.sqlite, ADR 0016). The document counts must be FTS5's own, and
each term's bound must cover what FTS5's ``bm25()`` gives that term in ANY row holding it, or
the pruned search would lose a row the plain OR query returns. The corpus mixes row lengths
(1 to 120 words) and repeats, where a bound from the term's counts and row lengths is tightest.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text

from loom_memory import MemoryEntry, SqliteMemoryStore
from loom_memory.entry import decode_entry
from loom_memory.sqlite import LengthBoundStats
from loom_memory.topk import TermStats

VOCABULARY = [f"w{index}" for index in range(40)]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    yield engine
    engine.dispose()


def _fill(store: SqliteMemoryStore, rng: random.Random) -> None:
    """Skewed words, rows of very different lengths, repeats, duplicates, removals, a replace
    and a clear, over two keys."""
    serial = 0
    for _ in range(10):
        key = rng.choice(("k", "other"))
        batch = []
        for _ in range(rng.randint(5, 40)):
            length = rng.choice([1, 2, 3, 8, 30, 120])
            body = " ".join(
                rng.choice(VOCABULARY[: rng.randint(1, len(VOCABULARY))]) for _ in range(length)
            )
            batch.append(MemoryEntry(content=body, id=f"e{serial}"))
            serial += 1
        store.append(key, batch)
        store.remove(key, [f"e{rng.randrange(serial)}" for _ in range(4)])
    store.append("k", [MemoryEntry(content="w39 " * 40, id="repeats"), MemoryEntry(content="w38")])
    store.replace("other", store.read("other")[::2])


def _live(store: SqliteMemoryStore) -> dict[str, tuple[int, int, float]]:
    """Each term's df, largest tf and smallest length/tf over the live rows, from their text."""
    shapes: dict[str, tuple[int, int, float]] = {}
    with store.engine.connect() as conn:
        for (search_text,) in conn.exec_driver_sql(f"SELECT search_text FROM {store.entries.name}"):
            terms = search_text.split()
            for term, tf in Counter(terms).items():
                df, most, least = shapes.get(term, (0, 0, float("inf")))
                shapes[term] = (df + 1, max(most, tf), min(least, len(terms) / tf))
    return shapes


def _kept(store: SqliteMemoryStore) -> dict[str, tuple[int, int, float]]:
    assert store.term_bounds is not None
    with store.engine.connect() as conn:
        return {
            term: (df, max_tf, min_ratio)
            for term, df, max_tf, min_ratio in conn.exec_driver_sql(
                f"SELECT term, df, max_tf, min_ratio FROM {store.term_bounds.name} WHERE df > 0"
            )
        }


def _plain_or(store: SqliteMemoryStore, key: str, terms: list[str], limit: int) -> list[Any]:
    fts = store.fts_table
    match = " OR ".join(f'"{term}"' for term in terms)
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT e.entry FROM {store.entries.name} e JOIN {fts} ON e.seq = {fts}.rowid "
                f"WHERE {fts} MATCH :match AND e.key = :key ORDER BY bm25({fts}), e.seq "
                "LIMIT :limit"
            ),
            {"match": match, "key": key, "limit": limit},
        )
        return [decode_entry(row.entry).id for row in rows]


def test_counts_are_fts5s_own_and_bounds_cover_the_live_rows(engine: Engine) -> None:
    """``df`` equals FTS5's document count of every term after every verb; ``max_tf`` and
    ``min_ratio`` are at least as loose as the live rows' (a delete never tightens them)."""
    store = SqliteMemoryStore(engine)
    _fill(store, random.Random(3))
    kept, live = _kept(store), _live(store)
    assert set(kept) == set(live)
    with engine.connect() as conn:
        vocabulary = dict(
            conn.exec_driver_sql(f"SELECT term, doc FROM {store.vocabulary_table}").all()
        )
    for term, (df, max_tf, min_ratio) in kept.items():
        assert df == live[term][0] == vocabulary[term], term
        assert max_tf >= live[term][1], term
        assert min_ratio <= live[term][2], term
    store.clear("k")
    store.clear("other")
    assert _kept(store) == {}


def test_no_row_scores_a_term_above_its_bound(engine: Engine) -> None:
    """FTS5's own score of each term in every row holding it (``bm25()`` of the term alone)
    is below the term's bound: the bound holds for the rows, not only on average."""
    store = SqliteMemoryStore(engine)
    _fill(store, random.Random(5))
    fts = store.fts_table
    with engine.connect() as conn:
        stats = store._term_stats(conn, VOCABULARY)
        assert isinstance(stats, LengthBoundStats)
        for term in stats.documents:
            best = conn.exec_driver_sql(
                f"SELECT -bm25({fts}) FROM {fts} WHERE {fts} MATCH ? ORDER BY bm25({fts}) LIMIT 1",
                (f'"{term}"',),
            ).scalar()
            assert best <= stats.term_bound(term), term
            plain = TermStats(rows=stats.rows, documents=stats.documents).upper_bound([term])
            assert stats.term_bound(term) <= plain * 1.000001, term  # never looser than k1 + 1


def test_search_returns_exactly_the_plain_or_query(engine: Engine) -> None:
    """300 random queries (1-8 terms, limits 1-25) on both keys return the plain OR query's
    ids in order, with the tighter bounds deciding what is scored."""
    store = SqliteMemoryStore(engine)
    rng = random.Random(8)
    _fill(store, rng)
    for _ in range(300):
        terms = rng.sample([*VOCABULARY, "absent"], rng.randint(1, 8))
        limit = rng.choice([1, 2, 5, 10, 25])
        key = rng.choice(("k", "other"))
        found = [entry.id for entry in store.search(key, " ".join(terms), limit=limit)]
        assert found == _plain_or(store, key, terms, limit), (key, terms, limit)


def test_the_tighter_bound_runs_fewer_conjunctions(engine: Engine) -> None:
    """The bound decides how many match expressions run: on rows of similar lengths (windows
    of text, as memory usually holds) a search of random queries runs fewer with the table's
    bounds than with FTS5's ``(k1 + 1) * idf`` alone."""
    store = SqliteMemoryStore(engine)
    rng = random.Random(12)
    store.append(
        "k",
        [
            MemoryEntry(
                content=" ".join(
                    rng.choice(VOCABULARY[: rng.randint(1, len(VOCABULARY))])
                    for _ in range(rng.randint(20, 30))
                )
            )
            for _ in range(400)
        ],
    )
    queries = [" ".join(rng.sample(VOCABULARY, rng.randint(2, 4))) for _ in range(60)]
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "bm25(" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        for query in queries:
            store.search("k", query, limit=5)
        tight = len(seen)
        seen.clear()
        plain = SqliteMemoryStore(engine)
        plain.term_bounds = None  # FTS5's vocabulary counts and the k1 + 1 bound
        for query in queries:
            plain.search("k", query, limit=5)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert tight < len(seen)


def test_a_bound_without_row_lengths_is_too_low_somewhere(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: ignoring ``min_ratio`` (every row taken as the average length)
    understates the bound of terms in short rows, and some answer then differs from the plain
    OR query's: the equality above rests on the row lengths being in the bound."""
    store = SqliteMemoryStore(engine)
    rng = random.Random(8)
    _fill(store, rng)
    real = SqliteMemoryStore._term_stats

    def average_rows(self: SqliteMemoryStore, conn: Any, terms: list[str]) -> Any:
        stats = real(self, conn, terms)
        if isinstance(stats, LengthBoundStats):
            shapes = {term: (1, stats.average_length) for term in stats.shapes}
            return LengthBoundStats(
                rows=stats.rows,
                documents=stats.documents,
                average_length=stats.average_length,
                shapes=shapes,
            )
        return stats

    monkeypatch.setattr(SqliteMemoryStore, "_term_stats", average_rows)
    differ = 0
    for _ in range(200):
        terms = rng.sample(VOCABULARY, rng.randint(1, 4))
        limit = rng.choice([1, 2, 5])
        found = [entry.id for entry in store.search("k", " ".join(terms), limit=limit)]
        differ += found != _plain_or(store, "k", terms, limit)
    assert differ > 0


def test_a_store_written_before_the_bounds_is_filled_on_open(engine: Engine) -> None:
    """A store whose tables older code wrote (no ``term_bounds``, no triggers) gets the table
    filled from its rows when opened, keeps it on the next write, and searches exactly."""
    store = SqliteMemoryStore(engine)
    rng = random.Random(4)
    _fill(store, rng)
    rows = store.entries.name
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TRIGGER {rows}_bounds_insert")
        conn.exec_driver_sql(f"DROP TRIGGER {rows}_bounds_delete")
        conn.exec_driver_sql(f"DROP TABLE {store.table_prefix}term_bounds")
    reopened = SqliteMemoryStore(engine)
    live = _live(reopened)
    assert _kept(reopened) == {
        term: (df, max_tf, min_ratio) for term, (df, max_tf, min_ratio) in live.items()
    }
    reopened.append("k", [MemoryEntry(content="w1 w1 fresh", id="after")])
    assert _kept(reopened)["fresh"] == (1, 1, 3.0)
    for _ in range(40):
        terms = rng.sample(VOCABULARY, rng.randint(1, 5))
        found = [entry.id for entry in reopened.search("k", " ".join(terms), limit=7)]
        assert found == _plain_or(reopened, "k", terms, 7)
