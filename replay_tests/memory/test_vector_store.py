"""The vector stores: the unmodified conformance kit, and what only their own suite can see."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete

from loom_memory import (
    EmbedderError,
    EmbeddingNotRecordedError,
    EntryNotSerialisableError,
    HashingEmbedder,
    InvalidArgumentError,
    PostgresVectorStore,
    SqliteVectorStore,
)
from loom_memory.conformance import MemoryStoreContract, entry
from loom_memory.conformance.helpers import contents
from replay_tests.conftest import PostgresKit, SqliteCopy
from replay_tests.embedders import CountingEmbedder, MisdeclaredEmbedder

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
FLOOR = 0.2
"""The hashing embedder's floor: unrelated texts score about 0, one shared term of a short
text far above it (see test_embedder)."""


def _kit_schema(url: str) -> None:
    """The kit's tables and recorded model, made once per worker; each kit test opens a copy
    (ADR 0054)."""
    SqliteVectorStore(url, embedder=HashingEmbedder(), min_score=FLOOR).close()


def _postgres_kit_schema(url: str) -> None:
    """:func:`_kit_schema` on PostgreSQL (``postgres_kit``)."""
    PostgresVectorStore(
        url, embedder=HashingEmbedder(), min_score=FLOOR, table_prefix="kit_"
    ).close()


class TestSqliteVectorStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, sqlite_copy: SqliteCopy) -> Iterator[SqliteVectorStore]:
        url = sqlite_copy(_kit_schema, "v.db")  # the file reopen_with_other_model opens
        store = SqliteVectorStore(url, embedder=HashingEmbedder(), min_score=FLOOR)
        yield store
        store.close()

    @pytest.fixture
    def reopen_with_other_model(self, tmp_path: Path) -> Callable[[], object]:
        return lambda: SqliteVectorStore(
            f"sqlite:///{tmp_path / 'v.db'}", embedder=HashingEmbedder(dimension=64), min_score=0
        )


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="LOOM_TEST_PG_URL is not set (use scripts/with-postgres)")
class TestPostgresVectorStore(MemoryStoreContract):
    @pytest.fixture
    def url(self, postgres_kit: PostgresKit) -> str:
        return postgres_kit(_postgres_kit_schema)

    @pytest.fixture
    def store(self, url: str) -> Iterator[PostgresVectorStore]:
        store = PostgresVectorStore(
            url, embedder=HashingEmbedder(), min_score=FLOOR, table_prefix="kit_"
        )
        yield store
        store.close()

    @pytest.fixture
    def reopen_with_other_model(self, url: str) -> Callable[[], object]:
        return lambda: PostgresVectorStore(
            url, embedder=HashingEmbedder(dimension=64), min_score=0, table_prefix="kit_"
        )


# -- what the kit cannot see -----------------------------------------------------------------


@pytest.fixture
def counting() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def vector_store(tmp_path: Path, counting: CountingEmbedder) -> Iterator[SqliteVectorStore]:
    store = SqliteVectorStore(f"sqlite:///{tmp_path / 'v.db'}", embedder=counting, min_score=FLOOR)
    yield store
    store.close()


def test_an_unchanged_text_is_embedded_once(
    vector_store: SqliteVectorStore, counting: CountingEmbedder
) -> None:
    """The same searchable text, in one batch, another key or a replace, is embedded once."""
    vector_store.append("a", [entry("disk full"), entry("disk full"), entry({"x": "disk full"})])
    vector_store.append("b", [entry("disk full", id="other id, same text")])
    vector_store.replace("a", [entry("disk full"), entry("restart the worker")])
    assert counting.texts == ["disk full", "restart the worker"]


def test_a_text_without_terms_is_never_embedded(
    vector_store: SqliteVectorStore, counting: CountingEmbedder
) -> None:
    vector_store.append("a", [entry({"ok": True}), entry("the of ?!")])
    assert counting.texts == []
    assert vector_store.search("a", "anything at all") == []


def test_a_refused_batch_never_reaches_the_model(
    vector_store: SqliteVectorStore, counting: CountingEmbedder
) -> None:
    """Validation runs before embedding: a bad entry costs no model call."""
    with pytest.raises(EntryNotSerialisableError):
        vector_store.append("a", [entry("fine text"), entry(float("inf"))])
    assert counting.texts == []


def test_a_failing_model_writes_nothing(
    vector_store: SqliteVectorStore, counting: CountingEmbedder
) -> None:
    vector_store.append("a", [entry("kept")])
    counting.broken = True
    with pytest.raises(AssertionError, match="embedding model was called"):
        vector_store.append("a", [entry("never stored")])
    assert contents(vector_store.read("a")) == ["kept"]


def test_a_store_that_must_not_embed_refuses_a_missing_vector(tmp_path: Path) -> None:
    """embed_missing=False (a projection of the log): a missing vector is an error, no call."""
    embedder = CountingEmbedder()
    store = SqliteVectorStore(
        f"sqlite:///{tmp_path / 'v.db'}", embedder=embedder, min_score=0.2, embed_missing=False
    )
    with pytest.raises(EmbeddingNotRecordedError):
        store.append("a", [entry("unrecorded text")])
    assert (embedder.texts, store.read("a")) == ([], [])


def test_the_floor_and_scores(vector_store: SqliteVectorStore, counting: CountingEmbedder) -> None:
    """search_scored reports cosine, the floor cuts, and search_by_vector calls no model."""
    vector_store.append("a", [entry("restart the worker"), entry("restart"), entry("lunch")])
    everything = vector_store.search_scored("a", "restart", min_score=-1.0)
    assert [hit.content for hit, _ in everything] == ["restart", "restart the worker", "lunch"]
    assert everything[0][1] == pytest.approx(1.0, abs=1e-6)
    floored = vector_store.search_scored("a", "restart")
    assert floored == everything[:2]
    [query] = HashingEmbedder().embed(["restart"])
    counting.broken = True
    assert vector_store.search_by_vector("a", query) == floored


def test_the_index_follows_writes_it_did_not_make(vector_store: SqliteVectorStore) -> None:
    """A caller's own DELETE, and a rolled-back write, are never served from a stale index."""
    vector_store.append("a", [entry("restart the worker", id="w")])
    assert len(vector_store.search("a", "worker")) == 1
    with vector_store.engine.begin() as conn:
        conn.execute(delete(vector_store.entries).where(vector_store.entries.c.key == "a"))
    assert vector_store.search("a", "worker") == []
    with vector_store.engine.connect() as conn, conn.begin() as transaction:
        vector_store.append("a", [entry("worker pool")], conn=conn)
        assert len(vector_store.search("a", "worker", conn=conn)) == 1
        transaction.rollback()
    assert vector_store.search("a", "worker") == []


def test_search_where_filters_inside_the_ranking(tmp_path: Path) -> None:
    """where= admits rows before the top k is taken, as on the lexical backends."""
    store = SqliteVectorStore(
        f"sqlite:///{tmp_path / 'v.db'}", embedder=HashingEmbedder(), min_score=FLOOR
    )
    store.append("a", [entry("worker", id=str(n)) for n in range(5)])
    found = store.search("a", "worker", limit=2, where=store.entries.c.entry_id.in_(["3", "4"]))
    assert [hit.id for hit in found] == ["3", "4"]


def test_a_floor_must_be_a_number(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        SqliteVectorStore(
            f"sqlite:///{tmp_path / 'v.db'}",
            embedder=HashingEmbedder(),
            min_score="high",  # type: ignore[arg-type]
        )


class _Scaled:
    """Two directions at one scale: "apple" along the first axis, anything else at 45
    degrees to it, so their cosines are 1 and 0.707 at every scale."""

    dimension = 4

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.model = f"scaled/{scale:g}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [
            [x * self.scale for x in ([1.0, 0, 0, 0] if "apple" in t else [1.0, 1.0, 0, 0])]
            for t in texts
        ]


@pytest.mark.parametrize("scale", [1.0, 1e20, 1e-23], ids=["unit", "huge", "tiny"])
def test_scores_do_not_depend_on_the_vectors_scale(tmp_path: Path, scale: float) -> None:
    """Cosine is scale-free, but the norm was taken in float32: at 1e20 it overflowed (every
    score 0), at 1e-23 it underflowed (every vector taken for the zero vector, never a hit)."""
    store = SqliteVectorStore(
        f"sqlite:///{tmp_path / 'v.db'}", embedder=_Scaled(scale), min_score=0.5
    )
    try:
        store.append("k", [entry("apple pie"), entry("banana split")])
        scored = store.search_scored("k", "apple")
    finally:
        store.close()
    assert [hit.content for hit, _ in scored] == ["apple pie", "banana split"]
    assert [score for _, score in scored] == pytest.approx([1.0, 0.7071], abs=1e-4)


def test_a_vector_float32_cannot_hold_is_the_embedder_s_error(tmp_path: Path) -> None:
    """Finite as a Python float, 1e39 is past float32's range: it reached the packing of the
    stored vector as a bare OverflowError instead of an EmbedderError naming the model."""
    store = SqliteVectorStore(f"sqlite:///{tmp_path / 'v.db'}", embedder=_Scaled(1e39), min_score=0)
    try:
        with pytest.raises(EmbedderError, match="scaled/1e"):
            store.append("k", [entry("apple pie")])
    finally:
        store.close()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_query_vector_that_is_not_finite_is_refused(
    vector_store: SqliteVectorStore, bad: float
) -> None:
    """A stored vector that is not finite is refused; a query vector was taken and answered
    "nothing relevant" (NaN scores pass no floor)."""
    vector_store.append("a", [entry("restart the worker")])
    [query] = HashingEmbedder().embed(["restart"])
    query[0] = bad
    with pytest.raises(InvalidArgumentError, match="finite"):
        vector_store.search_by_vector("a", query)


@pytest.mark.parametrize(
    "declared", [{"model": 5}, {"model": None}, {"dimension": 0}, {"dimension": True}]
)
def test_an_unusable_embedder_is_refused_before_the_store_writes(
    tmp_path: Path, declared: dict[str, object]
) -> None:
    """The store wrote the embedder's model into its vector space before anything checked
    it: model 5 left a '5' row, None a BackendError (NOT NULL) instead of the typed refusal
    the event-sourced memory gives (bridges review)."""
    url = f"sqlite:///{tmp_path / 'vectors.db'}"
    with pytest.raises(EmbedderError, match="unusable"):
        SqliteVectorStore(url, embedder=MisdeclaredEmbedder(**declared), min_score=0.1)  # type: ignore[arg-type]
    assert not (tmp_path / "vectors.db").exists() or os.path.getsize(tmp_path / "vectors.db") == 0
