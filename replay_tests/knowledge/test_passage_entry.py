"""Passage entry ids round-trip from the right; only text, title and meta are searchable (D5)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loom_knowledge import (
    InvalidPassageIdError,
    Passage,
    PassageContent,
    format_passage_id,
    parse_passage_id,
    passage_content,
    passage_from_entry,
)

PASSAGE = Passage(
    doc_id="guide.md#install",
    index=0,
    text="Drain connections first.",
    title="Restarting the database",
    meta={"team": "payments", "priority": 7},
    revision=2,
)


def _leaves(value: object) -> list[str]:
    """The string and number leaves of stored content: what a store indexes."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if value is None else [str(value)]


def test_a_doc_id_containing_a_hash_round_trips() -> None:
    entry_id = format_passage_id("guide.md#install", 12)
    assert entry_id == "guide.md#install#12"
    assert parse_passage_id(entry_id) == ("guide.md#install", 12)


@given(doc_id=st.text(min_size=1), index=st.integers(min_value=0))
def test_every_formatted_id_parses_back(doc_id: str, index: int) -> None:
    assert parse_passage_id(format_passage_id(doc_id, index)) == (doc_id, index)


NOT_PASSAGE_IDS = ["plain", "#0", "doc#", "doc#-1", "doc#+1", "doc#01", "doc#1a", "doc# 1"]


@pytest.mark.parametrize("entry_id", [*NOT_PASSAGE_IDS, "doc#\u0661"])
def test_an_unparseable_entry_id_is_refused(entry_id: str) -> None:
    with pytest.raises(InvalidPassageIdError) as caught:
        parse_passage_id(entry_id)
    assert caught.value.entry_id == entry_id


@pytest.mark.parametrize(("doc_id", "index"), [("", 0), ("doc", -1), ("doc", True)])
def test_an_id_that_could_not_be_parsed_back_is_never_formatted(doc_id: str, index: int) -> None:
    with pytest.raises(InvalidPassageIdError):
        format_passage_id(doc_id, index)


def test_doc_id_index_and_revision_are_not_searchable_text() -> None:
    leaves = _leaves(msgspec.to_builtins(passage_content(PASSAGE)))
    assert PASSAGE.doc_id not in leaves
    assert "0" not in leaves
    assert "2" not in leaves


def test_title_and_meta_are_searchable_text() -> None:
    leaves = _leaves(msgspec.to_builtins(passage_content(PASSAGE)))
    assert {"Drain connections first.", "Restarting the database", "payments", "7"} <= set(leaves)


def test_absent_title_and_meta_are_not_stored_at_all() -> None:
    bare = Passage(doc_id="d", index=0, text="t", revision=1)
    assert msgspec.to_builtins(passage_content(bare)) == {"text": "t"}


def test_a_stored_passage_reads_back_equal() -> None:
    stored = msgspec.json.encode(passage_content(PASSAGE))
    content = msgspec.json.decode(stored, type=PassageContent)
    read = passage_from_entry(entry_id="guide.md#install#0", content=content, revision=2)
    assert read == PASSAGE


def test_reading_an_entry_whose_id_names_no_passage_is_refused() -> None:
    with pytest.raises(InvalidPassageIdError):
        passage_from_entry(entry_id="stray-entry", content=PassageContent(text="t"), revision=1)
