"""Memory review: an event-sourced vector memory records what the log stores, and only for a
write it takes; a vector search refuses a floor or query it cannot answer.

Each write test runs on SQLite and on PostgreSQL under ``scripts/with-postgres`` (ADR 0004,
"Amended 2026-12-06").
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from loom_memory import (
    EntryNotSerialisableError,
    EventSourcedVectorMemory,
    HashingEmbedder,
    InvalidArgumentError,
    InvalidKeyError,
    MemoryEntry,
    PostgresVectorStore,
    SqliteVectorStore,
)
from loom_memory.conformance import entry
from loom_memory.fusion import reciprocal_rank_fusion
from loom_memory.vector import VectorSqlStore
from loom_runtime import Loom, MasterKey
from replay_tests.conftest import fresh_postgres_database
from replay_tests.embedders import CountingEmbedder

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
_NO_PG = "LOOM_TEST_PG_URL is not set (use scripts/with-postgres)"
_needs_pg = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=_NO_PG)]
SECRET = "AKIAIOSFODNN7EXAMPLE"


@contextmanager
def _url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'loom.db'}"
        return
    with contextmanager(fresh_postgres_database)() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=_needs_pg)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A log database of the test's own: the tests compare log positions."""
    with _url(str(request.param), tmp_path) as found:
        yield found


def _memory(loom: Loom, embedder: HashingEmbedder) -> EventSourcedVectorMemory:
    postgres = loom.log.engine.dialect.name == "postgresql"
    cls: type[VectorSqlStore] = PostgresVectorStore if postgres else SqliteVectorStore
    store = cls(loom.log.engine, embedder=embedder, min_score=0.1)
    return EventSourcedVectorMemory(loom, store=store, name="v")


@pytest.mark.parametrize("encryption", [None, MasterKey(b"m" * 32)], ids=["clear", "sealed"])
def test_an_entry_holding_a_secret_is_embedded_as_the_log_stores_it(
    url: str, encryption: MasterKey | None
) -> None:
    """The vector was recorded under the caller's text, the log stored the entry redacted, and
    the projection found no vector for the redacted text: the memory was blocked, and a
    rebuild (or reopening) raised EmbeddingNotRecordedError. The redacted text is embedded."""
    with Loom(url, encryption=encryption) as loom:
        memory = _memory(loom, HashingEmbedder(dimension=64))
        memory.append("k", [entry(f"deploy key {SECRET} for apples", id="s")])
        memory.append("other", [entry("unrelated later write")])
        stored = memory.read("k")[0].content
        assert stored == "deploy key [REDACTED:aws-key] for apples"
        assert [e.id for e in memory.search("k", "apples deploy")] == ["s"]
        memory.rebuild()
        assert [e.id for e in memory.search("k", "apples deploy")] == ["s"]
    with Loom(url, encryption=encryption) as loom:
        memory = _memory(loom, HashingEmbedder(dimension=64))
        assert [e.content for e in memory.read("k")] == [stored]
        memory.replace("k", [entry(f"{SECRET} again")])
        assert [e.content for e in memory.read("k")] == ["[REDACTED:aws-key] again"]


def test_a_refused_write_calls_no_model_and_logs_nothing(url: str) -> None:
    """The vector memory embedded (and logged the vectors of) a write the memory then refused:
    a 2,000-byte key, a 300 KB entry. Every check runs first now."""
    embedder = CountingEmbedder(dimension=16)
    with Loom(url) as loom:
        memory = _memory(loom, embedder)
        position = loom.log.position
        with pytest.raises(InvalidKeyError):
            memory.append("k" * 2_000, [entry("a fine passage")])
        with pytest.raises(EntryNotSerialisableError):
            memory.replace("k", [entry("x " * 150_000)])
        assert (loom.log.position, embedder.texts) == (position, [])
        memory.append("k", [entry("a fine passage")])
        assert embedder.texts == ["a fine passage"]


def test_a_query_vector_is_normalised_before_it_is_narrowed(tmp_path: Path) -> None:
    """Cast to float32 before normalising, a query of components near 1e-46 was the zero
    vector (found nothing); one past float32's range was infinite (found nothing). The first
    finds what its direction finds; the second is refused, as such an embedding is."""
    embedder = HashingEmbedder(dimension=8)
    store = SqliteVectorStore(f"sqlite:///{tmp_path / 'v.db'}", embedder=embedder, min_score=0.5)
    store.append("k", [MemoryEntry(content="apples and pears")])
    [vector] = embedder.embed(["apples and pears"])
    tiny = store.search_by_vector("k", [x * 1e-46 for x in vector])
    assert [(e.content, round(score, 4)) for e, score in tiny] == [("apples and pears", 1.0)]
    with pytest.raises(InvalidArgumentError, match="float32's range"):
        store.search_by_vector("k", [x * 1e39 for x in vector])


@pytest.mark.parametrize(
    "floor",
    [float("nan"), float("inf"), "0.5", True, 10**400],
    ids=["nan", "inf", "str", "bool", "huge-int"],
)
def test_a_floor_that_is_not_a_finite_number_is_refused(tmp_path: Path, floor: object) -> None:
    """A NaN floor admitted nothing (every search [] for good, when given to the store), and a
    string failed in numpy with its untyped UFuncTypeError."""
    url = f"sqlite:///{tmp_path / 'v.db'}"
    embedder = HashingEmbedder(dimension=8)
    with pytest.raises(InvalidArgumentError, match="finite number"):
        SqliteVectorStore(url, embedder=embedder, min_score=floor)  # type: ignore[arg-type]
    store = SqliteVectorStore(url, embedder=embedder, min_score=0.0)
    store.append("k", [MemoryEntry(content="apples")])
    with pytest.raises(InvalidArgumentError, match="finite number"):
        store.search_scored("k", "apples", min_score=floor)  # type: ignore[arg-type]
    assert [e.content for e, _ in store.search_scored("k", "apples", min_score=0.5)] == ["apples"]


def test_items_tied_across_three_rankings_keep_the_order_first_met() -> None:
    """Reciprocal ranks added in ranking order rounded apart: the same three ranks in another
    order scored a hair higher, and a tie went to rounding, not to the item met first."""
    broken = 0
    for ranks in itertools.permutations(range(1, 12), 3):
        other = (ranks[1], ranks[2], ranks[0])  # the same ranks: a tie
        rankings = []
        for n in range(3):
            ranking = [f"filler{n}.{m}" for m in range(12)]
            ranking[ranks[n] - 1], ranking[other[n] - 1] = "A", "B"
            rankings.append(ranking)
        fused = reciprocal_rank_fusion(rankings, identity=str, limit=30)
        first = "A" if ranks[0] < other[0] else "B"
        broken += fused.index(first) > fused.index("B" if first == "A" else "A")
    assert broken == 0


def test_a_floor_of_any_real_type_is_taken_as_a_float() -> None:
    """Second regression review: numpy's floats were taken as floors before the finite check
    and then refused by it; a real number of any type is a floor, a string is not."""
    from fractions import Fraction

    import numpy

    from loom_memory.vector import _checked_floor

    for floor in (numpy.float32(0.25), numpy.float64(0.25), Fraction(1, 4), 0.25):
        assert _checked_floor(floor) == 0.25
