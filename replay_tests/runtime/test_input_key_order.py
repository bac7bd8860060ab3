"""ADR 0002, amended: an input whose only change is the order of its keys shows that order.

Inputs are compared as the bytes they encode to, so ``{"model": .., "temperature": ..}``
asked as ``{"temperature": .., "model": ..}`` is a changed input (for a model request the
order of, say, a tool schema's properties is what the model reads). The diff sorted keys
before rendering, so it came out empty: a divergence with nothing to read.
"""

from __future__ import annotations

from typing import Any

from loom_runtime import DecisionInputChangedError, Loom
from loom_runtime.diff import diff


def build(url: str, *, temperature_first: bool) -> Loom:
    loom = Loom(url)

    @loom.flow("ask")
    def ask(ctx: Any) -> str:
        asked = {"model": "m", "temperature": 0}
        if temperature_first:
            asked = {"temperature": 0, "model": "m"}
        return str(ctx.decide("ask", lambda: "an answer", input=asked))

    return loom


def test_a_reordered_input_is_a_divergence_whose_diff_shows_the_order(sqlite_url: str) -> None:
    with build(sqlite_url, temperature_first=False) as loom:
        run = loom.run("ask")
    with build(sqlite_url, temperature_first=True) as fresh:
        result = fresh.replay(run.execution_id)
    [finding] = result.divergences
    assert isinstance(finding, DecisionInputChangedError)
    lines = finding.diff.splitlines()
    assert "only the order of keys differs" in lines[0]
    assert '-  "model": "m",' in lines and '+  "model": "m"' in lines


def test_values_that_differ_are_diffed_with_sorted_keys_as_before() -> None:
    """The control: a change of value keeps the sorted rendering (no order noise)."""
    shown = diff(b'{"b":1,"a":2}', b'{"a":3,"b":1}', label="input")
    assert "order" not in shown
    assert '-  "a": 2,' in shown.splitlines() and '+  "a": 3,' in shown.splitlines()


def test_the_same_value_spelled_otherwise_is_shown_by_its_bytes() -> None:
    """Neither values nor order differ, only the spelling (an escape, as an edited or
    foreign recording may hold): the bytes around the first difference are shown."""
    shown = diff(b'{"a":"\\u00e9"}', '{"a":"\u00e9"}'.encode(), label="input")
    assert shown.startswith("input written differently; they differ from byte 6:")
    assert "order" not in shown
