"""A replay asking its keys in the recorded order takes the short numbering path, and every
divergence rule still fires through it.

``_occurrence`` answers at once when nothing was taken ahead and the next occurrence of the
key is free and recorded with this input (or not recorded): the usual call of a replay. Any
other call (a changed input, a key holding ``#``, an occurrence asked out of order) takes the
full walk as before. What is pinned: the short path is the one a plain replay uses (counted),
each state and each value is decoded once, and each rule (unrecorded key, changed input,
occurrences matched by input whatever their order, unused decisions) fires.
"""

from __future__ import annotations

import gc
from typing import Any

import msgspec
import pytest

from loom_runtime import (
    DecisionInputChangedError,
    FlowContext,
    Loom,
    UnrecordedDecisionError,
    UnusedDecisionsError,
    codec,
    context,
)
from loom_runtime.storage import mapper

VALUES = [{"index": index, "text": f"value {index}"} for index in range(5)]


def _record(url: str, asks: list[tuple[str, object]]) -> Any:
    """Record a flow asking ``asks`` (key, input) in order; each answer is the next value."""
    with Loom(url) as loom:

        @loom.flow("asks")
        def flow(ctx: FlowContext) -> int:
            for index, (key, input) in enumerate(asks):
                ctx.decide(key, lambda index=index: VALUES[index % len(VALUES)], input=input)
            return 0

        return loom.run("asks").execution_id


def _replay(url: str, execution_id: Any, asks: list[tuple[str, object]]) -> list[Any]:
    """Replay with code asking ``asks`` instead; the divergences found."""
    with Loom(url) as loom:

        @loom.flow("asks")
        def flow(ctx: FlowContext) -> int:
            for key, input in asks:
                ctx.decide(key, lambda: pytest.fail("a replay computed"), input=input)
            return 0

        return list(loom.replay(execution_id).divergences)


def _types(divergences: list[Any]) -> list[type]:
    return [type(found) for found in divergences]


IN_ORDER = [("a", None), ("b", {"q": 1}), ("a", {"q": 2}), ("a", None), ("b", None)]


def test_a_replay_in_recorded_order_never_takes_the_walk(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call of an in-order replay is numbered by the short path: ``_numbered`` is called
    only by ``_input`` guessing the occurrence of a call with an input, never by the walk
    (which calls it for every call it takes), and the replay is identical."""
    execution_id = _record(sqlite_url, IN_ORDER)
    walked: list[tuple[str, int]] = []
    numbered = context._numbered

    def counting(key: str, occurrence: int) -> str:
        walked.append((key, occurrence))
        return numbered(key, occurrence)

    monkeypatch.setattr(context, "_numbered", counting)
    assert _replay(sqlite_url, execution_id, IN_ORDER) == []
    assert walked == [("b", 1), ("a", 2)]  # the two calls with an input, guessed by _input


def test_each_state_and_each_value_is_decoded_once(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading decodes each decision's state once, by its class's current decoder, and the
    replay decodes each recorded value once, when its ``decide`` asks for it."""
    execution_id = _record(sqlite_url, IN_ORDER)
    states: list[bytes] = []
    values: list[bytes] = []
    current_decoder, decode = mapper.current_decoder, codec.decode

    class Counting:
        def __init__(self, decoder: msgspec.json.Decoder[Any]) -> None:
            self.decoder = decoder

        def decode(self, state: bytes) -> Any:
            states.append(state)
            return self.decoder.decode(state)

    def counting_decoder(cls: type) -> tuple[Any, int]:
        decoder, version = current_decoder(cls)
        return Counting(decoder), version

    def counting_decode(raw: Any, *, type: Any = Any) -> Any:
        values.append(bytes(raw))
        return decode(raw, type=type)

    def counting_decode_untyped(raw: Any) -> Any:
        values.append(bytes(raw))
        return decode(raw)

    monkeypatch.setattr(mapper, "current_decoder", counting_decoder)
    monkeypatch.setattr(codec, "decode", counting_decode)
    monkeypatch.setattr(codec, "decode_untyped", counting_decode_untyped)
    assert _replay(sqlite_url, execution_id, IN_ORDER) == []
    recorded = [msgspec.json.encode(value) for value in VALUES]
    assert len(states) == len(IN_ORDER)
    assert sorted(value for value in values if value in recorded) == sorted(recorded)


def test_an_unrecorded_key_diverges(sqlite_url: str) -> None:
    execution_id = _record(sqlite_url, IN_ORDER)
    found = _replay(sqlite_url, execution_id, [*IN_ORDER[:2], ("c", None)])
    assert _types(found) == [UnrecordedDecisionError]
    assert found[0].key == "c"


def test_a_changed_input_diverges_at_its_occurrence(sqlite_url: str) -> None:
    execution_id = _record(sqlite_url, IN_ORDER)
    found = _replay(sqlite_url, execution_id, [*IN_ORDER[:2], ("a", {"q": 3}), *IN_ORDER[3:]])
    assert _types(found) == [DecisionInputChangedError]
    assert found[0].key == "a#2"


def test_occurrences_asked_out_of_order_match_by_input(sqlite_url: str) -> None:
    """The second and third ``a`` swapped: the short path sees the next occurrence recorded
    with another input and hands the call to the walk, which matches it by input."""
    execution_id = _record(sqlite_url, IN_ORDER)
    swapped = [IN_ORDER[0], IN_ORDER[1], IN_ORDER[3], IN_ORDER[2], IN_ORDER[4]]
    assert _replay(sqlite_url, execution_id, swapped) == []


def test_one_call_too_few_or_too_many_diverges(sqlite_url: str) -> None:
    execution_id = _record(sqlite_url, IN_ORDER)
    assert _types(_replay(sqlite_url, execution_id, IN_ORDER[:-1])) == [UnusedDecisionsError]
    found = _replay(sqlite_url, execution_id, [*IN_ORDER, ("a", None)])
    assert _types(found) == [UnrecordedDecisionError]
    assert found[0].key == "a#4"


def test_a_callers_numbered_key_turns_the_short_path_off(sqlite_url: str) -> None:
    """A caller's own ``a#2`` takes that occurrence: later plain ``a`` calls skip it."""
    asks: list[tuple[str, object]] = [("a#2", None), ("a", None), ("a", None)]
    execution_id = _record(sqlite_url, asks)
    with Loom(sqlite_url) as loom:
        assert list(loom.execution(execution_id).decisions) == ["a#2", "a", "a#3"]
    assert _replay(sqlite_url, execution_id, asks) == []


def test_loading_and_replaying_an_execution_runs_no_garbage_collection(
    sqlite_url: str,
) -> None:
    """The rows read and the decisions held (one each per event) are not tracked by the
    collector, so a replay of thousands of decisions does not trigger one: with tracked rows
    and decisions it ran every few hundred rows, walking the whole heap each time."""
    size = 2_000
    execution_id = _record(sqlite_url, [(f"k{index % 7}", None) for index in range(size)])
    runs: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    with Loom(sqlite_url) as loom:

        @loom.flow("asks")
        def flow(ctx: FlowContext) -> int:
            for index in range(size):
                ctx.decide(f"k{index % 7}", lambda: pytest.fail("a replay computed"))
            return 0

        threshold = gc.get_threshold()
        gc.set_threshold(700, 10, 10)  # CPython's default, whatever the session set
        gc.collect()
        gc.callbacks.append(count)
        try:
            result = loom.replay(execution_id)
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*threshold)
    assert result.identical
    assert runs == []
