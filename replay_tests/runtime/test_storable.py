"""The one storage rule: text every store holds faithfully, JSON values that round-trip."""

from __future__ import annotations

import pytest

from loom_runtime.storable import json_problem, storable_text, text_problem


@pytest.mark.parametrize("text", ["", "plain", "ünïcödé ✓", "\U0001f600"])
def test_clean_text_passes_and_is_returned_unchanged(text: str) -> None:
    assert text_problem(text) is None
    assert storable_text(text) is text


@pytest.mark.parametrize(("text", "word"), [("a\x00b", "NUL"), ("a\ud800b", "surrogate")])
def test_nul_and_lone_surrogates_are_refused_and_escaped(text: str, word: str) -> None:
    problem = text_problem(text)
    assert problem is not None and word in problem
    escaped = storable_text(text)
    assert text_problem(escaped) is None
    assert escaped.startswith("a\\") and escaped.endswith("b")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": [1, 2, {"b": float("nan")}]}, ".meta['a'][2]['b']"),
        ({"a": (1, 2)}, ".meta['a']"),
        ({1: "x"}, ".meta key 1"),
        ({"k\x00": "x"}, ".meta key 'k\\x00'"),
        (["ok", "bad\ud800"], ".meta[1]"),
        ({"a": b"bytes"}, ".meta['a']"),
    ],
)
def test_json_problem_names_the_first_bad_place(value: object, path: str) -> None:
    found = json_problem(value, ".meta")
    assert found is not None
    assert found[0] == path


def test_plain_json_passes_and_deep_nesting_does_not_recurse() -> None:
    assert json_problem({"a": [1, 2.5, True, None, "x", {"b": []}]}) is None
    deep: object = "leaf"
    for _ in range(50_000):
        deep = [deep]
    assert json_problem(deep) is None
