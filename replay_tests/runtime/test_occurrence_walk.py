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


PREFIX = ["recorded"]
"""The text each ``classify`` input starts with: changed before the replay, as a prompt is."""


def _lookups_to_replay(loom: Loom, n: int, monkeypatch: Any) -> int:
    """How many occurrence keys the replay of ``n`` decisions, every input changed, builds."""
    import loom_runtime.context

    @loom.flow("batch")
    def batch(ctx: FlowContext, n: int) -> list[int]:
        return [ctx.decide("classify", lambda i=i: i, input=f"{PREFIX[0]} {i}") for i in range(n)]

    PREFIX[0] = "recorded"
    run = loom.run("batch", n=n)
    PREFIX[0] = "changed"
    built = 0
    numbered = loom_runtime.context._numbered

    def counted(key: str, occurrence: int) -> str:
        nonlocal built
        built += 1
        return numbered(key, occurrence)

    monkeypatch.setattr(loom_runtime.context, "_numbered", counted)
    result = loom.replay(run.execution_id)
    monkeypatch.undo()
    assert not result.identical
    return built


def test_a_replay_whose_every_input_changed_numbers_in_linear_time(
    sqlite_url: str, monkeypatch: Any
) -> None:
    """A call whose next occurrence was recorded with another input looks for a later one
    recorded with its own. That look walked every later occurrence, on every call: a loop
    whose prompt changed (or a crafted bundle) made a replay quadratic, 100 s for 16,000
    decisions. Counted, not timed: doubling the decisions must not quadruple the lookups."""
    with Loom(sqlite_url) as loom:
        small = _lookups_to_replay(loom, 300, monkeypatch)
    with Loom(sqlite_url.replace("loom.db", "large.db")) as loom:
        large = _lookups_to_replay(loom, 600, monkeypatch)
    assert large <= 2.5 * small, (small, large)


def _lookups_with_a_gap(n: int, monkeypatch: Any) -> int:
    """How many occurrence keys numbering ``n`` calls builds when the recording lacks the
    key's first occurrence (a crafted bundle; or a reopening that dropped a failed first
    call) and every input changed."""
    from uuid import uuid4

    import msgspec

    import loom_runtime.context
    from loom_runtime.execution import Decision
    from loom_runtime.replay import Replayer

    numbered = loom_runtime.context._numbered
    decisions = {}
    for occurrence in range(2, n + 1):
        key = numbered("classify", occurrence)
        recorded_input = msgspec.Raw(msgspec.json.encode(f"recorded {occurrence}"))
        decisions[key] = Decision(key, None, recorded_input, msgspec.Raw(b"1"))
    replayer = Replayer(decisions, live=frozenset(), redactor=None)
    ctx = loom_runtime.context._Context(replayer, execution_id=uuid4(), flow="f")
    built = 0

    def counted(key: str, occurrence: int) -> str:
        nonlocal built
        built += 1
        return numbered(key, occurrence)

    monkeypatch.setattr(loom_runtime.context, "_numbered", counted)
    keys = [ctx._slot("classify", f"changed {i}", None).key for i in range(1, n + 1)]
    monkeypatch.undo()
    assert keys[:3] == ["classify", "classify#2", "classify#3"]  # numbered in order
    return built


def test_numbering_past_a_gap_in_the_recording_stays_linear(monkeypatch: Any) -> None:
    """The index covered the occurrences recorded one after another from the first; with
    the first missing, every look walked the rest again (10.9 s for 8,000 calls)."""
    small, large = _lookups_with_a_gap(300, monkeypatch), _lookups_with_a_gap(600, monkeypatch)
    assert large <= 2.5 * small, (small, large)
