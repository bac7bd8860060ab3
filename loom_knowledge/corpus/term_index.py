"""`TermIndex`: the lexical ranking of a corpus the hybrid retriever already holds in memory.

A hybrid search asks the lexical ranking for 50 passages (the fusion depth), and the store
answers by scoring rows in SQL: about 8 us per row scored, and at 100,000 passages a 50-deep
search scores thousands (pruning keeps more rows at depth 50 than at 10, ADR 0056), several
times the whole latency target. The retriever holds every passage of the corpus it searches
anyway (their vectors are stacked per log position), so it also holds their term counts, in
numpy, and ranks them itself: each query term's postings are one slice, summed into the rows'
scores in a few vectorised steps.

The answer is the store's, not an approximation of it: the same terms (the store's own
tokenizer over the same searchable text), the same statistics (``N`` is every passage of the
corpus, ``df`` the passages holding the term), the same integer score
(:func:`~loom_memory.idf_weight`, then ``idf * 11 tf // (5 tf + 6)`` per term, summed
in int64, exact in any order), the same tie-break (passage id as text) and no cap on depth,
like the store's uncapped search the knowledge base asks (a filter reads as deep as it must;
:func:`~loom_knowledge.corpus.retrieval.filtered` caps the answer, on both paths alike).
Passage ids must be unique among the rows, as they are among a corpus's current passages at
any position; :meth:`TermIndex.build` returns None otherwise and the caller asks the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from loom_memory import idf_weight

Counts = NDArray[np.int64]
"""One passage's distinct terms (vocabulary numbers) and how often each occurs, packed as
``number << 32 | count`` in one array: a corpus caches one per distinct text."""

_COUNT_BITS = 32


def term_counts(terms: Sequence[str], vocabulary: dict[str, int]) -> Counts:
    """The :data:`Counts` of a passage whose indexed terms are ``terms``; new terms are
    numbered into ``vocabulary`` (which only grows, so a number never changes meaning)."""
    numbers = np.fromiter(
        (vocabulary.setdefault(term, len(vocabulary)) for term in terms), np.int64, len(terms)
    )
    distinct, counts = np.unique(numbers, return_counts=True)
    return (distinct << _COUNT_BITS) | counts.astype(np.int64)


class TermIndex:
    """Postings of ``rows`` passages grouped by term, ranked as the store ranks them."""

    def __init__(
        self,
        *,
        vocabulary: Mapping[str, int],
        starts: NDArray[np.int64],
        rows: NDArray[np.int32],
        frequencies: NDArray[np.uint32],
        tie: NDArray[np.int64],
    ) -> None:
        self._vocabulary = vocabulary
        self._starts = starts
        self._rows = rows
        self._frequencies = frequencies
        self._tie = tie
        self.size = len(tie)
        self.scored = 0
        """Postings summed by this index's searches so far (tests watch that it answers)."""

    @classmethod
    def build(
        cls, ids: Sequence[str], counts: Sequence[Counts], vocabulary: Mapping[str, int]
    ) -> TermIndex | None:
        """The index of the passages whose ids are ``ids`` and term counts ``counts`` (every
        passage of the corpus: each one counts in ``N``); None if an id repeats, because the
        store would then break a tie by append order, which this index does not know."""
        if len(set(ids)) != len(ids):
            return None
        packed = np.concatenate(counts) if counts else np.empty(0, np.int64)
        numbers = packed >> _COUNT_BITS
        frequencies = (packed & ((1 << _COUNT_BITS) - 1)).astype(np.uint32)
        lengths = np.fromiter((len(c) for c in counts), np.int64, len(counts))
        rows = np.repeat(np.arange(len(counts), dtype=np.int32), lengths)
        order = np.argsort(numbers, kind="stable")
        per_term = np.bincount(numbers, minlength=len(vocabulary))
        starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(per_term)])
        tie = np.empty(len(ids), np.int64)
        tie[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids), dtype=np.int64)
        return cls(
            vocabulary=vocabulary,
            starts=starts,
            rows=rows[order],
            frequencies=frequencies[order],
            tie=tie,
        )

    def search(self, terms: Sequence[str], limit: int) -> list[int]:
        """The rows of the best ``limit`` passages holding any of the distinct query
        ``terms``, best first, ties by passage id: the store's (uncapped) answer."""
        scores = np.zeros(self.size, np.int64)
        found = np.zeros(self.size, bool)
        for term in terms:
            number = self._vocabulary.get(term)
            if number is None or number + 1 >= len(self._starts):
                continue  # numbered after this index was built: no passage here holds it
            begin, end = self._starts[number], self._starts[number + 1]
            if begin == end:
                continue
            rows, tf = self._rows[begin:end], self._frequencies[begin:end].astype(np.int64)
            weight = idf_weight(self.size, int(end - begin))
            scores[rows] += weight * 11 * tf // (5 * tf + 6)
            found[rows] = True
            self.scored += int(end - begin)
        matched = np.flatnonzero(found)
        if len(matched) > limit:
            # Every row scoring at least the limit-th best score, boundary ties included.
            floor = -np.partition(-scores[matched], limit - 1)[limit - 1]
            matched = matched[scores[matched] >= floor]
        best = np.lexsort((self._tie[matched], -scores[matched]))[:limit]
        return [int(row) for row in matched[best]]
