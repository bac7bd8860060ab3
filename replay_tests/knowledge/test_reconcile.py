"""The reconcile classifier: every branch, sources as owners, and the mass-delete guard."""

from __future__ import annotations

import pytest

from loom_knowledge import (
    FINGERPRINT_ALGORITHM,
    Doc,
    DocRecord,
    DuplicateDocumentError,
    Fingerprinter,
    InvalidOptionError,
    MassDeleteRefusedError,
    SourceConflictError,
    SyncResult,
    ensure_writable,
    fingerprint,
    reconcile,
)


def _doc(doc_id: str, text: str = "body") -> Doc:
    return Doc(id=doc_id, text=text)


def _record(doc: Doc, *, source: str | None, revision: int = 1) -> DocRecord:
    return DocRecord(
        id=doc.id,
        revision=revision,
        fingerprint=fingerprint(doc),
        fingerprint_algorithm=FINGERPRINT_ALGORITHM,
        passage_count=1,
        source=source,
    )


def _manifest(*records: DocRecord) -> dict[str, DocRecord]:
    return {record.id: record for record in records}


def test_new_changed_unchanged_and_dropped_documents_are_classified() -> None:
    manifest = _manifest(
        _record(_doc("same"), source="wiki"),
        _record(_doc("edited"), source="wiki", revision=4),
        _record(_doc("dropped"), source="wiki"),
    )
    docs = [_doc("new"), _doc("same"), _doc("edited", "new body")]
    plan = reconcile(manifest=manifest, docs=docs, source="wiki")
    assert plan.result == SyncResult(
        written=("new", "edited"), unchanged=("same",), removed=("dropped",), retained=()
    )
    assert [(w.doc.id, w.revision, w.fingerprint) for w in plan.writes] == [
        ("new", 1, fingerprint(_doc("new"))),
        ("edited", 5, fingerprint(_doc("edited", "new body"))),
    ]
    assert plan.fingerprint_algorithm == FINGERPRINT_ALGORITHM
    assert plan.rehashed == ()


def test_an_unchanged_source_writes_and_removes_nothing() -> None:
    docs = [_doc("a"), _doc("b")]
    plan = reconcile(
        manifest=_manifest(*(_record(d, source=None) for d in docs)), docs=docs, source=None
    )
    assert plan.result == SyncResult(written=(), unchanged=("a", "b"), removed=(), retained=())


def test_other_sources_documents_are_retained_and_reported() -> None:
    manifest = _manifest(
        _record(_doc("mine"), source="wiki"), _record(_doc("learned"), source="agent")
    )
    plan = reconcile(manifest=manifest, docs=[_doc("mine")], source="wiki")
    assert plan.result == SyncResult(
        written=(), unchanged=("mine",), removed=(), retained=("learned",)
    )


def test_none_is_a_source_of_its_own_and_not_a_wildcard() -> None:
    manifest = _manifest(
        _record(_doc("unstamped"), source=None), _record(_doc("wiki"), source="wiki")
    )
    as_none = reconcile(manifest=manifest, docs=[_doc("unstamped")], source=None)
    assert (as_none.removed, as_none.retained) == ((), ("wiki",))
    as_wiki = reconcile(manifest=manifest, docs=[_doc("wiki")], source="wiki")
    assert (as_wiki.removed, as_wiki.retained) == ((), ("unstamped",))


@pytest.mark.parametrize(("owner", "writer"), [("agent", "wiki"), (None, "wiki"), ("wiki", None)])
def test_writing_a_document_another_source_owns_is_refused(
    owner: str | None, writer: str | None
) -> None:
    manifest = _manifest(_record(_doc("doc"), source=owner))
    with pytest.raises(SourceConflictError) as caught:
        reconcile(manifest=manifest, docs=[_doc("doc", "rewritten")], source=writer)
    assert (caught.value.writer, caught.value.owners) == (writer, {"doc": owner})
    assert "'doc'" in str(caught.value)


def test_a_conflict_is_refused_even_when_the_content_is_identical() -> None:
    """Identical content must not let a writer adopt a document it does not own."""
    manifest = _manifest(_record(_doc("doc"), source="agent"))
    with pytest.raises(SourceConflictError):
        reconcile(manifest=manifest, docs=[_doc("doc")], source="wiki")


def test_every_conflicting_document_is_named_at_once() -> None:
    manifest = _manifest(_record(_doc("a"), source="x"), _record(_doc("b"), source=None))
    with pytest.raises(SourceConflictError) as caught:
        reconcile(manifest=manifest, docs=[_doc("a"), _doc("b"), _doc("c")], source="wiki")
    assert caught.value.owners == {"a": "x", "b": None}


def test_an_absent_document_may_be_created_by_any_source() -> None:
    manifest = _manifest(_record(_doc("theirs"), source="agent"))
    plan = reconcile(manifest=manifest, docs=[_doc("fresh")], source="wiki")
    assert plan.result.written == ("fresh",)


def test_ensure_writable_refuses_only_another_owner() -> None:
    record = _record(_doc("doc"), source="agent")
    ensure_writable(doc_id="doc", record=None, source="wiki")
    ensure_writable(doc_id="doc", record=record, source="agent")
    with pytest.raises(SourceConflictError, match="'wiki' may not write 'doc'"):
        ensure_writable(doc_id="doc", record=record, source="wiki")


def test_duplicate_ids_in_the_input_are_refused() -> None:
    with pytest.raises(DuplicateDocumentError) as caught:
        reconcile(manifest={}, docs=[_doc("a"), _doc("b"), _doc("a", "other")], source=None)
    assert caught.value.doc_ids == ("a",)


def test_an_empty_input_is_refused_when_the_source_owns_documents() -> None:
    manifest = _manifest(_record(_doc("a"), source="wiki"), _record(_doc("other"), source="agent"))
    with pytest.raises(MassDeleteRefusedError, match="remove 1 of the 1 documents") as caught:
        reconcile(manifest=manifest, docs=[], source="wiki", max_removal_fraction=1.0)
    assert caught.value.max_fraction is None
    assert "allow_mass_delete=True" in str(caught.value)


def test_an_empty_input_is_fine_when_the_source_owns_nothing() -> None:
    manifest = _manifest(_record(_doc("other"), source="agent"))
    plan = reconcile(manifest=manifest, docs=[], source="wiki")
    assert plan.result == SyncResult(written=(), unchanged=(), removed=(), retained=("other",))


def _owned(count: int) -> dict[str, DocRecord]:
    return _manifest(*(_record(_doc(f"d{i}"), source="wiki") for i in range(count)))


def test_removing_more_than_the_fraction_is_refused_with_the_counts() -> None:
    docs = [_doc("d0"), _doc("d1"), _doc("d2")]
    with pytest.raises(MassDeleteRefusedError) as caught:
        reconcile(manifest=_owned(10), docs=docs, source="wiki")
    error = caught.value
    assert (error.would_remove, error.owned, error.max_fraction) == (7, 10, 0.5)
    assert "remove 7 of the 10 documents source 'wiki' owns" in str(error)


def test_removing_exactly_the_fraction_is_allowed() -> None:
    plan = reconcile(manifest=_owned(4), docs=[_doc("d0"), _doc("d1")], source="wiki")
    assert plan.removed == ("d2", "d3")


def test_the_fraction_is_configurable() -> None:
    with pytest.raises(MassDeleteRefusedError):
        reconcile(
            manifest=_owned(10),
            docs=[_doc(f"d{i}") for i in range(9)],
            source="wiki",
            max_removal_fraction=0.0,
        )


@pytest.mark.parametrize("docs", [[], [_doc("d0")]])
def test_the_override_lets_a_mass_delete_through(docs: list[Doc]) -> None:
    plan = reconcile(manifest=_owned(3), docs=docs, source="wiki", allow_mass_delete=True)
    assert len(plan.removed) == 3 - len(docs)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_fraction_outside_zero_to_one_is_refused(bad: float) -> None:
    with pytest.raises(InvalidOptionError, match="max_removal_fraction"):
        reconcile(manifest={}, docs=[], source=None, max_removal_fraction=bad)


def test_a_record_from_another_algorithm_is_rewritten_and_reported_as_rehashed() -> None:
    doc = _doc("a")
    manifest = _manifest(_record(doc, source=None))
    v2 = Fingerprinter(algorithm="test/v2", digest=fingerprint)
    plan = reconcile(manifest=manifest, docs=[doc], source=None, fingerprinter=v2)
    assert (plan.result.written, plan.rehashed, plan.fingerprint_algorithm) == (
        ("a",),
        ("a",),
        "test/v2",
    )
    assert plan.writes[0].revision == 2
