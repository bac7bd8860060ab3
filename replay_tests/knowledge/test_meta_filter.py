"""The meta filter's grammar: what matches, and what is refused before anything is read."""

from __future__ import annotations

from typing import Any

import pytest

from loom_knowledge.corpus.retrieval import check_filter, matches, retrieval_input
from loom_knowledge.errors import InvalidOptionError

META = {"team": "sre", "tags": ["linux", "dns"], "tier": 1, "paged": True, "cost": 2.5}


@pytest.mark.parametrize(
    ("wanted", "found"),
    [
        ({"team": "sre"}, True),
        ({"team": "dba"}, False),
        ({"team": ["dba", "sre"]}, True),
        ({"team": ("dba", "sre")}, True),
        ({"tags": "dns"}, True),  # a list value matches when any element does
        ({"tags": ["mail", "linux"]}, True),
        ({"tags": "mail"}, False),
        ({"tier": 1.0}, True),  # numbers compare as numbers
        ({"tier": True}, False),  # a bool only equals a bool
        ({"paged": 1}, False),
        ({"paged": True}, True),
        ({"cost": 2.5}, True),
        ({"owner": "sre"}, False),  # a document without the field never matches
        ({"team": "sre", "tier": 2}, False),  # every field must hold
        ({"team": "sre", "tags": "linux"}, True),
        ({"team": "1"}, False),
    ],
)
def test_what_a_filter_matches(wanted: dict[str, Any], found: bool) -> None:
    checked = check_filter(wanted)
    assert checked is not None
    assert matches(META, checked) is found


def test_a_document_without_meta_matches_no_filter() -> None:
    assert matches(None, {"team": ["sre"]}) is False


def test_no_filter_is_none() -> None:
    assert check_filter(None) is None


@pytest.mark.parametrize(
    "bad",
    [
        {},
        "team=sre",
        ["team", "sre"],
        {"": "sre"},
        {1: "sre"},
        {"team": []},
        {"team": None},
        {"team": {"$in": ["sre"]}},
        {"team": [["sre"]]},
        {"cost": float("nan")},
        {"cost": float("inf")},
        {"team": {"sre"}},
    ],
)
def test_what_is_outside_the_grammar_is_refused_saying_what_to_write(bad: object) -> None:
    with pytest.raises(InvalidOptionError, match=r'\{"field": value\}'):
        check_filter(bad)


def test_a_lexical_input_without_filter_is_what_it_always_was() -> None:
    """Executions recorded before modes and filters replay unchanged: the same three fields."""
    assert retrieval_input("runbooks", "disk full", 4, None) == {
        "scope": "runbooks",
        "query": "disk full",
        "limit": 4,
    }


def test_one_value_and_a_list_of_it_record_alike() -> None:
    """The filter is recorded in its checked form, so two spellings of one filter agree."""
    assert retrieval_input("s", "q", 4, check_filter({"team": "sre"})) == retrieval_input(
        "s", "q", 4, check_filter({"team": ["sre"]})
    )
