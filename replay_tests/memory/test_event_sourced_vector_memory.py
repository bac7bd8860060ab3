"""EventSourcedVectorMemory: embeddings enter the log; rebuilds and as-of never call the model."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete
from typer.testing import CliRunner

from loom_memory import (
    EmbedderError,
    EmbeddingModelChangedError,
    EventSourcedVectorMemory,
    HashingEmbedder,
    InvalidArgumentError,
    PostgresVectorStore,
    SqliteMemoryStore,
    SqliteVectorStore,
    StoreConfigurationError,
)
from loom_memory.conformance import MemoryStoreContract, entry
from loom_memory.conformance.helpers import contents
from loom_memory.embedding_events import EmbeddingsRecorded
from loom_memory.embedding_table import text_digest
from loom_memory.vector import VectorSqlStore
from loom_runtime import Loom
from loom_runtime.tools.cli import app
from replay_tests.conftest import PostgresKits, fresh_postgres_database
from replay_tests.embedders import CountingEmbedder, MisdeclaredEmbedder

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
FLOOR = 0.2


@contextmanager
def _loom(backend: str, tmp_path: Path) -> Iterator[Loom]:
    if backend == "sqlite":
        with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
            yield loom
        return
    with contextmanager(fresh_postgres_database)() as url, Loom(url) as loom:
        yield loom


def _store(loom: Loom, embedder: HashingEmbedder, prefix: str = "vec_") -> VectorSqlStore:
    cls = PostgresVectorStore if loom.log.engine.dialect.name == "postgresql" else SqliteVectorStore
    return cls(loom.log.engine, embedder=embedder, min_score=FLOOR, table_prefix=prefix)


_needs_pg = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not PG_URL, reason="LOOM_TEST_PG_URL is not set (use scripts/with-postgres)"
    ),
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=_needs_pg)])
def loom(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Loom]:
    with _loom(str(request.param), tmp_path) as instance:
        yield instance


def _postgres_kit_schema(url: str) -> None:
    """The PostgreSQL kit's log and store, made once per worker; each kit test finds them as
    just built (``postgres_kit``, ADR 0054)."""
    with Loom(url) as loom:
        EventSourcedVectorMemory(loom, store=_store(loom, HashingEmbedder()), name="kit")


class TestEventSourcedVectorMemory(MemoryStoreContract):
    @pytest.fixture(params=["sqlite", pytest.param("postgres", marks=_needs_pg)])
    def loom(
        self, request: pytest.FixtureRequest, tmp_path: Path, postgres_kits: PostgresKits
    ) -> Iterator[Loom]:
        """The module's ``loom``, but on PostgreSQL the kit's database as just built."""
        if request.param == "sqlite":
            with _loom("sqlite", tmp_path) as instance:
                yield instance
            return
        with postgres_kits.use(_postgres_kit_schema) as url, Loom(url) as instance:
            yield instance

    @pytest.fixture
    def store(self, loom: Loom) -> EventSourcedVectorMemory:
        return EventSourcedVectorMemory(loom, store=_store(loom, HashingEmbedder()), name="kit")

    @pytest.fixture
    def reopen_with_other_model(self, loom: Loom) -> Callable[[], object]:
        return lambda: EventSourcedVectorMemory(
            loom, store=_store(loom, HashingEmbedder(dimension=64)), name="kit"
        )


def _recorded(loom: Loom) -> list[str]:
    """Every digest recorded in the log, in log order."""
    records = loom.log.notifications(topics=[EmbeddingsRecorded.TOPIC])
    return [digest for record in records for digest in loom.log.decode(record).digests]


def test_embeddings_enter_the_log_once_per_text(loom: Loom) -> None:
    """Each distinct text is embedded and logged once, across keys, batches and revisions."""
    embedder = CountingEmbedder()
    memory = EventSourcedVectorMemory(loom, store=_store(loom, embedder))
    memory.append("a", [entry("disk full"), entry("disk full", id="x")])
    memory.append("b", [entry("disk full")])
    memory.replace("a", [entry("disk full"), entry("restart the worker")])
    assert embedder.texts == ["disk full", "restart the worker"]
    assert _recorded(loom) == [text_digest("disk full"), text_digest("restart the worker")]


def test_rebuild_and_as_of_never_call_the_model(loom: Loom) -> None:
    """After recording, a model that raises changes nothing: rebuild whole or as of a position."""
    embedder = CountingEmbedder()
    memory = EventSourcedVectorMemory(loom, store=_store(loom, embedder))
    memory.append("k", [entry("restart the worker", id="w"), entry("disk full", id="d")])
    middle = loom.log.position
    memory.replace("k", [entry("worker pool exhausted", id="p")])
    [query] = HashingEmbedder().embed(["worker"])
    before = memory.search_by_vector("k", query)
    embedder.broken = True
    memory.rebuild(upto=middle)
    assert contents(memory.read("k")) == ["restart the worker", "disk full"]
    assert contents([hit for hit, _ in memory.search_by_vector("k", query)]) == [
        "restart the worker"
    ]
    memory.rebuild()
    assert memory.search_by_vector("k", query) == before


def test_a_dropped_store_is_restored_from_the_log_without_the_model(loom: Loom) -> None:
    """Drop every table of the store; a new one on the same model is rebuilt from the log."""
    embedder = CountingEmbedder()
    store = _store(loom, embedder)
    memory = EventSourcedVectorMemory(loom, store=store)
    memory.append("k", [entry("restart the worker", id="w"), entry("lunch menu", id="l")])
    [query] = HashingEmbedder().embed(["worker"])
    before = memory.search_by_vector("k", query)
    store.drop()
    broken = CountingEmbedder()
    broken.broken = True
    restored = EventSourcedVectorMemory(loom, store=_store(loom, broken))
    assert contents(restored.read("k")) == ["restart the worker", "lunch menu"]
    assert restored.search_by_vector("k", query) == before


def test_a_new_model_is_a_new_index_embedded_from_the_log(loom: Loom) -> None:
    """The old index refuses the new model; a new table prefix indexes the log's texts with
    it, once, and the old model's vectors are never mixed in."""
    memory = EventSourcedVectorMemory(loom, store=_store(loom, HashingEmbedder()))
    memory.append("k", [entry("restart the worker"), entry("lunch menu")])
    other = CountingEmbedder(dimension=512)
    with pytest.raises(EmbeddingModelChangedError):
        EventSourcedVectorMemory(loom, store=_store(loom, other))
    reindexed = EventSourcedVectorMemory(loom, store=_store(loom, other, prefix="vec2_"))
    assert sorted(other.texts) == ["lunch menu", "restart the worker"]
    assert contents(reindexed.search("k", "worker")) == ["restart the worker"]
    other.broken = True
    reindexed.rebuild()
    assert contents(reindexed.read("k")) == ["restart the worker", "lunch menu"]


def test_a_lexical_store_is_refused(loom: Loom) -> None:
    if loom.log.engine.dialect.name != "sqlite":
        pytest.skip("one backend is enough for an argument check")
    with pytest.raises(StoreConfigurationError):
        EventSourcedVectorMemory(loom, store=SqliteMemoryStore(loom.log.engine))  # type: ignore[arg-type]


def test_an_embedder_whose_model_is_not_text_is_refused_before_the_log_is_written(
    loom: Loom,
) -> None:
    """A model of 5 was logged as the vectors' address, which no reader decodes again
    (LogCorruptError for every later process): refused when the memory opens, the log as it
    was, and a memory with a usable model works on it after."""
    if loom.log.engine.dialect.name != "sqlite":
        pytest.skip("one backend is enough for an argument check")
    with pytest.raises(EmbedderError, match="model"):
        EventSourcedVectorMemory(loom, store=_store(loom, MisdeclaredEmbedder(model=5)))
    assert loom.log.position == 0
    memory = EventSourcedVectorMemory(loom, store=_store(loom, HashingEmbedder(), prefix="ok_"))
    memory.append("k", [entry("restart the worker")])
    assert contents(memory.read("k")) == ["restart the worker"]


def test_loom_rebuild_restores_the_recorded_vectors(loom: Loom) -> None:
    """`loom rebuild` knows the embeddings projection: vectors deleted behind its back come
    back from the log, and the memory ranks as before with the model gone."""
    memory = EventSourcedVectorMemory(loom, store=_store(loom, HashingEmbedder()))
    memory.append("k", [entry("restart the worker"), entry("lunch menu")])
    [query] = HashingEmbedder().embed(["worker"])
    before = memory.search_by_vector("k", query)
    with loom.log.engine.begin() as conn:
        conn.execute(delete(memory.store.vectors.table))  # type: ignore[union-attr]
    url = loom.log.engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(app, ["rebuild", "--db", url])
    assert result.exit_code == 0, result.output
    broken = CountingEmbedder()
    broken.broken = True
    assert (
        EventSourcedVectorMemory(loom, store=_store(loom, broken)).search_by_vector("k", query)
        == before
    )


@pytest.mark.parametrize("vector", ["abc", b"ab", [1.0, "x"], [None], [10**400]])
def test_a_query_vector_that_is_not_numbers_is_refused_typed(loom: Loom, vector: Any) -> None:
    """A string iterated as characters raised a bare ``ValueError`` (a memory review); every
    other bad vector was already an ``InvalidArgumentError``."""
    memory = EventSourcedVectorMemory(loom, store=_store(loom, CountingEmbedder()))
    with pytest.raises(InvalidArgumentError, match="vector"):
        memory.search_by_vector("k", vector)
