"""`position_counts.bucketed` against the definition it implements (ADR 0064).

`bucketed` counts a bucket's terms from its rows' term sets at once instead of summing one
counter per position into the coarser levels. Whatever it does inside, its upserts must be the
definition's: every change fanned out to each level's bucket, summed per (key, level, bucket)
and per (key, term, level, bucket), zeros left out, sorted as tuples. Random batches here mix
keys, positions on and across block edges, ends that cancel appends and ends alone.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from loom_memory.position_counts import SHIFTS, Change, bucketed


def _reference(
    changes: list[Change],
) -> tuple[list[tuple[str, int, int, int]], list[tuple[str, str, int, int, int]]]:
    """The upserts by the definition: one change, one level, one term at a time."""
    rows: Counter[tuple[str, int, int]] = Counter()
    terms: Counter[tuple[str, str, int, int]] = Counter()
    for key, position, sign, held in changes:
        for level, shift in enumerate(SHIFTS):
            rows[key, level, position >> shift] += sign
            for term in held:
                terms[key, term, level, position >> shift] += 1 if sign > 0 else -1
    return (
        sorted((*where, n) for where, n in rows.items() if n),
        sorted((*where, df) for where, df in terms.items() if df),
    )


def _changes(rng: random.Random) -> list[Change]:
    spread = rng.choice([2, 300, 70_000, 300_000])  # one block, level-1 edges, level-2 edges
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    return [
        (
            rng.choice(["k:a", "k:b", "k"]),
            rng.randrange(spread),
            rng.choice([1, -1]),
            set(rng.sample(words, rng.randrange(len(words) + 1))),
        )
        for _ in range(rng.randrange(30))
    ]


@pytest.mark.parametrize("seed", range(20))
def test_bucketed_equals_the_definition(seed: int) -> None:
    """Random batches: the same upserts, in the same order, as the definition gives."""
    rng = random.Random(seed)
    for _ in range(100):
        changes = _changes(rng)
        assert bucketed(changes) == _reference(changes)


def test_an_end_and_an_append_cancel_to_nothing() -> None:
    """A revision that changes no term writes no term bucket and no row bucket."""
    held = {"alpha", "beta"}
    assert bucketed([("k", 7, -1, held), ("k", 7, 1, set(held))]) == ([], [])


def test_ends_alone_are_negative_buckets() -> None:
    """Ends with no append are written as negative changes at each level."""
    rows, terms = bucketed([("k", 300, -1, {"alpha"}), ("k", 301, -1, {"alpha", "beta"})])
    assert rows == [("k", 0, 300, -1), ("k", 0, 301, -1), ("k", 1, 1, -2), ("k", 2, 0, -2)]
    assert ("k", "alpha", 1, 1, -2) in terms
    assert ("k", "beta", 2, 0, -1) in terms
