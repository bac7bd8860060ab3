"""Citations are checked by membership in the documents the model was shown, and nothing more."""

from __future__ import annotations

import pytest

from loom_knowledge import (
    CitationCheck,
    Passage,
    UngroundedCitationError,
    assert_grounded,
    check_citations,
)

SHOWN = [
    Passage(doc_id="a", index=0, text="alpha", revision=1),
    Passage(doc_id="b", index=0, text="beta", revision=1),
    Passage(doc_id="a", index=1, text="alpha two", revision=1),
]


def test_citations_are_split_into_grounded_and_ungrounded_in_citation_order() -> None:
    assert check_citations(["z", "b", "a", "b", "y"], SHOWN) == CitationCheck(
        grounded=("b", "a"), ungrounded=("z", "y"), shown=("a", "b")
    )


def test_citing_nothing_is_grounded() -> None:
    assert check_citations([], SHOWN).ok


def test_ids_are_compared_exactly() -> None:
    assert check_citations(["A", "a "], SHOWN).ungrounded == ("A", "a ")


def test_assert_grounded_returns_the_cited_ids_when_all_were_shown() -> None:
    assert assert_grounded(["b", "a"], SHOWN) == ("b", "a")


def test_assert_grounded_names_the_ids_never_shown() -> None:
    with pytest.raises(UngroundedCitationError, match="'restart-db'") as caught:
        assert_grounded(["a", "restart-db"], SHOWN)
    assert caught.value.ungrounded == ("restart-db",)
    assert caught.value.shown == ("a", "b")


def test_membership_is_all_that_is_checked() -> None:
    """A shown document passes even if the answer's claim is not in it: that needs a judge."""
    assert assert_grounded(["b"], SHOWN[:2]) == ("b",)


def test_nothing_shown_means_every_citation_is_ungrounded() -> None:
    with pytest.raises(UngroundedCitationError, match="shown: nothing"):
        assert_grounded(["a"], [])
