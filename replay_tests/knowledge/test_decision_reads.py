"""A write decides on reads made in one read transaction.

``put_doc`` of a document absent from the manifest reads its record and then the highest
revision it ever had (a removed document continues from its history). Each read used to take
a transaction of its own, one more begin and commit per document; they now share one
(ADR 0044, amended), which also means the decision sees one snapshot of the corpus.
"""

from __future__ import annotations

from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom

BEGIN = "BEGIN"  # as the shared ``trace`` fixture (conftest.py) writes a begin


def _reads(seen: list[str]) -> tuple[int, int]:
    """The index of the manifest read and of the revision-history read in ``seen``."""
    manifest = next(
        i for i, s in enumerate(seen) if s.startswith("SELECT") and "FROM loom_kb_documents" in s
    )
    history = next(
        i for i, s in enumerate(seen) if "max(loom_kb_revisions.revision)" in s and i > manifest
    )
    return manifest, history


def _second_put_doc(loom: Loom, trace: list[str]) -> tuple[int, int]:
    """Put a second document into a caught-up corpus, ``trace`` holding only that write's
    statements; where its manifest and history reads are in it (:func:`_reads`)."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="a", text="first text"))
    trace.clear()
    kb.put_doc(Doc(id="b", text="second text"))
    return _reads(trace)


def test_a_new_documents_record_and_history_are_read_in_one_transaction(
    loom: Loom, trace: list[str]
) -> None:
    """The manifest and revision-history reads of a put_doc share one transaction."""
    manifest, history = _second_put_doc(loom, trace)
    assert BEGIN not in trace[manifest:history]
    assert BEGIN in trace[:manifest]  # the trace sees transactions begin (it can fail)


def test_a_removed_and_recreated_document_still_continues_its_revisions(
    loom: Loom, trace: list[str]
) -> None:
    """The history read in the shared transaction is the one the revision is taken from."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="a", text="one"))
    kb.put_doc(Doc(id="a", text="two"))
    kb.remove_doc("a")
    trace.clear()
    record = kb.put_doc(Doc(id="a", text="three"))
    _reads(trace)
    assert record.revision == 3
