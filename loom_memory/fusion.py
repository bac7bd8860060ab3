"""Reciprocal rank fusion: one ranking from several, by rank alone.

BM25 scores and cosine similarities live on unrelated scales (a BM25 of 12 and a cosine of
0.4 cannot be added), so a hybrid search fuses the RANKS: each item scores
``sum(1 / (k + rank))`` over the rankings it appears in (rank from 1), best first
(Cormack, Clarke and Buettcher 2009; ``k = 60`` as there and in most engines). An item found
by both rankings beats one found high by only one of them unless that one is far ahead.
Ties keep the order in which items were first met, ranking by ranking, so the result depends
on nothing but the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from loom_memory.errors import InvalidArgumentError

T = TypeVar("T")

RRF_K = 60
"""The rank constant: larger flattens the advantage of the very top ranks."""


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[T]],
    *,
    identity: Callable[[T], Hashable],
    limit: int,
    k: int = RRF_K,
) -> list[T]:
    """The best ``limit`` items of ``rankings`` fused by reciprocal rank.

    ``identity`` says when two rankings name the same item, as a value that hashes (a passage
    id, an entry's id, or its encoded JSON: an entry's content is often a dict, which does
    not); the first occurrence met is the one returned. An item listed twice in one ranking
    counts at its best rank there.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgumentError(
            f"limit must be a positive int, got {limit!r}", parameter="limit"
        )
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidArgumentError(f"k must be an int >= 0, got {k!r}", parameter="k")
    parts: dict[Hashable, list[float]] = {}
    first: dict[Hashable, T] = {}
    for ranking in rankings:
        seen: set[Hashable] = set()
        for rank, item in enumerate(ranking, start=1):
            name = identity(item)
            try:
                if name in seen:
                    continue
            except TypeError:  # unhashable
                raise InvalidArgumentError(
                    f"identity must return a value that hashes (an id, a str), not a "
                    f"{type(name).__name__}",
                    parameter="identity",
                ) from None
            seen.add(name)
            first.setdefault(name, item)
            parts.setdefault(name, []).append(1.0 / (k + rank))
    # Summed exactly (fsum): added in ranking order, the same ranks in another order could
    # round apart, and a tie was broken by rounding instead of by the first item met.
    scores = {name: math.fsum(terms) for name, terms in parts.items()}
    order = {name: n for n, name in enumerate(first)}
    best = sorted(scores, key=lambda name: (-scores[name], order[name]))
    return [first[name] for name in best[:limit]]
