"""The first-party text contract: what is searchable text and what counts as a term."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loom_memory import MemoryEntry, query_terms, searchable_text, tokenize
from loom_memory.text import MAX_TERM_LENGTH


def test_searchable_text_is_string_and_number_leaves_only() -> None:
    """Strings and numbers at any depth count; keys, booleans and nulls do not."""
    entry = MemoryEntry(
        content={
            "title": "Failover",
            "steps": ["drain", {"port": 5432, "ratio": 0.5}],
            "done": True,
            "owner": None,
        },
        id="doc#3",
        role="user",
        origin="wiki:db",
    )
    assert searchable_text(entry).split("\n") == ["Failover", "drain", "5432", "0.5"]


def test_searchable_text_of_a_string_is_the_string() -> None:
    """Plain string content is its own searchable text."""
    assert searchable_text(MemoryEntry(content="just text")) == "just text"


def test_tokenize_folds_case_and_normalises() -> None:
    """Terms are NFKC-normalised and case-folded."""
    assert tokenize("Straße CAFE\u0301 \uff26\uff35\uff2c\uff2c") == ["strasse", "café", "full"]


def test_tokenize_splits_on_non_alphanumerics_and_drops_stop_words() -> None:
    """Underscores and punctuation separate terms; stop words are dropped; duplicates kept."""
    assert tokenize("The node_7 is DOWN, down!") == ["node", "7", "down", "down"]


def test_tokenize_drops_overlong_runs() -> None:
    """A letter/digit run longer than MAX_TERM_LENGTH (an encoded blob) is not a term."""
    assert tokenize("x" * (MAX_TERM_LENGTH + 1) + " kept") == ["kept"]


def test_query_terms_are_distinct_in_order() -> None:
    """A query's terms are deduplicated, first occurrence first."""
    assert query_terms("beta alpha Beta the alpha") == ["beta", "alpha"]


@given(st.text())
def test_tokens_retokenize_to_themselves(text: str) -> None:
    """Joining terms by spaces and tokenizing again gives the same terms.

    The SQL backends rely on this: they store the joined terms and let the database split them.
    """
    terms = tokenize(text)
    assert tokenize(" ".join(terms)) == terms
