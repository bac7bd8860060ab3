"""A temporal store's search as of a position, pruned like a current search (ADR 0056).

As of P, a search counts ``N`` and the query terms' document frequencies among the rows
valid at P (no kept count describes them), then ranks by the same MaxScore loop as a current
search (``loom_memory.postings.rank_pruned``), testing a candidate's validity on its entry.
These tests hold it to a brute-force BM25 over the rows valid at P and to ``rank()``'s
answer, at every position of random histories and every limit up to 120, watch the pruning
happen, and show that a bound one notch too low answers wrong. ``test_asof_pruned_postgres``
runs them again on PostgreSQL.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine

from loom_memory import MemoryEntry, idf_weight
from loom_memory import postings as postings_module
from loom_memory.entry import decode_entry
from loom_memory.postings import rank
from loom_memory.sql import DEFAULT_TABLE_PREFIX
from loom_memory.store import MAX_SEARCH_LIMIT
from loom_memory.validity import TemporalSqlStore, ValidAt
from loom_runtime import read_catalog
from replay_tests.budgets import seeds
from replay_tests.memory.test_kept_counts import _store, engine
from replay_tests.plans import sqlite_plans

__all__ = ["engine"]  # the fixture these tests (and test_asof_pruned_postgres's) are given

KEY, OTHER = "k:a", "k:b"
WORDS = ("disk", "logs", "rotate", "volume", "worker", "pool", "stall", "wal", "zebra", "quartz")
QUESTIONS = ("disk", "zebra wal", "logs rotate pool quartz", "stall stall worker", "absent", "pool")
LIMITS = range(1, 121)


def _cuts(ranked: list[tuple[int, int]]) -> list[int]:
    """The limits of ``LIMITS`` where a pruned ranking can go wrong: the small ones (the
    bound is tightest), every cut whose last place ties the next row (a row on the boundary
    must not be pruned), past the end of the ranking, and the deepest. The limits between two
    rows of different scores away from the top behave as their neighbours do."""
    ties = {k for k in LIMITS if k < len(ranked) and ranked[k - 1][1] == ranked[k][1]}
    ends = {len(ranked), len(ranked) + 1, LIMITS[-1]} & set(LIMITS)
    return sorted(set(range(1, 11)) | ties | ends)


def _entry(entry_id: str, text: str) -> MemoryEntry:
    return MemoryEntry(id=entry_id, content={"text": text})


def _history(store: TemporalSqlStore, rng: random.Random, steps: int) -> int:
    """Random appends, ends and re-appends (an end and an append at one position), mostly at
    ``KEY`` (a few hundred rows valid at a time, so limits up to 120 matter), and a clear of each
    key early on (its history goes: every earlier position changes too); the words are few,
    so scores tie often. Returns the last position written."""
    for position in range(1, steps + 1):
        key = KEY if rng.random() < 0.85 else OTHER
        ids = [f"e{rng.randint(0, 700)}" for _ in range(rng.randint(1, 30))]
        entries = [
            _entry(i, " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))))
            for i in dict.fromkeys(ids)
        ]
        action = rng.random()
        if position in (4, 6):
            store.clear(KEY if position == 4 else OTHER)
        elif action < 0.55:
            store.append_at(key, entries, position)
        elif action < 0.85:
            with store.engine.begin() as conn:
                store.end_validity(key, [e.id for e in entries], position, conn=conn)
                store.append_at(key, entries, position, conn=conn)
        else:
            store.end_validity(key, ids, position)
    return steps


@dataclass(frozen=True)
class Row:
    seq: int
    entry_id: str
    terms: Counter[str]
    valid_from: int
    valid_to: int | None


def _rows(store: TemporalSqlStore, key: str) -> list[Row]:
    """Every row ever kept at ``key`` (ended ones too), with its terms, read back plainly."""
    rows = store.entries.c
    with store.engine.connect() as conn:
        found = conn.execute(store.entries.select().where(rows.key == key).order_by(rows.seq)).all()
    return [
        Row(
            seq=row.seq,
            entry_id=row.entry_id,
            terms=Counter(store.tokenizer.entry_terms(decode_entry(row.entry))),
            valid_from=row.valid_from,
            valid_to=row.valid_to,
        )
        for row in found
    ]


def _brute_force(rows: list[Row], position: int, terms: list[str]) -> list[tuple[int, int]]:
    """BM25 as ``rank()`` defines it, over the rows valid at ``position``, every match scored:
    ``(seq, score)`` best first, ties by seq."""
    valid = [
        row
        for row in rows
        if row.valid_from <= position and (row.valid_to is None or row.valid_to > position)
    ]
    wanted = set(terms)
    documents = Counter(term for row in valid for term in row.terms if term in wanted)
    weight = {term: idf_weight(len(valid), df) for term, df in documents.items()}
    scored = [
        (
            row.seq,
            sum(w * 11 * row.terms[t] // (5 * row.terms[t] + 6) for t, w in weight.items()),
        )
        for row in valid
        if wanted & set(row.terms)
    ]
    return sorted(scored, key=lambda pair: (-pair[1], pair[0]))


def _top(ranked: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """Every pair scoring at least the ``limit``-th best (what a ranking returns)."""
    if not ranked:
        return []
    threshold = ranked[min(limit, len(ranked)) - 1][1]
    return [pair for pair in ranked if pair[1] >= threshold]


def _pruned(
    store: TemporalSqlStore,
    key: str,
    query: str,
    position: int,
    limit: int,
    scored: list[int] | None = None,
) -> list[tuple[int, int]]:
    terms = list(store.tokenizer.query_terms(query))
    with store.engine.connect() as conn:
        return store._rank_as_of(conn, key, terms, limit, ValidAt(store.entries, position), scored)


def _old_plan(
    store: TemporalSqlStore, key: str, query: str, position: int, limit: int
) -> list[tuple[int, int]]:
    """``rank()``: every row valid at ``position`` counted and every match scored."""
    assert store.postings is not None
    admitted = [store.entries.c.key == key, ValidAt(store.entries, position)]
    terms = list(store.tokenizer.query_terms(query))
    with store.engine.connect() as conn:
        found = rank(conn, store.entries, store.postings, admitted, terms, limit)
    return [(seq, score) for seq, score in found]


@pytest.mark.parametrize("seed", seeds(2))
def test_as_of_every_position_and_limit_equals_brute_force_and_the_old_plan(
    engine: Engine, seed: int
) -> None:
    """At every position of a random history, at every limit up to 120 where a pruned
    ranking can go wrong (``_cuts``), the pruned as-of ranking returns exactly the
    brute-force pairs (ties at the boundary included), which are the old plan's; the search
    returns the brute force's top, ties by entry id."""
    store = _store(engine)
    rng = random.Random(300 + seed)
    last = _history(store, rng, 36)
    rows = _rows(store, KEY)
    ids = {row.seq: row.entry_id for row in rows}
    widest = 0
    for position in range(last + 2):  # before the first write, every one, after the last
        query = QUESTIONS[position % len(QUESTIONS)]
        terms = list(store.tokenizer.query_terms(query))
        ranked = _brute_force(rows, position, terms)
        widest = max(widest, len(ranked))
        with engine.connect() as conn:
            valid = ValidAt(store.entries, position)
            for limit in _cuts(ranked):
                found = store._rank_as_of(conn, KEY, terms, limit, valid, None)
                assert found == _top(ranked, limit), (position, query, limit)
        for limit in (1, 4, 120):
            assert _old_plan(store, KEY, query, position, limit) == _top(ranked, limit)
            by_id = sorted(ranked, key=lambda pair: (-pair[1], ids[pair[0]], pair[0]))
            found_ids = [e.id for e in store.search_as_of(KEY, query, position, limit=limit)]
            capped = min(limit, MAX_SEARCH_LIMIT)  # search_as_of clamps, as search does
            assert found_ids == [ids[seq] for seq, _ in by_id[:capped]]
    assert widest > 120  # some ranking was deeper than the deepest limit: every cut was tested


def test_ties_at_the_boundary_are_all_returned_as_of(engine: Engine) -> None:
    """Rows tying the last place as of P are all returned, in the order ``rank()`` gives."""
    store = _store(engine)
    twins = [_entry(f"t{i}", "disk logs") for i in (9, 10, 2, 1)]
    others = [_entry(f"o{i}", "logs pool") for i in range(6)]
    store.append_at(KEY, [*twins, *others], 1)
    store.end_validity(KEY, ["t9", "o0"], 2)
    store.append_at(KEY, [_entry("t9", "zebra")], 2)
    found = _pruned(store, KEY, "disk logs", 1, 2)
    assert found == _old_plan(store, KEY, "disk logs", 1, 2)
    assert len(found) == 4  # every twin ties the second place, so every twin is returned
    assert [e.id for e in store.search_as_of(KEY, "disk logs", 1, limit=2)] == ["t1", "t10"]
    assert len(_pruned(store, KEY, "disk logs", 2, 2)) == 3  # t9 ended at 2: three twins left


def _heap(store: TemporalSqlStore) -> None:
    """As of 1: 200 rows hold the common term, one the rare term beside it. Later, the rare
    row ends and the common rows multiply, so the statistics at 1 are not the current ones."""
    entries = [_entry(f"c{i}", "logs volume") for i in range(200)]
    entries.append(_entry("r", "zebra logs"))
    store.append_at(KEY, entries, 1)
    store.end_validity(KEY, ["r", *(f"c{i}" for i in range(100))], 2)
    store.append_at(KEY, [_entry(f"n{i}", "zebra zebra pool") for i in range(50)], 2)


def test_pruning_scores_fewer_rows_than_are_valid(engine: Engine) -> None:
    """As of P, only the row holding the rare term is scored, not the 200 valid rows holding
    the common one; counted, not timed."""
    store = _store(engine)
    _heap(store)
    scored: list[int] = []
    found = _pruned(store, KEY, "zebra logs", 1, 1, scored)
    assert found == _old_plan(store, KEY, "zebra logs", 1, 1)
    assert scored == [1]
    assert len(store.read_as_of(KEY, 1)) == 201
    assert [entry.id for entry in store.search_as_of(KEY, "zebra logs", 1, limit=1)] == ["r"]
    # As of 2 the rare term is in 50 rows: its statistics there, not at 1, decide.
    assert _pruned(store, KEY, "zebra logs", 2, 1) == _old_plan(store, KEY, "zebra logs", 2, 1)


def test_a_bound_below_the_exact_one_would_answer_wrong_as_of(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: with each term bounded by its share at tf = 1 (one notch below the
    exact bound), the pruned search as of P stops after the rare row and misses the row whose
    common term occurs 20 times; the real bound finds it."""
    store = _store(engine)
    entries = [_entry("rare", "zebra"), _entry("heavy", " ".join(["logs"] * 20))]
    entries += [_entry(f"light{i}", "logs") for i in range(2)]
    entries += [_entry(f"other{i}", "pool") for i in range(16)]
    store.append_at(KEY, entries, 1)
    store.end_validity(KEY, ["heavy", *(f"other{i}" for i in range(16))], 5)  # gone since
    expected = _old_plan(store, KEY, "zebra logs", 3, 1)
    heavy = next(row.seq for row in _rows(store, KEY) if row.entry_id == "heavy")
    assert [seq for seq, _ in expected] == [heavy]
    assert _pruned(store, KEY, "zebra logs", 3, 1) == expected
    monkeypatch.setattr(postings_module, "term_bound", lambda weight: weight)
    assert _pruned(store, KEY, "zebra logs", 3, 1) != expected


def test_an_as_of_search_never_recounts_every_match(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search as of P goes through the pruned ranking, not ``rank()``; one narrowed by a
    caller's ``where`` still counts its own rows (no pruning describes them)."""
    store = _store(engine)
    store.append_at(KEY, [_entry("a", "disk logs")], 1, values={"revision": 1})
    store.end_validity(KEY, ["a"], 2)

    def refuse(*args: object, **kwargs: object) -> list[tuple[int, int]]:
        raise AssertionError("the search scored every match")

    monkeypatch.setattr("loom_memory.sql.rank", refuse)
    assert [entry.id for entry in store.search_as_of(KEY, "disk", 1)] == ["a"]
    assert store.search_as_of(KEY, "disk", 2) == []
    found = store.search_annotated(KEY, "disk", as_of=1, capped=False)
    assert [entry.id for entry, _ in found] == ["a"]
    with pytest.raises(AssertionError):
        store.search_annotated(KEY, "disk", as_of=1, where=store.entries.c.revision == 1)


def test_as_of_with_where_and_reads_follow_the_position(engine: Engine) -> None:
    """The as-of filter is compiled once and re-bound: reads and ``where``-narrowed searches
    at successive positions each see the rows valid at their own position."""
    store = _store(engine)
    rng = random.Random(9)
    last = _history(store, rng, 25)
    rows = _rows(store, KEY)
    revision = store.entries.c.revision
    for position in range(last + 1):
        valid = [
            row
            for row in rows
            if row.valid_from <= position and (row.valid_to is None or row.valid_to > position)
        ]
        assert [e.id for e in store.read_as_of(KEY, position)] == [r.entry_id for r in valid]
        narrowed = store.search_annotated(
            KEY, "disk wal", as_of=position, where=revision.is_(None), limit=5
        )
        plain = store.search_annotated(KEY, "disk wal", as_of=position, limit=5)
        assert narrowed == plain  # no row has a revision: the filter admits the same rows


ADMISSION = f"{DEFAULT_TABLE_PREFIX}entries_admission"


def test_a_candidate_is_admitted_from_the_admission_index_not_its_row(engine: Engine) -> None:
    """SQLite: each round of a search as of P tests its candidates' validity on the covering
    ``(key, seq, valid_from, valid_to)`` index, never by a lookup of the (wide) row by its
    seq, which read a page per candidate at twice a current search's time (ADR 0059,
    amended "admission")."""
    store = _store(engine)
    position = _history(store, random.Random(4), 20) - 5
    found, plans = sqlite_plans(
        store.engine,
        "candidates",
        lambda: store.search_as_of(KEY, "disk zebra wal", position, limit=5),
    )
    assert found, "the history left rows to find"
    assert plans, "the probe saw no ranked statement"
    for plan in plans:
        # A probe by key and seq: an index led otherwise would scan the key's entries.
        assert f"SEARCH e USING COVERING INDEX {ADMISSION} (key=? AND seq=?" in plan, plan
        assert "PRIMARY KEY (rowid" not in plan, plan


def test_a_store_with_the_older_validity_index_gets_the_admission_index(engine: Engine) -> None:
    """Opened over the index older code made, ``(key, valid_from, valid_to, seq)``, a store
    drops it and makes the admission index in its place (one index on every write, as
    before); every as-of answer is the same."""
    store = _store(engine)
    last = _history(store, random.Random(6), 25)
    prefix = store.table_prefix
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP INDEX {store.admission_index}")
        conn.exec_driver_sql(
            f"CREATE INDEX {prefix}entries_validity ON {store.entries.name} "
            "(key, valid_from, valid_to, seq)"
        )
    reopened = _store(engine)
    with engine.connect() as conn:
        objects = read_catalog(conn).objects
    assert reopened.admission_index in objects
    assert f"{prefix}entries_validity" not in objects
    rows = _rows(reopened, KEY)
    for position in range(0, last + 1, 3):
        terms = list(reopened.tokenizer.query_terms("disk zebra wal"))
        assert _pruned(reopened, KEY, "disk zebra wal", position, 5) == _top(
            _brute_force(rows, position, terms), 5
        )
