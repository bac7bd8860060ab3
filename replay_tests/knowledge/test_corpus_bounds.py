"""What the corpus index cannot hold is refused before it reaches the log, on every backend.

A write appends its event first and the shared corpus index applies it after; the log is
append-only, so an event the index refuses stops every scope's catch-up, every rebuild and
every fresh process for good. Reviews of 6 December found three such events the corpus
took: a chunker's passage holding a NUL (on SQLite too), and a document id or scope longer
than PostgreSQL's index rows hold (2,704 bytes with the key beside it). A title or meta whose
words make each passage's search vector pass PostgreSQL's 1 MB is the fourth.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from loom_knowledge import Doc, InvalidDocumentError, InvalidOptionError, open_knowledge_base
from loom_knowledge.domain.types import MAX_ID_BYTES, MAX_SCOPE_BYTES
from loom_runtime import Loom


def _still_serves(loom: Loom, before: int) -> None:
    """Nothing was appended, and another scope of the log still writes and searches."""
    assert loom.log.position == before
    other = open_knowledge_base(loom, "other")
    other.put_doc(Doc(id="fine.md", text="the disk is full"))
    assert [p.doc_id for p in other.search("disk")] == ["fine.md"]


@pytest.mark.parametrize(
    ("passages", "why"),
    [
        (["fine", "bad\x00text"], "NUL"),
        (["fine", "\ud800"], "surrogate"),
        (["fine", 42], "not a str"),
    ],
    ids=["nul", "surrogate", "not-str"],
)
def test_a_chunker_s_passage_the_index_cannot_hold_is_refused(
    loom: Loom, passages: Sequence[object], why: str
) -> None:
    kb = open_knowledge_base(loom, "ops", chunker=lambda doc: passages)  # type: ignore[arg-type, return-value]
    before = loom.log.position
    with pytest.raises(InvalidDocumentError) as raised:
        kb.put_doc(Doc(id="a.md", text="anything"))
    assert raised.value.field == "passages[1]"
    with pytest.raises(InvalidDocumentError):
        kb.sync([Doc(id="a.md", text="anything")])
    _still_serves(loom, before)


def test_a_passage_whose_search_terms_pass_the_vector_bound_is_refused(loom: Loom) -> None:
    """A title of 150,000 distinct words is in each passage's entry: its search vector is
    past PostgreSQL's 1 MB (refused on every backend alike, before the append)."""
    kb = open_knowledge_base(loom, "ops")
    before = loom.log.position
    title = " ".join(f"w{n}" for n in range(150_000))
    with pytest.raises(InvalidDocumentError) as raised:
        kb.put_doc(Doc(id="a.md", text="short text", title=title))
    assert raised.value.field == "passages[0]"
    assert "title or meta" in str(raised.value) and "entries[" not in str(raised.value)
    _still_serves(loom, before)


def test_a_large_meta_of_few_terms_is_indexed(loom: Loom) -> None:
    """The control: a 300 KB meta value is one long word, past the term length, so its
    vector is small; the corpus index takes it (a memory's entry bound is not the corpus's)."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="meta.md", text="hello with meta", meta={"blob": "x" * 300_000}))
    assert [p.doc_id for p in kb.search("hello")] == ["meta.md"]


def test_a_document_id_past_the_bound_cannot_be_made() -> None:
    with pytest.raises(InvalidDocumentError) as raised:
        Doc(id="d" * (MAX_ID_BYTES + 1), text="t")
    assert raised.value.field == "id"
    with pytest.raises(InvalidDocumentError):
        Doc(id="é" * (MAX_ID_BYTES // 2 + 1), text="t")  # bytes of UTF-8, not letters


def test_a_scope_past_the_bound_is_refused(loom: Loom) -> None:
    with pytest.raises(InvalidOptionError):
        open_knowledge_base(loom, "s" * (MAX_SCOPE_BYTES + 1))
    _still_serves(loom, loom.log.position)


def test_the_longest_id_and_scope_are_stored_and_found(loom: Loom) -> None:
    """The control, on each backend (PostgreSQL's index holds both side by side), a passage
    index of five digits included."""
    kb = open_knowledge_base(loom, "s" * MAX_SCOPE_BYTES, chunker=lambda doc: ["x"] * 10_001)
    kb.put_doc(Doc(id="d" * MAX_ID_BYTES, text="the disk is full"))
    assert [(p.doc_id, p.index) for p in kb.search("x", limit=1)] == [("d" * MAX_ID_BYTES, 0)]
