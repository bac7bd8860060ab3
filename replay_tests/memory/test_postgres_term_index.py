"""PostgreSQL's term index (loom_memory.postgres_terms): same answer as the scan, kept exactly.

The scan is ADR 0017's statement, still what a search with ``where=`` runs: ``where=true()``
admits every row and so asks it for the unfiltered answer. The index is read here directly,
never through a search, whose join to the rows would hide a stale posting.
"""

from __future__ import annotations

import itertools
import os
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, true

from loom_memory import MemoryEntry, PostgresMemoryStore, postgres, postgres_terms
from loom_memory.postgres_terms import drop_ddl
from loom_memory.topk import TermStats
from replay_tests.memory.test_position_counts import _emptied_or_filled, _statements

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not PG_URL, reason="LOOM_TEST_PG_URL is not set (run under scripts/with-postgres)"
    ),
]

KEYS = ("a", "b", "c")
COMMON = [f"common{n}" for n in range(6)]
RARE = [f"rare{n}" for n in range(60)]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = create_engine(PG_URL)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> Iterator[PostgresMemoryStore]:
    store = PostgresMemoryStore(engine, table_prefix=f"x{uuid.uuid4().hex[:12]}_")
    yield store
    store.drop()


def _text(rng: random.Random) -> str:
    """Skewed words: a few in most rows, many in few; repeats give tf > 1."""
    words = [rng.choice(COMMON) for _ in range(rng.randint(0, 6))]
    words += [rng.choice(RARE[: rng.randint(1, len(RARE))]) for _ in range(rng.randint(0, 5))]
    return " ".join(words) or "common0"


def _fill(store: PostgresMemoryStore, rng: random.Random) -> None:
    """Three keys, duplicate texts (equal scores: ties fall to seq), removals, a replace, a
    clear, and two entries past PostgreSQL's tsvector limits (256 positions per lexeme, largest
    position 16383), whose counts the scan takes from the clamped vector."""
    serial = 0
    for _ in range(12):
        key = rng.choice(KEYS)
        batch = []
        for _ in range(rng.randint(1, 25)):
            body = _text(rng)
            for _ in range(rng.choice((1, 1, 1, 3))):  # some texts three times: ties
                batch.append(MemoryEntry(content=body, id=f"e{serial}"))
                serial += 1
        store.append(key, batch)
        if rng.random() < 0.4:
            store.remove(key, [f"e{rng.randrange(serial)}" for _ in range(5)])
    store.append(
        "a",
        [
            MemoryEntry(content="rare1 " * 300, id="many-repeats"),
            MemoryEntry(content=" ".join(["filler"] * 16400 + ["rare2"] * 3), id="far-positions"),
        ],
    )
    store.replace("b", store.read("b")[::2])
    store.clear("c")
    store.append("c", [MemoryEntry(content=_text(rng), id=f"c{n}") for n in range(30)])


def _queries(rng: random.Random, count: int) -> list[tuple[str, int]]:
    vocabulary = [*COMMON, *RARE, "absent", "filler"]
    return [
        (" ".join(rng.choices(vocabulary, k=rng.randint(1, 8))), rng.randint(1, 25))
        for _ in range(count)
    ]


def _ids(entries: list[MemoryEntry]) -> list[str | None]:
    return [entry.id for entry in entries]


def test_search_returns_exactly_the_scan_on_a_random_corpus(store: PostgresMemoryStore) -> None:
    """300 random queries (1-8 terms, limits 1-25) return the scan's ids in its order, ties
    (duplicate texts) included, on every key, after removals, a replace and a clear."""
    rng = random.Random(16)
    _fill(store, rng)
    tied = 0
    for query, limit in _queries(rng, 300):
        key = rng.choice(KEYS)
        found = store.search(key, query, limit=limit)
        assert _ids(found) == _ids(store.search(key, query, limit=limit, where=true())), (
            key,
            query,
            limit,
        )
        contents = [entry.content for entry in found]
        tied += any(a == b for a, b in itertools.pairwise(contents))
    assert tied > 20  # the corpus really put equal scores side by side


def test_the_clamped_counts_decide_like_the_scan(store: PostgresMemoryStore) -> None:
    """Past 256 repeats or position 16383 a term's count is what the vector kept, as the scan
    counts it: a row with 300 repeats scores as one with 256."""
    store.append(
        "k",
        [
            MemoryEntry(content="word " * 256 + "other", id="256"),
            MemoryEntry(content="word " * 300, id="300"),
            MemoryEntry(content="other", id="o"),
        ],
    )
    assert _ids(store.search("k", "word")) == ["256", "300"]  # a tie, broken by seq
    assert _ids(store.search("k", "word")) == _ids(store.search("k", "word", where=true()))


def _index(store: PostgresMemoryStore) -> dict[str, set[tuple[Any, ...]]]:
    """The index's rows, and what they must be: computed from the live rows' vectors."""
    assert store.term_index is not None
    postings, terms, keys = (table.name for table in store.term_index.tables)
    rows = store.entries.name
    queries = {
        "postings": f"SELECT key, term, seq, tf FROM {postings}",
        "postings_expected": f"SELECT key, lexeme, seq, cardinality(positions) "
        f"FROM {rows}, unnest(search_vector)",
        "terms": f"SELECT key, term, df FROM {terms}",
        "terms_expected": f"SELECT key, lexeme, count(*) FROM {rows}, unnest(search_vector) "
        "GROUP BY key, lexeme",
        "keys": f"SELECT key, rows FROM {keys}",
        "keys_expected": f"SELECT key, count(*) FROM {rows} GROUP BY key",
    }
    with store.engine.connect() as conn:
        return {
            name: {tuple(row) for row in conn.exec_driver_sql(sql)} for name, sql in queries.items()
        }


def _assert_exact(store: PostgresMemoryStore) -> dict[str, set[tuple[Any, ...]]]:
    index = _index(store)
    for name in ("postings", "terms", "keys"):
        assert index[name] == index[f"{name}_expected"], name
    return index


def test_the_index_holds_exactly_the_live_entries(store: PostgresMemoryStore) -> None:
    """After appends, removals, a replace and a clear the postings, document counts and row
    counts are exactly those of the live rows: nothing stale, no zero count left behind."""
    _fill(store, random.Random(7))
    index = _assert_exact(store)
    assert index["postings"] and ("c", 0) not in {(k, n) for k, n in index["keys"]}
    store.clear("a")
    store.remove("b", [entry.id for entry in store.read("b") if entry.id])
    index = _assert_exact(store)
    assert {key for key, *_ in index["postings"]} == {"c"}
    assert all(df > 0 for *_, df in index["terms"])


def test_a_callers_own_delete_keeps_the_index(store: PostgresMemoryStore) -> None:
    """The triggers keep the index whoever writes the rows: a DELETE outside the store too."""
    _fill(store, random.Random(8))
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {store.entries.name} WHERE seq %% 3 = 0")
    _assert_exact(store)


def test_a_rolled_back_write_leaves_no_posting(store: PostgresMemoryStore) -> None:
    """Index rows are written in the entry's transaction: rolled back together."""
    store.append("k", [MemoryEntry(content="kept words", id="kept")])
    before = _index(store)
    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        store.append("k", [MemoryEntry(content="lost words", id="lost")], conn=conn)
        store.remove("k", ["kept"], conn=conn)
        raise RuntimeError("the caller's transaction fails")
    assert _index(store) == before


def test_a_store_written_before_the_index_is_filled_on_open(
    engine: Engine, store: PostgresMemoryStore
) -> None:
    """A store whose tables older code wrote (entries, no index, no triggers) gets its index
    filled from the rows when opened, and then searches exactly as the scan."""
    rng = random.Random(9)
    _fill(store, rng)
    assert store.term_index is not None
    with engine.begin() as conn:  # back to what the previous release created
        for statement in drop_ddl(store.table_prefix):
            conn.exec_driver_sql(statement)
        for table in store.term_index.tables:
            conn.exec_driver_sql(f"DROP TABLE {table.name}")
    reopened = PostgresMemoryStore(engine, table_prefix=store.table_prefix)
    _assert_exact(reopened)
    for query, limit in _queries(rng, 40):
        assert _ids(reopened.search("a", query, limit=limit)) == _ids(
            reopened.search("a", query, limit=limit, where=true())
        )
    reopened.append("a", [MemoryEntry(content="rare3 after", id="after")])
    _assert_exact(reopened)  # the triggers came with the upgrade


def test_a_new_store_fills_no_index_on_open(engine: Engine) -> None:
    """A store whose tables this open creates has no row to index: no statement of the open
    empties or fills the index (created empty with the entries), and its triggers keep it from
    the first write. The fill still runs where there are rows
    (``test_a_store_written_before_the_index_is_filled_on_open``)."""
    with _statements(engine) as seen:
        store = PostgresMemoryStore(engine, table_prefix=f"x{uuid.uuid4().hex[:12]}_")
    try:
        assert store.term_index is not None
        names = [table.name for table in store.term_index.tables]
        assert _emptied_or_filled(seen, names) == []
        assert any(f"CREATE TRIGGER {store.entries.name}_index_insert" in s for s in seen)
        _fill(store, random.Random(11))
        _assert_exact(store)
    finally:
        store.drop()


def test_an_entries_table_dropped_alone_finds_its_index_rebuilt(
    engine: Engine, store: PostgresMemoryStore
) -> None:
    """Dropping the entries table by hand (a projection reset does) drops its triggers; the
    next open drops the stale index with it (``_create_schema``), creates it empty and keeps
    it again."""
    _fill(store, random.Random(10))
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {store.entries.name}")
    reopened = PostgresMemoryStore(engine, table_prefix=store.table_prefix)
    assert _index(reopened)["postings"] == set()
    reopened.append("a", [MemoryEntry(content="common1 rare1", id="new")])
    _assert_exact(reopened)


def spy_steps(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    """The essential terms of each scoring step the searches after this call take, in order."""
    steps: list[set[str]] = []
    real = postgres_terms._step

    def step(index: Any, key: str, known: Any, essential: set[str], *rest: Any) -> Any:
        steps.append(essential)
        return real(index, key, known, essential, *rest)

    monkeypatch.setattr(postgres_terms, "_step", step)
    return steps


def test_a_common_term_beside_a_rare_one_is_never_read_whole(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query of a rare and a common term reads the rare term's postings and probes the
    common one for those rows only: one scoring step, the common term never essential."""
    store.append("k", [MemoryEntry(content=f"common0 filler{n}", id=f"f{n}") for n in range(300)])
    store.append("k", [MemoryEntry(content=f"rare1 common0 x{n}", id=f"r{n}") for n in range(3)])
    steps = spy_steps(monkeypatch)
    assert _ids(store.search("k", "rare1 common0", limit=3)) == ["r0", "r1", "r2"]
    assert steps == [{"rare1"}]
    steps.clear()
    store.search("k", "rare1 common0", limit=4)  # a fourth row needs the common term's rows
    assert steps == [{"rare1"}, {"rare1", "common0"}]


def test_a_bound_that_is_too_low_loses_the_answer(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: with the bound of the skipped terms understated, some query's answer
    differs from the scan's, so the equality above rests on the bound being right."""
    rng = random.Random(11)
    _fill(store, rng)
    real = TermStats.upper_bound
    monkeypatch.setattr(TermStats, "upper_bound", lambda self, terms: real(self, terms) / 4)
    differ = sum(
        _ids(store.search("a", query, limit=limit))
        != _ids(store.search("a", query, limit=limit, where=true()))
        for query, limit in _queries(rng, 100)
    )
    assert differ > 0


def test_a_search_reads_one_snapshot(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search's own transaction is REPEATABLE READ: its counts, postings and rows are of one
    state, as the single statement's were (READ COMMITTED would snapshot each statement)."""
    store.append("k", [MemoryEntry(content="word", id="w")])
    seen: list[str] = []
    real = postgres_terms.rank

    def rank(conn: Any, *args: Any) -> Any:
        seen.append(conn.exec_driver_sql("SHOW transaction_isolation").scalar())
        return real(conn, *args)

    monkeypatch.setattr(postgres, "rank", rank)
    assert _ids(store.search("k", "word")) == ["w"]
    assert seen == ["repeatable read"]
    with store.engine.connect() as conn:  # the pooled connection went back at its default
        assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"


@pytest.mark.parametrize("ratio", [0, postgres_terms.JOIN_RATIO, 10**9])
def test_every_way_of_reading_a_term_answers_the_scan(
    store: PostgresMemoryStore, monkeypatch: pytest.MonkeyPatch, ratio: int
) -> None:
    """Whether a step probes each candidate for a term (ratio 0: every term probed), reads the
    term's postings whole with the essential ones (a huge ratio: every term read) or mixes both
    (the default), 150 random queries return the scan's ids in its order; the default really
    mixes them."""
    rng = random.Random(21)
    _fill(store, rng)
    monkeypatch.setattr(postgres_terms, "JOIN_RATIO", ratio)
    shapes: list[tuple[str, ...]] = []
    real = postgres_terms._shape

    def shape(*args: Any) -> tuple[str, ...]:
        shapes.append(real(*args))
        return shapes[-1]

    monkeypatch.setattr(postgres_terms, "_shape", shape)
    for query, limit in _queries(rng, 150):
        key = rng.choice(KEYS)
        assert _ids(store.search(key, query, limit=limit)) == _ids(
            store.search(key, query, limit=limit, where=true())
        ), (key, query, limit, shapes[-1:])
    reads = {how for step in shapes for how in step}
    if ratio == 0:
        assert postgres_terms.JOINED not in reads
    elif ratio == 10**9:
        assert postgres_terms.PROBED not in reads
    else:
        assert {postgres_terms.JOINED, postgres_terms.PROBED} <= reads
