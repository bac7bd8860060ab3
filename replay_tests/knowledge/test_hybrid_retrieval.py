"""HybridRetriever: vector and hybrid retrieval over a knowledge base, recorded, history-true."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import inspect

from loom_knowledge import Doc, HybridRetriever, KnowledgeBase, open_knowledge_base
from loom_knowledge.corpus.knowledge_base import drop_corpus
from loom_knowledge.errors import InvalidOptionError
from loom_memory import EmbedderError
from loom_runtime import DecisionInputChangedError, Loom
from replay_tests.embedders import CountingEmbedder, MisdeclaredEmbedder

FLOOR = 0.1
"""Lower than memory's kit floor: a passage of ten terms sharing only word fragments with a
one-word question scores ~0.13 with the hashing embedder, unrelated ones at most ~0.03."""


DOCS = [
    Doc(id="pg", title="Replication", text="The postgres primary streams its WAL to replicas."),
    Doc(id="worker", title="Workers", text="Restart the worker pool when jobs stall."),
    Doc(id="lunch", title="Lunch", text="The canteen menu changes on Mondays."),
]


@pytest.fixture
def kb(loom: Loom) -> KnowledgeBase:
    kb = open_knowledge_base(loom, "runbooks")
    kb.sync(DOCS, source="test")
    return kb


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def retriever(kb: KnowledgeBase, embedder: CountingEmbedder) -> HybridRetriever:
    return HybridRetriever(kb, embedder=embedder, min_score=FLOOR)


def _ids(passages: Sequence[Any]) -> list[str]:
    return [passage.doc_id for passage in passages]


def test_vector_mode_finds_what_lexical_misses(retriever: HybridRetriever) -> None:
    """ "postgresql" is not the indexed term "postgres": BM25 misses it, the vector does not."""
    assert retriever.search("postgresql", mode="lexical") == []
    assert _ids(retriever.search("postgresql", mode="vector")) == ["pg"]


def test_an_unrelated_query_finds_nothing_in_every_mode(retriever: HybridRetriever) -> None:
    """The floor: a question sharing nothing with the corpus returns [] (not the least bad)."""
    for mode in ("lexical", "vector", "hybrid"):
        assert retriever.search("zebra quasar", mode=mode) == []  # type: ignore[arg-type]


def test_hybrid_puts_a_passage_both_rankings_find_first(retriever: HybridRetriever) -> None:
    found = retriever.search("restart worker jobs", mode="hybrid")
    assert _ids(found)[0] == "worker"


def test_a_passage_unchanged_across_revisions_is_embedded_once(
    kb: KnowledgeBase, retriever: HybridRetriever, embedder: CountingEmbedder
) -> None:
    retriever.index()
    first = len(embedder.texts)
    kb.put_doc(
        Doc(id="worker", title="Workers", text="Restart the worker pool when jobs stall."),
        source="test",
    )
    kb.put_doc(
        Doc(id="lunch", title="Lunch", text="The canteen menu changes on Fridays."), source="test"
    )
    assert retriever.index() == 1
    assert (first, embedder.texts[-1]) == (3, "The canteen menu changes on Fridays.\nLunch")


def test_as_of_ranks_the_passages_current_then_embedding_only_the_query(
    loom: Loom, kb: KnowledgeBase, retriever: HybridRetriever, embedder: CountingEmbedder
) -> None:
    """Vector search as of a position sees the revision current then; every passage vector it
    needs was recorded, so the model embeds only the question."""
    retriever.index()
    before = loom.log.position
    kb.put_doc(
        Doc(id="lunch", title="Lunch", text="The canteen is closed for renovation."),
        source="test",
    )
    retriever.index()
    embedded = len(embedder.texts)
    old = retriever.search("canteen menu mondays", mode="vector", as_of=before)
    new = retriever.search("canteen menu mondays", mode="vector")
    assert [p.text for p in old] == ["The canteen menu changes on Mondays."]
    assert [p.text for p in new] == ["The canteen is closed for renovation."]
    assert embedder.texts[embedded:] == ["canteen menu mondays"] * 2


def _build(db: str, embedder: CountingEmbedder, mode: str = "hybrid") -> Loom:
    loom = Loom(db)

    @loom.flow("ask")
    def ask(ctx: Any, question: str) -> list[str]:
        kb = open_knowledge_base(loom, "runbooks")
        retriever = HybridRetriever(kb, embedder=embedder, min_score=FLOOR)
        passages = retriever.retrieve(question, decide=ctx.decide, mode=mode)  # type: ignore[arg-type]
        return [passage.doc_id for passage in passages]

    return loom


def test_a_replay_needs_neither_the_corpus_nor_the_model(sqlite_url: str) -> None:
    embedder = CountingEmbedder()
    with _build(sqlite_url, embedder) as loom:
        open_knowledge_base(loom, "runbooks").sync(DOCS, source="test")
        run = loom.run("ask", question="postgresql replicas")
    assert run.output[0] == "pg"
    embedder.broken = True
    with _build(sqlite_url, embedder) as loom:
        drop_corpus(loom)
        result = loom.replay(run.execution_id)
        kinds = sorted(d.kind for d in loom.execution(run.execution_id).decisions.values())
    assert result.identical, result.describe()
    assert result.output == run.output
    assert kinds == ["embedding", "retrieval"]


def test_a_replay_in_another_mode_is_a_changed_input(sqlite_url: str) -> None:
    embedder = CountingEmbedder()
    with _build(sqlite_url, embedder) as loom:
        open_knowledge_base(loom, "runbooks").sync(DOCS, source="test")
        run = loom.run("ask", question="worker")
    with _build(sqlite_url, embedder, mode="vector") as loom:
        result = loom.replay(run.execution_id)
    assert any(isinstance(found, DecisionInputChangedError) for found in result.divergences)


@pytest.mark.parametrize(("mode", "limit"), [("dense", 4), ("hybrid", 0)])
def test_bad_modes_and_limits_are_refused(
    retriever: HybridRetriever, mode: str, limit: int
) -> None:
    with pytest.raises(InvalidOptionError):
        retriever.search("worker", mode=mode, limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("floor", [math.nan, math.inf, -math.inf, "0.1", True])
def test_a_floor_that_is_not_a_finite_number_is_refused(kb: KnowledgeBase, floor: object) -> None:
    """A NaN floor admitted no passage (every vector search ``[]``, hybrid silently BM25
    only) and was recorded as the retrievals' input: refused as loom_memory's stores refuse
    it."""
    with pytest.raises(InvalidOptionError, match="min_score"):
        HybridRetriever(kb, embedder=CountingEmbedder(), min_score=floor)  # type: ignore[arg-type]
    assert HybridRetriever(kb, embedder=CountingEmbedder(), min_score=0).min_score == 0.0


@pytest.mark.parametrize("model", [5, None])
def test_an_embedder_whose_model_is_not_text_is_refused_when_the_scope_opens(
    loom: Loom, model: object
) -> None:
    """The model addresses every recorded vector: 5 or None was appended as is at the first
    vector search and the event never decoded again (LogCorruptError for every reader of the
    log). Refused at open, before any append; the scope opens with a usable model after."""
    kb = open_knowledge_base(loom, "runbooks")
    kb.sync(DOCS, source="test")
    position = loom.log.position
    with pytest.raises(EmbedderError, match="model"):
        misdeclared = MisdeclaredEmbedder(model=model)
        open_knowledge_base(loom, "other", embedder=misdeclared, min_score=FLOOR)
    with pytest.raises(EmbedderError, match="model"):
        HybridRetriever(kb, embedder=MisdeclaredEmbedder(model=model), min_score=FLOOR)
    assert loom.log.position == position
    reopened = open_knowledge_base(loom, "other", embedder=CountingEmbedder(), min_score=FLOOR)
    reopened.sync(DOCS, source="test")
    assert _ids(reopened.search("postgresql", mode="vector")) == ["pg"]


def test_a_replay_creates_no_table(sqlite_url: str) -> None:
    """A replay answers from the log: the vectors' table is not even created."""
    embedder = CountingEmbedder()
    with _build(sqlite_url, embedder) as loom:
        open_knowledge_base(loom, "runbooks").sync(DOCS, source="test")
        run = loom.run("ask", question="worker")
    with _build(sqlite_url, embedder) as loom:
        with loom.log.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE loom_kb_embeddings")
        assert loom.replay(run.execution_id).identical
        assert not inspect(loom.log.engine).has_table("loom_kb_embeddings")


def test_the_corpus_is_read_once_while_it_stands_still(
    kb: KnowledgeBase, retriever: HybridRetriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vector search stacks the corpus's vectors once and reuses them until a corpus event is
    appended: other events (a flow's decisions) do not invalidate them, a corpus edit does."""
    reads: list[int] = []
    passages = kb.passages
    monkeypatch.setattr(kb, "passages", lambda: reads.append(1) or passages())
    assert _ids(retriever.search("postgresql", mode="vector")) == ["pg"]
    assert _ids(retriever.search("replicas streaming", mode="vector")) == ["pg"]

    @kb.loom.flow("unrelated")
    def unrelated(ctx: Any) -> int:
        return ctx.decide("n", lambda: 1)

    kb.loom.run("unrelated")  # log events that are not the corpus's
    assert _ids(retriever.search("postgresql", mode="vector")) == ["pg"]
    assert len(reads) == 1

    kb.put_doc(Doc(id="pg2", text="A postgresql standby replays WAL."), source="test")
    assert "pg2" in _ids(retriever.search("postgresql standby", mode="vector", limit=5))
    assert len(reads) == 2  # the edit was seen: read again, once
