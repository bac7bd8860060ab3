"""Exact top-k BM25 for an OR query, scoring a small part of the rows the query matches.

Why: an OR-ed query of ordinary words matches a large share of a store (three words of a
manual match ~15% of 100,000 entries), and FTS5 computes ``bm25()`` for EVERY matching row
before it can sort. Scoring is the cost; finding the rows is cheap. So we only score the rows
that could still enter the top ``k``, and prove the rest cannot - the idea of MaxScore (Turtle
and Flood, 1995), expressed in FTS5 match expressions so that FTS5's own ``bm25()`` does all
the scoring and the answer is the plain OR query's answer: the same rows, scores and order.
"The same" up to the last bit of a float: FTS5 adds a row's per-term scores in the order of
the statement's phrases, so a row scored by a conjunction can differ from the OR query's sum in
the last place, and two rows whose scores are equal on paper can then swap (each search of a
given store and query still answers the same every time).

The bound. FTS5's BM25 sums, over the query terms a row contains,
``idf(t) * f * (k1 + 1) / (f + k1 * (1 - b + b * len / avglen))``, and that fraction is below
``k1 + 1`` for any frequency ``f`` and length, so a row containing exactly the terms ``S``
scores less than ``ub(S) = (k1 + 1) * sum(idf(t) for t in S)``. ``idf`` needs only each term's
document count and the row count, both of which FTS5 keeps (see :class:`TermStats`).

Two plans, both exact:

* **Term subsets** (a few terms): run the conjunction of each subset ``S`` of the terms, in
  falling ``ub(S)``. A conjunction query's ``bm25()`` covers only the phrases in it, so it
  scores rows containing exactly ``S`` exactly and rows containing more terms too low; those
  are scored exactly by the superset's query, which ran earlier (a superset's bound is never
  lower). The ``k``-th best score seen so far, ``theta``, is a lower bound of the true ``k``-th
  score, so once the next subset's bound is below ``theta`` no unseen row can enter: stop.
  A query of rare words ends after one or two conjunctions of a few rows each. With three or
  four terms, the subsets holding the head term (the rarest of the first, second and last)
  run as one statement, ``head AND (others OR-ed)``, and ``head`` alone: FTS5's ``bm25()``
  counts every phrase's documents in every statement, so a common word was counted once per
  subset. Of four terms, the three left take a head step of their own the same way.
* **Essential terms** (many terms, where subsets would be too many): sort the terms from the
  most to the least common; the common prefix ``C`` whose summed bound is below ``theta`` is
  non-essential, since a row with only those terms cannot enter. Score every row containing an
  essential term ``E``: ``E-or`` scores rows without any ``C`` term exactly, ``E-or AND C-or``
  scores the others exactly. Start with ``E`` = the rarest term; when the result's ``theta``
  does not yet cover ``C``, move terms from ``C`` to ``E`` and run again (at worst the plain OR
  query).

Rows are merged by their id, keeping the highest score seen (every score seen is exact or too
low, never too high), and ordered by score, then id: the plain query's ``ORDER BY``.

A backend that can score a row on ALL the query terms while selecting it by only some of them
(PostgreSQL's postings, :mod:`loom_memory.postgres_terms`) uses :func:`top_k_scored`: the same
essential-terms argument with one statement per step, whose answer is the final one as it comes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

K1 = 1.2
"""FTS5's ``bm25()`` k1 (fixed in SQLite's source, not configurable)."""

SUBSET_TERMS = 4
"""Queries with at most this many terms use the subset plan: at most 2**4 - 1 = 15 conjunctions,
and in practice two or three. Longer queries use the essential-terms plan."""

MARGIN = 1e-9
"""Relative slack for comparing a Python bound with a score computed in C: a bound must be
CLEARLY below theta to prune, so a row that would tie theta (and could win on id) is scored."""


@dataclass(frozen=True)
class Hit:
    """A row a match expression returned: its id (the tie-breaker), score (higher is better)."""

    rowid: int
    score: float


@dataclass(frozen=True)
class TermStats:
    """What the bound needs: how many rows the index holds and how many contain each term."""

    rows: int
    documents: dict[str, int]
    """Rows containing each term; a term absent here is in no row."""
    _bounds: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Each term's bound, computed once: a plan compares subsets' bounds many times."""

    def upper_bound(self, terms: Sequence[str]) -> float:
        """An upper bound of the score of a row containing exactly ``terms`` (FTS5's idf)."""
        return sum(self._bound(term) for term in terms)

    def _bound(self, term: str) -> float:
        bound = self._bounds.get(term)
        if bound is None:
            hits = self.documents[term]
            # FTS5 clamps a non-positive idf (a term in over half the rows) to 1e-6.
            idf = max(math.log((self.rows - hits + 0.5) / (hits + 0.5)), 1e-6)
            bound = self._bounds[term] = (K1 + 1.0) * idf
        return bound


Run = Callable[[str], Sequence[Hit]]
"""Runs one FTS5 match expression; returns its best ``k`` hits (the caller's filters applied)."""


def top_k(terms: Sequence[str], stats: TermStats, k: int, run: Run) -> list[int]:
    """The rowids of the best ``k`` rows matching any of ``terms``, best first, exactly as
    ``run`` of the OR expression would rank them.

    ``run`` must apply every filter of the search (key, ``where``) and return its best ``k``:
    the bound argument holds for any subset of rows, so filters need no special care.
    """
    present = [term for term in terms if stats.documents.get(term, 0) > 0]
    if not present:
        return []
    best: dict[int, Hit] = {}
    if len(present) <= SUBSET_TERMS:
        _subsets(present, stats, k, run, best)
    else:
        _essential_terms(present, stats, k, run, best)
    return [hit.rowid for hit in _ranked(best)[:k]]


Score = Callable[[Sequence[str]], Sequence[Hit]]
"""Returns the best ``k`` rows containing any of the given (essential) terms, each scored on
ALL the query terms, best first in the plain query's order (the caller's filters applied)."""


def top_k_scored(terms: Sequence[str], stats: TermStats, k: int, score: Score) -> list[Hit]:
    """The best ``k`` rows matching any of ``terms``, best first, exactly as ``score`` of all
    the terms would rank them: the essential terms plan, each step answered by one ``score``.

    ``score(E)`` ranks only the rows holding an essential term, but ranks them by every term,
    so its hits are exact and its ``k``-th score ``theta`` is a lower bound of the final one. A
    row holding only the common terms ``C`` (the rest) scores below ``ub(C)``; once
    ``ub(C) < theta`` no such row can enter, ties included, and ``score(E)``'s hits are the
    answer. Otherwise the common terms the bound cannot exclude become essential: at worst
    every term is, which is the plain query. While fewer than ``k`` rows hold an essential
    term there is no ``theta`` yet, and only the next rarest term joins them.
    """
    present = [term for term in dict.fromkeys(terms) if stats.documents.get(term, 0) > 0]
    by_commonness = sorted(present, key=lambda term: stats.upper_bound([term]))
    if not by_commonness:
        return []
    split = len(by_commonness) - 1  # C = by_commonness[:split], E = the rest
    while True:
        hits = list(score(by_commonness[split:])[:k])
        if split == 0:
            return hits
        if len(hits) < k:
            split -= 1  # fewer than k rows hold an essential term: the next rarest joins them
            continue
        theta = hits[k - 1].score * (1.0 - MARGIN)
        if stats.upper_bound(by_commonness[:split]) < theta:
            return hits
        while split > 0 and stats.upper_bound(by_commonness[:split]) >= theta:
            split -= 1


def _subsets(terms: list[str], stats: TermStats, k: int, run: Run, best: dict[int, Hit]) -> None:
    rest = terms
    if len(set(terms)) == len(terms):
        # Each head step leaves the rows holding none of the heads so far; a four-term query
        # takes a second head from the three terms left rather than running their seven
        # subsets. For those rows the taken heads' parts are 0.0 (x + 0.0 == x), so scores over
        # the rest's phrases, in the query's order, are exact; rows holding a taken head score
        # too low there, never too high. Once the rest's bound is below theta, stop.
        while len(rest) > 2:
            if rest is not terms and stats.upper_bound(rest) < _theta(best, k) * (1.0 - MARGIN):
                return
            rest = _head(rest, stats, k, run, best)
    subsets = [s for size in range(1, len(rest) + 1) for s in combinations(rest, size)]
    subsets.sort(key=stats.upper_bound, reverse=True)
    for subset in subsets:
        if stats.upper_bound(subset) < _theta(best, k) * (1.0 - MARGIN):
            return
        _merge(best, run(" AND ".join(map(_phrase, subset))))


def _head(terms: list[str], stats: TermStats, k: int, run: Run, best: dict[int, Hit]) -> list[str]:
    """Score every row holding the head term (the rarest of the first, second and last term)
    in at most two statements; return the other terms, whose subsets cover every row not yet
    scored.

    ``head AND (the others OR-ed)`` names every query term once, so its ``bm25()`` scores each
    row it matches exactly; ``head`` alone scores exactly the rows holding no other term, and
    runs only if their bound reaches ``theta``. The subsets holding the head would each have
    run as a statement of their own, and FTS5's ``bm25()`` counts every phrase's documents over
    the whole index in every statement that matches a row: a common word was counted once per
    subset. ``bm25()`` adds the phrases' parts in the expression's order, so the head is a
    term whose move to the front (or, the last term, staying at the end) changes no addition
    but the first: the second term's part swaps places with the first's, and ``x + y == y + x``
    holds exactly in floating point, where ``(x + y) + z == (x + z) + y`` does not (so a third
    term, whose part would move past two, is never the head). Every score is then the OR
    query's, bit for bit.
    """
    head = max((terms[0], terms[1], terms[-1]), key=lambda term: stats.upper_bound([term]))
    others = [term for term in terms if term != head]
    both = (_phrase(head), _any(others))
    _merge(best, run(" AND ".join(reversed(both) if head == terms[-1] else both)))
    if stats.upper_bound([head]) >= _theta(best, k) * (1.0 - MARGIN):
        _merge(best, run(_phrase(head)))
    return others


def _essential_terms(
    terms: list[str], stats: TermStats, k: int, run: Run, best: dict[int, Hit]
) -> None:
    by_commonness = sorted(terms, key=lambda term: stats.upper_bound([term]))
    split = len(by_commonness) - 1  # C = by_commonness[:split], E = the rest
    while True:
        common, essential = by_commonness[:split], by_commonness[split:]
        any_essential = _any(essential)
        _merge(best, run(any_essential))
        if not common:
            return
        _merge(best, run(f"{any_essential} AND {_any(common)}"))
        theta = _theta(best, k) * (1.0 - MARGIN)
        if stats.upper_bound(common) < theta:
            return
        while split > 0 and stats.upper_bound(by_commonness[:split]) >= theta:
            split -= 1


def _theta(best: dict[int, Hit], k: int) -> float:
    """The k-th best score seen: a lower bound of the final k-th score (0 until k are seen)."""
    ranked = _ranked(best)
    return ranked[k - 1].score if len(ranked) >= k else 0.0


def _merge(best: dict[int, Hit], hits: Sequence[Hit]) -> None:
    for hit in hits:
        seen = best.get(hit.rowid)
        if seen is None or hit.score > seen.score:
            best[hit.rowid] = hit


def _ranked(best: dict[int, Hit]) -> list[Hit]:
    return sorted(best.values(), key=lambda hit: (-hit.score, hit.rowid))


def _any(terms: Sequence[str]) -> str:
    return "(" + " OR ".join(map(_phrase, terms)) + ")"


def _phrase(term: str) -> str:
    """Quote ``term`` so FTS5 operators in it (NOT, OR, *, ^, :) are plain words."""
    return '"' + term.replace('"', '""') + '"'
