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
from loom_knowledge.domain.types import (
    MAX_ID_BYTES,
    MAX_REPEATED_BYTES,
    MAX_SCOPE_BYTES,
)
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
    """A passage of 150,000 distinct words (a chunker that keeps the whole text) has a search
    vector past PostgreSQL's 1 MB (refused on every backend alike, before the append). A
    title that long is refused by its own bound first (below)."""
    kb = open_knowledge_base(loom, "ops", chunker=lambda doc: [doc.text])
    before = loom.log.position
    text = " ".join(f"w{n}" for n in range(150_000))
    with pytest.raises(InvalidDocumentError) as raised:
        kb.put_doc(Doc(id="a.md", text=text, title="short"))
    assert raised.value.field == "passages[0]"
    assert "cut smaller passages" in str(raised.value) and "entries[" not in str(raised.value)
    _still_serves(loom, before)


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


def test_a_large_meta_of_few_terms_is_indexed(loom: Loom) -> None:
    """The control: a 300 KB meta value is one long word, past the term length, so its
    vector is small; the corpus index takes it (a memory's entry bound is not the corpus's)."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="meta.md", text="hello with meta", meta={"blob": "x" * 300_000}))
    assert [p.doc_id for p in kb.search("hello")] == ["meta.md"]


def _paragraphs(count: int) -> str:
    return "\n\n".join(f"paragraph {n} of the runbook" for n in range(count))


@pytest.mark.parametrize(
    "doc",
    [
        Doc(id="t.md", text=_paragraphs(200), title="é" * 50_000),  # 100 KB: bytes, not letters
        Doc(id="m.md", text=_paragraphs(200), meta={"note": "x" * 30_000}),
    ],
    ids=["title", "meta"],
)
def test_a_title_or_meta_repeated_past_the_bound_is_refused_before_the_log(
    loom: Loom, doc: Doc
) -> None:
    """Every passage repeats its document's title and meta (each is searchable, and returned
    with the passage), so their size is multiplied by the passage count: an input review's
    0.29 MB document (a 100 KB title, 200 passages) took 20 s and 243 MB of SQLite to write,
    every rebuild paying it again. Their repeated bytes are bounded, on every write path."""
    kb = open_knowledge_base(loom, "docs", chunker=lambda doc: doc.text.split("\n\n"))
    before = loom.log.position
    with pytest.raises(InvalidDocumentError, match="MAX_REPEATED_BYTES") as raised:
        kb.put_doc(doc)
    assert raised.value.field == ("title" if doc.title else "meta")
    with pytest.raises(InvalidDocumentError, match="MAX_REPEATED_BYTES"):
        kb.sync([doc], source="s")
    with pytest.raises(InvalidDocumentError, match="MAX_REPEATED_BYTES"):
        kb.plan_sync([doc], source="s")  # a dry run refuses what its apply would
    _still_serves(loom, before)


def test_a_title_repeated_up_to_the_bound_is_stored(loom: Loom) -> None:
    """The control, at the bound exactly: four passages of a quarter's title go in, with the
    title on each; a fifth passage is one too many."""
    title = "t" * (MAX_REPEATED_BYTES // 4)
    kb = open_knowledge_base(loom, "docs", chunker=lambda doc: doc.text.split("\n\n"))
    kb.put_doc(Doc(id="d.md", text=_paragraphs(4), title=title))
    assert {p.title for p in kb.search("paragraph", limit=10)} == {title}
    with pytest.raises(InvalidDocumentError, match="MAX_REPEATED_BYTES"):
        kb.put_doc(Doc(id="e.md", text=_paragraphs(5), title=title))
