"""A filter finds every passage it keeps, however deep in the unfiltered ranking they sit.

The store caps a search at ``MAX_SEARCH_LIMIT`` (100) passages. A filtered search reads the
unfiltered ranking deeper and deeper until ``limit`` passages pass; if the cap stopped that
read, a short answer would look like an exhausted ranking, and a filter keeping only
passages ranked below the first 100 would answer with fewer than match (none at all here).

The corpus: more than 100 passages match the question; the ``deep`` team's rank below all of
them (a lower term frequency), the ``mid`` team's just above the cap. Every answer, current
and as of a position with other documents, in each mode, must be the brute-force one of
`test_ranking_reference.py` (filter, then rank with the whole corpus's statistics), its
lexical half at most ``MAX_SEARCH_LIMIT`` long as an unfiltered one is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from loom_knowledge import Doc, KnowledgeBase, Passage, open_knowledge_base
from loom_knowledge.corpus.hybrid import DEFAULT_CANDIDATES
from loom_knowledge.corpus.keys import corpus_key
from loom_knowledge.corpus.retrieval import MODES, Mode, check_filter, matches
from loom_memory import HashingEmbedder, reciprocal_rank_fusion
from loom_memory.store import MAX_SEARCH_LIMIT
from loom_runtime import Loom
from replay_tests.knowledge.test_ranking_reference import FLOOR, _lexical, _named, _vector

if TYPE_CHECKING:
    from replay_tests.conftest import Copy

QUESTION = "disk logs"
KEY = corpus_key("runbooks")
FILTERS: list[dict[str, Any] | None] = [
    None,
    {"team": "deep"},
    {"team": ["mid", "deep"]},
    {"team": ["top", "deep"]},
]
OTHER = ["wal", "replica", "pool", "menu"]
LIMITS = (1, 10, 40, MAX_SEARCH_LIMIT + 20)


def _docs(*, deep_text: str) -> list[Doc]:
    """120 ``top`` passages (``mid`` ranked 90-99), 30 ``deep`` ones below them, 40 that do
    not match (they count in ``N``). The ``deep`` ones tie lexically but not by vector (their
    other words differ), so hybrid's fusion of the two halves is not either half alone."""
    top = [
        Doc(
            id=f"d{n:03}",
            text="Rotate disk disk logs.",
            meta={"team": "mid" if 90 <= n < 100 else "top"},
        )
        for n in range(120)
    ]
    deep = [
        Doc(id=f"e{n:03}", text=f"{deep_text} {' '.join(OTHER[: n % 5])}", meta={"team": "deep"})
        for n in range(30)
    ]
    other = [
        Doc(id=f"f{n:03}", text="The canteen menu.", meta={"team": "office"}) for n in range(40)
    ]
    return top + deep + other


def _history(kb: KnowledgeBase, loom: Loom) -> int:
    """Write the corpus, then change it (texts, removals): return the position before."""
    kb.sync(_docs(deep_text="Disk logs fill the volume."), source="seed")
    before = loom.log.position
    kb.sync(_docs(deep_text="The disk logs fill up.")[:-10], source="seed")
    return before


def _expected(passages: Sequence[Passage], mode: Mode, limit: int, filter: Any) -> list[Passage]:
    """Filter, then rank by the reference; the lexical ranking at most ``MAX_SEARCH_LIMIT``
    long, the vector one uncapped; hybrid fuses the two, each ``max(limit, 50)`` deep."""
    checked = check_filter(filter)

    def kept(ranking: list[Passage], depth: int) -> list[Passage]:
        return [p for p in ranking if checked is None or matches(p.meta, checked)][:depth]

    def lexical(depth: int) -> list[Passage]:
        return kept(_lexical(passages, QUESTION), min(depth, MAX_SEARCH_LIMIT))

    if mode == "lexical":
        return lexical(limit)
    if mode == "vector":
        return kept(_vector(passages, QUESTION), limit)
    depth = max(limit, DEFAULT_CANDIDATES)
    return reciprocal_rank_fusion(
        [lexical(depth), kept(_vector(passages, QUESTION), depth)],
        identity=lambda p: (p.doc_id, p.index, p.revision),
        limit=limit,
    )


def _open(loom: Loom) -> KnowledgeBase:
    return open_knowledge_base(loom, "runbooks", embedder=HashingEmbedder(), min_score=FLOOR)


def _build(url: str) -> int:
    """The corpus, written once per worker and backend (``database_copy``)."""
    with Loom(url) as loom:
        return _history(_open(loom), loom)


@pytest.fixture
def corpus(database_copy: Copy[int]) -> Iterator[tuple[KnowledgeBase, int]]:
    url, before = database_copy(_build)
    with Loom(url) as loom:
        yield _open(loom), before


def test_the_filter_keeps_only_passages_past_the_cap(corpus: tuple[KnowledgeBase, int]) -> None:
    """More passages match than the cap, and every ``deep`` one ranks past it, current and
    as of: a search reading only the capped ranking finds none of them."""
    kb, before = corpus
    for passages in (kb.passages(), kb.as_of(before).passages()):
        ranking = _lexical(passages, QUESTION)
        assert len(ranking) > MAX_SEARCH_LIMIT + 10
        deep = [n for n, p in enumerate(ranking) if p.meta == {"team": "deep"}]
        assert len(deep) >= 20
        assert min(deep) >= MAX_SEARCH_LIMIT + 10


@pytest.mark.parametrize("mode", MODES)
def test_a_filter_sees_past_the_cap(corpus: tuple[KnowledgeBase, int], mode: Mode) -> None:
    """Current and as of, every filter and limit: exactly the brute-force answer."""
    kb, before = corpus
    views = [(kb.passages(), kb.search), (kb.as_of(before).passages(), kb.as_of(before).search)]
    for passages, search in views:
        for filter in FILTERS:
            for limit in LIMITS:
                want = _expected(passages, mode, limit, filter)
                got = search(QUESTION, mode=mode, limit=limit, filter=filter)
                assert _named(got) == _named(want), (filter, limit)
                assert want or mode == "vector"


def test_only_the_knowledge_base_reads_past_the_cap(corpus: tuple[KnowledgeBase, int]) -> None:
    """The passage store's search keeps its documented cap, current and as of; the uncapped
    call the knowledge base makes returns the same ranking, longer."""
    kb, before = corpus
    store = kb._index.store
    for as_of in (None, before):
        capped = store.search_annotated(KEY, QUESTION, limit=150, as_of=as_of)
        deeper = store.search_annotated(KEY, QUESTION, limit=150, as_of=as_of, capped=False)
        assert len(capped) == MAX_SEARCH_LIMIT
        assert len(deeper) == 150
        assert deeper[:MAX_SEARCH_LIMIT] == capped
    assert len(store.search(KEY, QUESTION, limit=150)) == MAX_SEARCH_LIMIT
