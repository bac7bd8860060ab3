"""Hybrid search ranks its lexical half from the term index it holds, with the store's answer.

`test_ranking_reference.py` pins every mode to a brute-force reference on a small corpus built
to catch shortcuts. Here a seeded corpus with history is large enough for what that one cannot
show: more matches than the store's depth cap (a filter reads past it), many exact ties,
passages with no indexed term (they count in ``N``), and as-of views.
Every answer of the term-index path must equal the store path's (the retriever with the index
switched off), which is what hybrid answered before the index existed. The path must be the one
taken (the store is never asked), and a term index that breaks ties the wrong way must be caught.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from loom_knowledge import Doc, HybridRetriever, KnowledgeBase, Passage, open_knowledge_base
from loom_knowledge.corpus import hybrid
from loom_knowledge.corpus.term_index import TermIndex, term_counts
from loom_memory import HashingEmbedder
from loom_memory.store import MAX_SEARCH_LIMIT
from loom_runtime import Loom

if TYPE_CHECKING:
    from replay_tests.conftest import Copy

FLOOR = 0.05
WORDS = ["disk", "logs", "rotate", "volume", "worker", "pool", "stall", "wal", "replica", "menu"]
QUESTIONS = ["disk logs", "rotate", "worker pool stall", "wal replica menu", "volume disk", "nope"]
FILTERS: list[dict[str, Any] | None] = [None, {"team": "sre"}, {"team": ["dba", "office"]}]
LIMITS = (1, 10, 60, 120)


def _text(rng: random.Random) -> str:
    """A short text over a tiny vocabulary, "disk" the commonest: many matches, many ties."""
    return " ".join(rng.choices(WORDS, weights=[6, 3, 1, 1, 1, 1, 1, 1, 1, 1], k=rng.randint(1, 4)))


def _docs(rng: random.Random, count: int, start: int = 0) -> list[Doc]:
    docs = []
    for n in range(start, start + count):
        # Stop words only: a passage with no term and no vector, still counted in N.
        text = "The and of." if n % 17 == 0 else _text(rng)
        team = rng.choice(["sre", "dba", "office"])
        docs.append(Doc(id=f"d{n}", text=text, meta={"team": team}))
    return docs


def _history(kb: KnowledgeBase, loom: Loom) -> list[int]:
    """Writes, revisions and removals; the positions worth asking as of."""
    rng = random.Random(14)
    kb.sync(_docs(rng, 260), source="seed")
    positions = [loom.log.position]
    kb.sync(_docs(rng, 200) + _docs(rng, 20, start=300), source="seed")  # revise most, add 20
    positions.append(loom.log.position)
    for n in range(0, 40, 3):
        kb.remove_doc(f"d{n}", source="seed")
    positions.append(loom.log.position)
    return positions


class _StorePath(HybridRetriever):
    """The retriever with its term index switched off: every lexical half asks the store."""

    def _stack(self, passages: list[Passage]) -> hybrid.Stacked:
        stacked = super()._stack(passages)
        return hybrid.Stacked(stacked.held, stacked.matrix, stacked.passages, None, stacked.metas)


def _build(url: str) -> list[int]:
    """The corpus, written once per worker and backend (``database_copy``)."""
    with Loom(url) as loom:
        return _history(open_knowledge_base(loom, "runbooks"), loom)


@pytest.fixture
def corpus(database_copy: Copy[list[int]]) -> Iterator[tuple[KnowledgeBase, list[int]]]:
    url, positions = database_copy(_build)
    with Loom(url) as loom:
        yield open_knowledge_base(loom, "runbooks"), positions


def _retrievers(kb: KnowledgeBase) -> tuple[HybridRetriever, HybridRetriever]:
    embedder = HashingEmbedder()
    return (
        HybridRetriever(kb, embedder=embedder, min_score=FLOOR),
        _StorePath(kb, embedder=embedder, min_score=FLOOR),
    )


def _answers(retriever: HybridRetriever, as_of: int | None) -> Iterator[list[Passage]]:
    for question in QUESTIONS:
        for filter in FILTERS:
            for limit in LIMITS:
                yield retriever.search(
                    question, mode="hybrid", limit=limit, filter=filter, as_of=as_of
                )


def test_hybrid_answers_as_the_store_path(corpus: tuple[KnowledgeBase, list[int]]) -> None:
    """Current and as of every position, every filter and limit: the store path's answer."""
    kb, positions = corpus
    indexed, stored = _retrievers(kb)
    for as_of in [None, *positions]:
        for got, want in zip(_answers(indexed, as_of), _answers(stored, as_of), strict=True):
            assert got == want, as_of


def test_the_corpus_exceeds_the_cap_and_ties(corpus: tuple[KnowledgeBase, list[int]]) -> None:
    """The corpus really has more matches than the store's cap, and ties at the boundary."""
    kb, _ = corpus
    indexed, _stored = _retrievers(kb)
    indexed.search("disk", mode="hybrid")
    assert indexed._current is not None
    terms = indexed._current[1].terms
    assert terms is not None
    held = [p for p in kb.passages() if "disk" in p.text.split()]
    assert len(held) > MAX_SEARCH_LIMIT
    assert len(terms.search(["disk"], len(held) + 1)) == len(held)  # no cap on depth
    assert len({p.text for p in held}) < len(held)  # identical passages: exact ties


def test_hybrid_never_asks_the_store_when_it_holds_the_index(
    corpus: tuple[KnowledgeBase, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The term index answers (it sums postings) and the store's search is never called; the
    same spy counts the store path's calls, so a spy that saw nothing would fail here."""
    kb, positions = corpus
    indexed, stored = _retrievers(kb)
    store = kb._index.store
    calls = []
    original = store.search_annotated

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "search_annotated", spy)
    for as_of in (None, positions[0]):
        indexed.search("disk logs", mode="hybrid", as_of=as_of, filter={"team": "sre"})
    assert calls == []
    assert indexed._current is not None
    current = indexed._current[1].terms
    assert current is not None
    assert current.scored > 0
    stored.search("disk logs", mode="hybrid")
    assert len(calls) == 1


def test_a_term_index_breaking_ties_by_row_is_caught(
    corpus: tuple[KnowledgeBase, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: ties broken by write order instead of passage id change an answer
    the store path gives, so the comparison above can fail."""
    kb, _ = corpus
    build = TermIndex.build

    def by_row(ids: list[str], counts: list[Any], vocabulary: dict[str, int]) -> TermIndex | None:
        index = build(ids, counts, vocabulary)
        assert index is not None
        index._tie = np.arange(len(ids))[::-1].copy()
        return index

    monkeypatch.setattr(TermIndex, "build", staticmethod(by_row))
    indexed, stored = _retrievers(kb)
    assert any(
        got != want
        for got, want in zip(_answers(indexed, None), _answers(stored, None), strict=True)
    )


def test_repeated_passage_ids_fall_back_to_the_store() -> None:
    """Two rows with one passage id have no id order to break their tie: no index."""
    vocabulary: dict[str, int] = {}
    counts = [term_counts(["disk"], vocabulary), term_counts(["disk"], vocabulary)]
    assert TermIndex.build(["a#0", "a#0"], counts, vocabulary) is None
    index = TermIndex.build(["a#1", "a#0"], counts, vocabulary)
    assert index is not None
    assert index.search(["disk"], 10) == [1, 0]
    assert index.search(["nope"], 10) == []
