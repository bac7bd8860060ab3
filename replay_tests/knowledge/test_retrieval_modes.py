"""``kb.retrieve``/``kb.search`` in every mode, with meta filters: recorded, exact, history-true."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlalchemy import inspect

from loom_knowledge import (
    Doc,
    EmbedderRequiredError,
    KnowledgeBase,
    KnowledgeBaseOptionsError,
    Passage,
    open_knowledge_base,
)
from loom_knowledge.corpus.knowledge_base import drop_corpus
from loom_knowledge.corpus.retrieval import MODES, Mode, check_filter, matches
from loom_knowledge.errors import InvalidArgumentError, InvalidOptionError
from loom_memory import HashingEmbedder, reciprocal_rank_fusion
from loom_runtime import DecisionInputChangedError, Loom, codec
from replay_tests.embedders import CountingEmbedder

FLOOR = 0.1
"""The hashing embedder's floor used across the knowledge tests (test_hybrid_retrieval.py)."""

FILTERS: list[dict[str, Any] | None] = [None, {"team": "sre"}, {"team": ["dba", "office"]}]


class UnavailableEmbedder:
    """The hashing embedder's identity with no model: any embedding fails the test."""

    def __init__(self) -> None:
        self.model = HashingEmbedder().model
        self.dimension = HashingEmbedder().dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError(f"the embedding model was called for {list(texts)!r}")


DOCS = [
    Doc(
        id="pg",
        title="Replication",
        text="The postgres primary streams its WAL to replicas.",
        meta={"team": "dba"},
    ),
    Doc(
        id="worker",
        title="Workers",
        text="Restart the worker pool when jobs stall.",
        meta={"team": "sre", "tags": ["queue", "jobs"]},
    ),
    Doc(id="lunch", title="Lunch", text="The canteen menu changes on Mondays.", meta=None),
]


def _open(loom: Loom, scope: str = "runbooks", embedder: Any = None) -> KnowledgeBase:
    chosen = HashingEmbedder() if embedder is None else embedder
    return open_knowledge_base(loom, scope, embedder=chosen, min_score=FLOOR)


def _seen(passages: Sequence[Passage]) -> list[tuple[str, int, str]]:
    """What two corpora must agree on (revisions differ between a history and a fresh one)."""
    return [(p.doc_id, p.index, p.text) for p in passages]


def test_a_kb_opened_with_an_embedder_answers_every_mode(loom: Loom) -> None:
    """ "postgresql" is not the indexed term "postgres": lexical misses it, vector and hybrid
    find it, and an unrelated question finds nothing in any mode (the floor)."""
    kb = _open(loom)
    kb.sync(DOCS, source="test")
    assert kb.search("postgresql", mode="lexical") == []
    assert [p.doc_id for p in kb.search("postgresql", mode="vector")] == ["pg"]
    assert [p.doc_id for p in kb.search("postgresql", mode="hybrid")] == ["pg"]
    for mode in MODES:
        assert kb.search("zebra quasar", mode=mode) == []


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_without_an_embedder_the_vector_modes_say_what_to_pass(loom: Loom, mode: Mode) -> None:
    """Refused before anything is read or recorded, naming the options and the way out."""
    kb = open_knowledge_base(loom, "runbooks")
    kb.sync(DOCS, source="test")
    calls: list[object] = []
    attempts: list[Callable[[], object]] = [
        lambda: kb.search("worker", mode=mode),
        lambda: kb.as_of(loom.log.position).search("worker", mode=mode),
        lambda: kb.retrieve("worker", decide=lambda *a, **k: calls.append(a), mode=mode),
    ]
    for attempt in attempts:
        with pytest.raises(EmbedderRequiredError, match=r"embedder=\.\.\., min_score=\.\.\.") as e:
            attempt()
        assert "mode='lexical'" in str(e.value)
    assert calls == []


def test_an_embedder_comes_with_its_floor(loom: Loom) -> None:
    with pytest.raises(InvalidOptionError, match="min_score"):
        open_knowledge_base(loom, "a", embedder=HashingEmbedder())
    with pytest.raises(InvalidOptionError, match="without an embedder"):
        open_knowledge_base(loom, "b", min_score=0.1)


def test_a_scope_is_reopened_only_with_the_same_vector_space_and_floor(loom: Loom) -> None:
    """Same model identity (another instance) and floor: the open one; another model or floor,
    or none where it has one given explicitly: refused; no options: the open one."""
    kb = _open(loom)
    assert _open(loom) is kb
    assert open_knowledge_base(loom, "runbooks") is kb
    with pytest.raises(KnowledgeBaseOptionsError, match="embedder"):
        open_knowledge_base(
            loom, "runbooks", embedder=HashingEmbedder(dimension=512), min_score=FLOOR
        )
    with pytest.raises(KnowledgeBaseOptionsError, match="min_score"):
        open_knowledge_base(loom, "runbooks", embedder=HashingEmbedder(), min_score=0.3)
    lexical = open_knowledge_base(loom, "plain")
    with pytest.raises(KnowledgeBaseOptionsError):
        _open(loom, "plain")
    assert lexical.embedder is None and kb.embedder is not None and kb.min_score == FLOOR


def _flow(loom: Loom, *, mode: Mode, filter: dict[str, Any] | None, embedder: Any) -> None:
    @loom.flow("ask")
    def ask(ctx: Any, question: str) -> list[str]:
        kb = _open(loom, embedder=embedder)
        passages = kb.retrieve(question, decide=ctx.decide, mode=mode, filter=filter)
        return [passage.doc_id for passage in passages]


def test_the_default_mode_records_what_lexical_retrieval_always_recorded(
    sqlite_url: str,
) -> None:
    """A scope opened with an embedder still retrieves lexically by default, records only
    scope, query and limit (old executions replay unchanged), and never calls the model."""
    embedder = CountingEmbedder()
    with Loom(sqlite_url) as loom:

        @loom.flow("ask")
        def ask(ctx: Any, question: str) -> list[str]:
            kb = _open(loom, embedder=embedder)
            return [p.doc_id for p in kb.retrieve(question, decide=ctx.decide)]

        _open(loom, embedder=embedder).sync(DOCS, source="test")
        run = loom.run("ask", question="worker jobs")
        [decision] = loom.execution(run.execution_id).decisions.values()
    assert run.output == ["worker"]
    assert (decision.kind, codec.decode(decision.input or b"null")) == (
        "retrieval",
        {"scope": "runbooks", "query": "worker jobs", "limit": 4},
    )
    assert embedder.texts == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("filter", [None, {"team": ["sre", "dba"]}])
def test_a_replay_needs_neither_the_corpus_nor_the_model(
    sqlite_url: str, mode: Mode, filter: dict[str, Any] | None
) -> None:
    """Corpus tables and recorded vectors dropped, the model replaced by one that fails on any
    embedding: every mode, filtered or not, replays identically from the log."""
    with Loom(sqlite_url) as loom:
        _flow(loom, mode=mode, filter=filter, embedder=HashingEmbedder())
        _open(loom).sync(DOCS, source="test")
        run = loom.run("ask", question="restart the stalled workers")
    assert run.output and run.output[0] == "worker"
    with Loom(sqlite_url) as loom:
        drop_corpus(loom)
        with loom.log.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS loom_kb_embeddings")
        assert not {"loom_kb_embeddings", "loom_kb_documents"} & set(
            inspect(loom.log.engine).get_table_names()
        )
        _flow(loom, mode=mode, filter=filter, embedder=UnavailableEmbedder())
        result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output


@pytest.mark.parametrize("mode", MODES)
def test_a_changed_filter_is_a_divergence(sqlite_url: str, mode: Mode) -> None:
    """The filter is part of the recorded input: replayed with another one, the retrieval
    reports a changed input (and an unfiltered run replayed filtered does too)."""
    runs = {}
    with Loom(sqlite_url) as loom:
        _flow(loom, mode=mode, filter={"team": "sre"}, embedder=HashingEmbedder())
        _open(loom).sync(DOCS, source="test")
        runs["sre"] = loom.run("ask", question="worker").execution_id
    with Loom(sqlite_url) as loom:
        _flow(loom, mode=mode, filter=None, embedder=HashingEmbedder())
        runs["none"] = loom.run("ask", question="worker").execution_id
    replays = [({"team": "dba"}, runs["sre"]), (None, runs["sre"]), ({"team": "sre"}, runs["none"])]
    for replay_filter, execution_id in replays:
        with Loom(sqlite_url) as loom:
            _flow(loom, mode=mode, filter=replay_filter, embedder=HashingEmbedder())
            result = loom.replay(execution_id)
        assert any(isinstance(d, DecisionInputChangedError) for d in result.divergences)


def _crowded(loom: Loom) -> KnowledgeBase:
    """24 "sre" passages that rank above 6 "dba" ones for the question: a filter for dba must
    look past the first 20 hits (the first over-fetch) to find its 5."""
    kb = _open(loom)
    strong = [
        Doc(id=f"sre-{n:02}", text=f"disk full disk full volume alert {n}", meta={"team": "sre"})
        for n in range(24)
    ]
    weak = [
        Doc(id=f"dba-{n}", text=f"a volume note {n} about backups", meta={"team": "dba"})
        for n in range(6)
    ]
    kb.sync(strong + weak, source="test")
    return kb


@pytest.mark.parametrize("mode", ["lexical", "vector"])
def test_a_filter_never_cuts_the_top_k_short(loom: Loom, mode: Mode) -> None:
    """Filtered top 5 == the whole ranking with the other teams left out, first 5: exact."""
    kb = _crowded(loom)
    question = "disk full volume"
    everything = kb.search(question, mode=mode, limit=100)
    assert [p.meta["team"] for p in everything[:20]] == ["sre"] * 20  # type: ignore[index]
    wanted = [p for p in everything if p.meta == {"team": "dba"}]
    found = kb.search(question, mode=mode, limit=5, filter={"team": "dba"})
    assert len(found) == 5
    assert found == wanted[:5]
    assert kb.as_of(loom.log.position).search(question, mode=mode, limit=5, filter={"team": "dba"})
    assert kb.search(question, mode=mode, limit=10, filter={"team": "dba"}) == wanted


def test_hybrid_fuses_the_two_filtered_rankings(loom: Loom) -> None:
    """Hybrid with a filter is the fusion of the filtered lexical and vector rankings, each
    to the full candidate depth, so it too finds every match the rankings hold."""
    kb = _crowded(loom)
    question = "disk full volume"
    wanted = {"team": "dba"}
    rankings = [kb.search(question, mode=m, limit=50, filter=wanted) for m in ("lexical", "vector")]
    expected = reciprocal_rank_fusion(
        rankings, identity=lambda p: (p.doc_id, p.index, p.revision), limit=5
    )
    found = kb.search(question, mode="hybrid", limit=5, filter=wanted)
    assert found == expected and len(found) == 5
    assert all(p.meta == wanted for p in found)


HISTORY = [
    Doc(id="pg", text="The postgres primary streams its WAL to replicas.", meta={"team": "dba"}),
    Doc(id="disk", text="Disk full: find the largest files first.", meta={"team": "sre"}),
    Doc(id="dns", text="The resolver times out: check the upstream servers.", meta={"team": "sre"}),
]
TWIN = "Restart the worker pool when jobs stall."
QUESTIONS = ["postgresql replicas", "disk full files", TWIN, "restart workers", "resolver"]


def _fresh(loom: Loom, scope: str, docs: list[Doc]) -> KnowledgeBase:
    fresh = _open(loom, scope)
    fresh.sync(docs, source="test")
    return fresh


def _assert_same_answers(search: Any, fresh: KnowledgeBase) -> None:
    for question in QUESTIONS:
        for mode in MODES:
            for filter in FILTERS:
                got = search(question, mode=mode, limit=3, filter=filter)
                want = fresh.search(question, mode=mode, limit=3, filter=filter)
                assert _seen(got) == _seen(want), (question, mode, filter)


def test_a_corpus_with_history_answers_as_a_fresh_corpus_in_every_mode(loom: Loom) -> None:
    """Revisions, a removal and two identical passages written in reverse id order: the
    current corpus, and the corpus as of a position, answer every mode and filter exactly as
    fresh corpora of the documents current then (ties broken by passage, not history)."""
    kb = _open(loom)
    kb.sync(HISTORY, source="test")
    for doc_id in ("twin-b", "twin-a"):  # written b first: history order is not id order
        kb.put_doc(Doc(id=doc_id, text=TWIN, meta={"team": "sre"}), source="test")
    middle = loom.log.position
    then = sorted([*HISTORY, *_twins()], key=lambda d: d.id)
    kb.put_doc(
        Doc(id="disk", text="Disk full: rotate the logs, then grow the volume.", meta=None),
        source="test",
    )
    kb.remove_doc("dns", source="test")
    kb.put_doc(Doc(id="office", text="The canteen menu.", meta={"team": "office"}), source="test")
    now = {doc.id: doc for doc in then}
    now.pop("dns")
    now["disk"] = Doc(id="disk", text="Disk full: rotate the logs, then grow the volume.")
    now["office"] = Doc(id="office", text="The canteen menu.", meta={"team": "office"})

    _assert_same_answers(kb.search, _fresh(loom, "fresh-now", sorted(now.values(), key=_id)))
    _assert_same_answers(kb.as_of(middle).search, _fresh(loom, "fresh-then", then))
    tied = kb.search(TWIN, mode="vector", limit=2)
    assert [p.doc_id for p in tied] == ["twin-a", "twin-b"]


def _twins() -> list[Doc]:
    return [Doc(id=i, text=TWIN, meta={"team": "sre"}) for i in ("twin-a", "twin-b")]


def _id(doc: Doc) -> str:
    return doc.id


def test_the_filter_matches_what_the_grammar_says_on_real_passages(loom: Loom) -> None:
    """A list meta value matches any element; a document without meta matches no filter."""
    kb = _open(loom)
    kb.sync(DOCS, source="test")
    checked = check_filter({"tags": "jobs"})
    assert checked is not None
    for mode in MODES:
        found = kb.search("worker jobs canteen postgres", mode=mode, filter={"tags": "jobs"})
        assert [p.doc_id for p in found] == ["worker"]
        assert all(matches(p.meta, checked) for p in found)
        assert kb.search("canteen", mode=mode, filter={"team": ["sre", "dba"]}) == []


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_an_async_flow_is_told_to_retrieve_lexically_or_in_a_def_flow(
    loom: Loom, mode: Mode
) -> None:
    """The vector modes record two decisions in turn: an async ctx.decide cannot give the
    query's vector back before the passages are decided, so it is refused, not run unrecorded."""
    _open(loom).sync(DOCS, source="test")

    @loom.flow("async-ask")
    async def ask(ctx: Any) -> list[str]:
        passages = await _open(loom).retrieve("worker", decide=ctx.decide, mode=mode)
        return [passage.doc_id for passage in passages]

    with pytest.raises(InvalidArgumentError, match=f"a {mode} retrieval .* plain def flow"):
        asyncio.run(loom.arun("async-ask"))


def test_drop_corpus_deletes_the_recorded_vectors_too_and_they_come_back_from_the_log(
    loom: Loom,
) -> None:
    """The vectors are a corpus read model like the passage index: ``drop_corpus`` deletes
    them, and the next search projects them again from the log without calling the model
    for any passage (only for the live query)."""
    embedder = CountingEmbedder()
    kb = _open(loom, embedder=embedder)
    kb.sync(DOCS, source="test")
    before = kb.search("restart the stalled workers", mode="vector")
    assert before

    drop_corpus(loom)
    with loom.log.engine.connect() as conn:
        left = conn.exec_driver_sql("SELECT count(*) FROM loom_kb_embeddings").scalar_one()
    assert left == 0, "drop_corpus left the corpus's recorded vectors behind"

    embedder.texts.clear()
    again = open_knowledge_base(loom, "runbooks", embedder=embedder, min_score=FLOOR)
    assert _seen(again.search("restart the stalled workers", mode="vector")) == _seen(before)
    assert embedder.texts == ["restart the stalled workers"]
