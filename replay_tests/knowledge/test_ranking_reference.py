"""Every mode of knowledge-base search ranks exactly as a brute-force reference written here.

The reference is the ranking rule stated once, in plain Python over the passages a corpus holds
(current, or current at a log position), with nothing shared with the engine but the tokenizer
and the fusion function:

* lexical: BM25 with ``k1 = 1.2``, ``b = 0``, ``idf = max(ln((N - df + 0.5) / (df + 0.5)), 1e-6)``
  scaled to integers by ``2**32`` (``N`` and ``df`` count the passages the corpus holds then), a
  term's share ``idf * 11 tf // (5 tf + 6)``, ties by passage id (``<doc_id>#<index>``, compared
  as text: ``t10`` before ``t9``); the filter keeps passages of the whole-corpus ranking;
* vector: the cosine of unit vectors in float32, at or above the floor, ties by (document id,
  passage index);
* hybrid: the two filtered rankings, each ``max(limit, 50)`` deep, fused by reciprocal rank.

The corpus is built to break a search that takes a shortcut: exact ties written in an order
that is neither the id order as numbers nor as text, revisions back and forth, a removal, a
term in every passage (the idf floor), and filters that reject most of the top. Any change to
how a search is computed (a plan that skips rows it proves cannot enter, cached statistics) must
keep every answer here, current and as of every position.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from loom_knowledge import Doc, KnowledgeBase, Passage, open_knowledge_base
from loom_knowledge.corpus.hybrid import DEFAULT_CANDIDATES, passage_text
from loom_knowledge.corpus.retrieval import MODES, Mode, check_filter, matches
from loom_knowledge.domain.passage_entry import format_passage_id
from loom_memory import HashingEmbedder, reciprocal_rank_fusion, unit_vector
from loom_memory.text import query_terms, tokenize
from loom_runtime import Loom

FLOOR = 0.1
TIED = "Rotate the disk logs when the volume fills."
QUESTIONS = [
    "rotate disk logs",
    "volume",
    "the",  # a stop word: no term, no hit in the lexical modes
    "restart worker pool jobs stall",
    "replicas streams wal primary",
    "menu canteen rotate",
    "logs logs logs worker",
    "zebra quasar",
]
FILTERS: list[dict[str, Any] | None] = [
    None,
    {"team": "sre"},
    {"team": ["dba", "office"]},
    {"tags": "queue"},
]
LIMITS = (2, 10)


def _history(kb: KnowledgeBase, loom: Loom) -> list[int]:
    """Write the corpus through history; return the log positions worth asking as of."""
    positions = []
    # Twins with the same text, written in an order that is neither numeric nor textual.
    for name in ("t9", "t10", "t2", "t1"):
        kb.put_doc(Doc(id=name, text=TIED, meta={"team": "sre"}), source="test")
    positions.append(loom.log.position)
    kb.sync(
        [
            Doc(
                id="pg",
                text="The postgres primary streams its WAL to replicas.",
                meta={"team": "dba"},
            ),
            Doc(
                id="worker",
                title="Workers",
                text="Restart the worker pool when jobs stall.\n\nLogs of the worker: rotate them.",
                meta={"team": "sre", "tags": ["queue", "jobs"]},
            ),
            Doc(id="lunch", text="The canteen menu rotates on Mondays.", meta={"team": "office"}),
            Doc(id="logs", text="Logs logs logs: rotate disk logs daily.", meta=None),
        ],
        source="manual",
    )
    positions.append(loom.log.position)
    worker = "Restart the worker pool; jobs stall when the volume fills."
    kb.sync(
        [
            Doc(id="pg", text="Replicas replay the WAL the primary streams.", meta={"team": "dba"}),
            Doc(id="worker", text=worker, meta={"team": "sre", "tags": ["queue"]}),
            Doc(id="lunch", text="The canteen menu rotates on Mondays.", meta={"team": "office"}),
        ],
        source="manual",
    )
    positions.append(loom.log.position)
    kb.remove_doc("t2", source="test")
    kb.put_doc(Doc(id="t2", text=TIED, meta={"team": "dba"}), source="test")  # back, other meta
    positions.append(loom.log.position)
    return positions


def _lexical(passages: Sequence[Passage], query: str) -> list[Passage]:
    """Every passage holding a query term, best first (the module docstring's rule)."""
    counts = [Counter(tokenize(passage_text(p))) for p in passages]
    total = len(passages)
    idf = {}
    for term in query_terms(query):
        df = sum(1 for held in counts if term in held)
        if df:
            idf[term] = round(2**32 * max(math.log((total - df + 0.5) / (df + 0.5)), 1e-6))
    scored = [
        (sum(w * 11 * held[t] // (5 * held[t] + 6) for t, w in idf.items() if t in held), p)
        for p, held in zip(passages, counts, strict=True)
        if any(t in held for t in idf)
    ]
    scored.sort(key=lambda hit: (-hit[0], format_passage_id(hit[1].doc_id, hit[1].index)))
    return [p for _, p in scored]


def _vector(passages: Sequence[Passage], query: str) -> list[Passage]:
    """Every passage at or above the floor, best first, ties by (document id, index)."""
    embedder = HashingEmbedder()
    ordered = sorted(passages, key=lambda p: (p.doc_id, p.index))
    if not tokenize(query) or not ordered:
        return []
    asked = unit_vector(np.asarray(embedder.embed([query])[0], dtype=np.float32))
    if asked is None:
        return []
    units = []
    for vector in embedder.embed([passage_text(p) for p in ordered]):
        unit = unit_vector(np.asarray(vector, dtype=np.float32))
        units.append(np.zeros(embedder.dimension, np.float32) if unit is None else unit)
    scores = np.stack(units) @ asked
    kept = sorted((n for n in range(len(ordered)) if scores[n] >= FLOOR), key=lambda n: -scores[n])
    return [ordered[n] for n in kept]


def _reference(
    passages: Sequence[Passage], query: str, mode: Mode, limit: int, filter: Any
) -> list[Passage]:
    checked = check_filter(filter)

    def cut(ranking: list[Passage], depth: int) -> list[Passage]:
        kept = [p for p in ranking if checked is None or matches(p.meta, checked)]
        return kept[:depth]

    if mode == "lexical":
        return cut(_lexical(passages, query), limit)
    if mode == "vector":
        return cut(_vector(passages, query), limit)
    depth = max(limit, DEFAULT_CANDIDATES)
    return reciprocal_rank_fusion(
        [cut(_lexical(passages, query), depth), cut(_vector(passages, query), depth)],
        identity=lambda p: (p.doc_id, p.index, p.revision),
        limit=limit,
    )


def _named(passages: Sequence[Passage]) -> list[tuple[str, int, int, str]]:
    return [(p.doc_id, p.index, p.revision, p.text) for p in passages]


@pytest.mark.parametrize("mode", MODES)
def test_every_search_ranks_as_the_reference(loom: Loom, mode: Mode) -> None:
    """Current and as of every position, every filter and limit: the reference's answer."""
    kb = open_knowledge_base(loom, "runbooks", embedder=HashingEmbedder(), min_score=FLOOR)
    positions = _history(kb, loom)
    views = [(kb.passages(), kb.search)]
    views += [(kb.as_of(p).passages(), kb.as_of(p).search) for p in positions]
    asked = 0
    for passages, search in views:
        for question in QUESTIONS:
            for filter in FILTERS:
                for limit in LIMITS:
                    want = _reference(passages, question, mode, limit, filter)
                    got = search(question, mode=mode, limit=limit, filter=filter)
                    assert _named(got) == _named(want), (question, filter, limit)
                    asked += bool(want)
    assert asked > 100  # the questions find something, or this test checks little


def test_the_reference_sees_the_ties_it_is_meant_to(loom: Loom) -> None:
    """The corpus really has exact ties whose id order as text is not their write order."""
    kb = open_knowledge_base(loom, "runbooks")
    _history(kb, loom)
    tied = [p.doc_id for p in kb.search(TIED, limit=10) if p.text == TIED]
    assert tied == ["t1", "t10", "t2", "t9"]
