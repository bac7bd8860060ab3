"""Postings (``postings=True``): a search ranks by the admitted rows only, ties by entry id.

And the query bound every store shares: a 20,000-word query answers, on
every backend, with the best matches of its first :data:`MAX_QUERY_TERMS` distinct terms.
Each test runs on SQLite and on PostgreSQL (``postgres`` marker; skipped without a server).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Integer, create_engine

from loom_memory import (
    MAX_QUERY_TERMS,
    MemoryEntry,
    PostgresMemoryStore,
    SqliteMemoryStore,
)
from loom_memory.sql import SqlMemoryStore

pytestmark = pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


def _open(db_url: str, *, postings: bool) -> Iterator[SqlMemoryStore]:
    engine = create_engine(db_url)
    store_class = PostgresMemoryStore if db_url.startswith("postgresql") else SqliteMemoryStore
    yield store_class(engine, columns=[Column("era", Integer, nullable=True)], postings=postings)
    engine.dispose()


@pytest.fixture
def store(db_url: str) -> Iterator[SqlMemoryStore]:
    yield from _open(db_url, postings=True)


def _entry(entry_id: str, text: str) -> MemoryEntry:
    return MemoryEntry(id=entry_id, content={"text": text})


_NOW = [
    _entry("d", "restart the worker pool"),
    _entry("b", "restart the worker pool"),
    _entry("a", "the cache is cold: warm it"),
    _entry("c", "restart the cache"),
    *(_entry(f"filler{n}", f"unrelated text {n}") for n in range(6)),
]
_PAST = [_entry(f"old{n}", "restart restart restart worker") for n in range(6)]


def _ids(found: list[MemoryEntry]) -> list[str | None]:
    return [entry.id if isinstance(entry.id, str) else None for entry in found]


def test_a_filtered_search_ranks_as_a_store_of_only_the_admitted_rows(
    store: SqlMemoryStore,
) -> None:
    """Rows ``where`` excludes (another era, another key) change neither scores nor order."""
    store.append("k", _PAST, values={"era": 1})
    store.append("k", _NOW, values={"era": 2})
    store.append("other", _PAST * 3)
    store.append("alone", _NOW)
    query = "restart cache worker"
    filtered = store.search("k", query, limit=10, where=store.entries.c.era == 2)
    assert _ids(filtered) == ["b", "c", "d", "a"]  # three equal scores, by id
    assert filtered == store.search("alone", query, limit=10)
    assert _ids(store.search("k", query, limit=4)) == ["c", "a", "old0", "old1"]  # the control


def test_equal_scores_fall_to_the_entry_id_not_the_append_order(store: SqlMemoryStore) -> None:
    """Two identical rows tie, and the lower id comes first whichever was written first."""
    store.append("k", [_entry("z", "same words"), _entry("m", "same words")])
    assert _ids(store.search("k", "words")) == ["m", "z"]


def test_an_entry_deleted_behind_the_store_takes_its_postings_with_it(
    store: SqlMemoryStore,
) -> None:
    """A caller's own DELETE leaves no posting behind to count or collide with a new row."""
    store.append("k", _NOW)
    with store.engine.begin() as conn:
        conn.execute(store.entries.delete())
    assert store.postings is not None
    with store.engine.connect() as conn:
        assert conn.execute(store.postings.select()).all() == []
    store.append("k", _NOW[:1])
    assert _ids(store.search("k", "worker")) == ["d"]


@pytest.mark.parametrize("postings", [False, True])
def test_a_20000_word_query_answers_with_its_first_terms(db_url: str, postings: bool) -> None:
    """A pasted document as a query: an answer, not an error, the same as its opening's."""
    store = next(_open(db_url, postings=postings))
    words = [f"w{n}" for n in range(20_000)]
    store.append("k", [_entry("early", "w3 w3"), _entry("late", f"w3 {words[-1]}")])
    query = " ".join(words)
    opening = " ".join(words[:MAX_QUERY_TERMS])
    found = store.search("k", query, limit=5)
    assert found == store.search("k", opening, limit=5)
    assert _ids(found) == ["early", "late"]  # the last word, beyond the bound, counts nothing


@pytest.mark.parametrize("postings", [False, True])
def test_a_query_s_terms_past_the_bound_count_nothing(db_url: str, postings: bool) -> None:
    """A search's cost grows with its distinct terms (every row holding any of them may have
    to be scored): an input review's 1,000-term question took 12.5-17 s on SQLite and 38-45 s
    on PostgreSQL over 20,000 passages, holding a connection throughout. The first
    :data:`MAX_QUERY_TERMS` (64) are searched; the next one counts nothing."""
    store = next(_open(db_url, postings=postings))
    words = [f"w{n}" for n in range(65)]  # the bound, and one more
    store.append("k", [_entry("first", words[0]), _entry("past", words[-1])])
    assert _ids(store.search("k", " ".join(words), limit=5)) == ["first"]
    assert _ids(store.search("k", words[-1], limit=5)) == ["past"]  # alone, it is searched
