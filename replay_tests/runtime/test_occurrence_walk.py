"""Occurrence numbering stays O(1) per call when it skips the walk past taken occurrences.

``_occurrence`` walks ``_seen`` past occurrences taken ahead of it only once one may have been
taken (``_taken_ahead``). Without the walk the keys are the same but every later call of the
key scans from a stale ``_seen``: so what is pinned is ``_seen`` itself, not a timing.
"""

from __future__ import annotations

from typing import Any

from loom_runtime import FlowContext, Loom


def _numbering(loom: Loom, calls: list[str]) -> tuple[list[str], dict[str, int]]:
    seen: dict[str, Any] = {}

    @loom.flow("numbering")
    def numbering(ctx: FlowContext) -> None:
        for key in calls:
            ctx.decide(key, lambda: None)
        seen.update(ctx._seen)

    run = loom.run("numbering")
    return list(loom.execution(run.execution_id).decisions), seen


def test_a_callers_own_numbered_key_is_walked_past(sqlite_url: str) -> None:
    with Loom(sqlite_url) as loom:
        keys, seen = _numbering(loom, ["k#2", "k", "k", "k"])
    assert keys == ["k#2", "k", "k#3", "k#4"]
    assert seen["k"] == 4  # walked past the caller's "k#2" at once, not scanned on each call


def test_in_order_keys_number_as_before_without_the_walk(sqlite_url: str) -> None:
    with Loom(sqlite_url) as loom:
        keys, seen = _numbering(loom, ["a", "b", "a", "a", "b"])
    assert keys == ["a", "b", "a#2", "a#3", "b#2"]
    assert seen == {"a": 3, "b": 2}
