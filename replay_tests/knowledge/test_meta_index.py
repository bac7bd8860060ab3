"""`MetaIndex` passes exactly the passages `matches` passes, on metas built to tell them apart."""

from __future__ import annotations

from typing import Any

import pytest

from loom_knowledge.corpus.retrieval import MetaIndex, check_filter, matches

METAS: list[dict[str, Any] | None] = [
    None,
    {},
    {"team": "sre"},
    {"team": "SRE"},
    {"team": ["sre", "dba"]},
    {"team": [["sre"]]},  # a nested list holds no plain value
    {"team": {"name": "sre"}},
    {"n": 1},
    {"n": 1.0},
    {"n": True},
    {"n": "1"},
    {"n": [0, 1]},
    {"n": False},
    {"n": 0},
    {"n": None},
    {"team": "sre", "n": 1},
    {"team": "dba", "n": [True, 2.5]},
]
FILTERS: list[dict[str, Any]] = [
    {"team": "sre"},
    {"team": ["sre", "dba"]},
    {"n": 1},
    {"n": 1.0},
    {"n": True},
    {"n": False},
    {"n": 0},
    {"n": "1"},
    {"n": [2.5, "x"]},
    {"team": "sre", "n": 1},
    {"team": ["dba"], "n": True},
    {"absent": "x"},
]


@pytest.mark.parametrize("filter", FILTERS, ids=repr)
def test_the_index_passes_what_matches_passes(filter: dict[str, Any]) -> None:
    """Numbers equal as numbers, a bool only a bool, list elements each, nested values none."""
    checked = check_filter(filter)
    assert checked is not None
    index = MetaIndex(METAS)
    want = [n for n, meta in enumerate(METAS) if matches(meta, checked)]
    assert index.rows(checked) == want
    assert index.rows(checked) == want  # a second ask reads the fields built by the first


def test_the_metas_tell_the_rules_apart() -> None:
    """The filters above pass different sets, and 1 and True are told apart."""
    index = MetaIndex(METAS)
    answers = {tuple(index.rows(check_filter(f) or {})) for f in FILTERS}
    assert len(answers) >= 8
    assert index.rows({"n": [1]}) != index.rows({"n": [True]})
