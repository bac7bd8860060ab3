"""sync and plan_sync over a real log: the reconcile, its record, sources and the mass-delete guard.

"Wrote nothing" cannot be read off the corpus, because a no-op and a rewrite of everything leave
identical corpora. So writes are counted at two levels: calls to the passage store's writing
verbs, and INSERT/UPDATE/DELETE statements reaching any ``loom_kb_`` table. A negative control
shows both probes see a rewrite that leaves the corpus unchanged. Both work on either backend: the
spy wraps the store class the corpus writes through there (``SqliteMemoryStore`` or
``PostgresMemoryStore``), and the statement listener matches either dialect's SQL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import event

from loom_knowledge import (
    CorpusReconciled,
    Doc,
    DocumentRemoved,
    DocumentWritten,
    InvalidOptionError,
    KnowledgeBase,
    MassDeleteRefusedError,
    SourceConflictError,
    SyncResult,
    open_knowledge_base,
)
from loom_memory import MemoryEntry
from loom_memory.sql import SqlMemoryStore
from loom_runtime import Loom, MasterKey, RedactedKeysCollideError, Redactor, SecretRefusedError
from replay_tests.knowledge.corpus_tables import read_passages, store_class

SCOPE = "ops"
_CORPUS_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b[^;]*\bloom_kb_", re.IGNORECASE)


@pytest.fixture
def kb(loom: Loom) -> KnowledgeBase:
    return open_knowledge_base(loom, SCOPE)


def _recording(verb: str, original: Any, calls: list[str]) -> Any:
    def spy(self: SqlMemoryStore, *args: Any, **kwargs: Any) -> Any:
        calls.append(verb)
        return original(self, *args, **kwargs)

    return spy


@pytest.fixture
def store_calls(loom: Loom, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of a passage store's writing verbs (append_batch, which every append goes
    through, remove, replace, clear)."""
    calls: list[str] = []
    store = store_class(loom.log.engine)  # the class the corpus writes through on this backend
    for verb in ("append_batch", "remove", "replace", "clear"):
        original = getattr(store, verb)
        monkeypatch.setattr(store, verb, _recording(verb, original, calls))
    return calls


@pytest.fixture
def row_writes(loom: Loom) -> Iterator[list[str]]:
    """Every INSERT/UPDATE/DELETE statement sent to a corpus (``loom_kb_``) table."""
    writes: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if _CORPUS_WRITE.match(statement):
            writes.append(statement)

    engine = loom.log.engine
    event.listen(engine, "before_cursor_execute", record)
    yield writes
    event.remove(engine, "before_cursor_execute", record)


def _doc(doc_id: str, text: str = "") -> Doc:
    return Doc(id=doc_id, text=text or f"{doc_id} runbook body")


def _docs(*ids: str) -> list[Doc]:
    return [_doc(doc_id) for doc_id in ids]


def _appended(loom: Loom, since: int) -> list[Any]:
    """The events appended after log position ``since``, decoded."""
    return [loom.log.decode(n) for n in loom.log.notifications(after=since)]


def _summary(events: Sequence[Any]) -> list[tuple[str, str]]:
    return [(type(e).__name__, getattr(e, "doc_id", "")) for e in events]


def _entries(loom: Loom) -> list[MemoryEntry]:
    return read_passages(loom.log.engine, SCOPE)


def _revisions(kb: KnowledgeBase) -> dict[str, tuple[int, str | None]]:
    return {record.id: (record.revision, record.source) for record in kb.list_docs()}


# -- the reconcile ------------------------------------------------------------------------------


def test_sync_writes_changed_and_new_documents_and_removes_dropped_ones(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """A sync appends a write per new or changed document and a removal per dropped one."""
    kb.sync(_docs("a", "b", "c", "d"))
    position = loom.log.position
    result = kb.sync([_doc("a"), _doc("b", "b edited"), _doc("d"), _doc("e")])
    assert result == SyncResult(
        written=("b", "e"), unchanged=("a", "d"), removed=("c",), retained=()
    )
    assert _summary(_appended(loom, position)) == [
        ("DocumentWritten", "b"),
        ("DocumentWritten", "e"),
        ("DocumentRemoved", "c"),
        ("CorpusReconciled", ""),
    ]
    assert _revisions(kb) == {"a": (1, None), "b": (2, None), "d": (1, None), "e": (1, None)}


def test_sync_leaves_the_rows_of_unchanged_documents_in_place(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """A sync that edits one document does not rewrite the stored rows of the others."""
    kb.sync(_docs("a", "b"))
    before = [entry for entry in _entries(loom) if entry.id == "a#0"]
    kb.sync([_doc("a"), _doc("b", "b edited")])
    assert [entry for entry in _entries(loom) if entry.id == "a#0"] == before
    assert [entry.id for entry in _entries(loom)] == ["a#0", "b#0"]


def test_an_unchanged_sync_appends_exactly_one_corpus_reconciled(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """Syncing an unchanged source appends one event, the CorpusReconciled record."""
    kb.sync(_docs("a", "b", "c"))
    position = loom.log.position
    kb.sync(_docs("a", "b", "c"))
    appended = _appended(loom, position)
    assert [type(e) for e in appended] == [CorpusReconciled]
    assert appended[0].unchanged == ["a", "b", "c"]


def test_an_unchanged_sync_makes_no_store_write_call(
    kb: KnowledgeBase, store_calls: list[str]
) -> None:
    """Syncing an unchanged source calls none of the passage store's writing verbs."""
    kb.sync(_docs("a", "b", "c"))
    assert store_calls == ["append_batch"]  # one page
    store_calls.clear()
    kb.sync(_docs("a", "b", "c"))
    assert store_calls == []


def test_an_unchanged_sync_writes_no_corpus_row(kb: KnowledgeBase, row_writes: list[str]) -> None:
    """Syncing an unchanged source sends no INSERT/UPDATE/DELETE to any loom_kb_ table."""
    kb.sync(_docs("a", "b", "c"))
    assert row_writes != []
    row_writes.clear()
    kb.sync(_docs("a", "b", "c"))
    assert row_writes == []


def test_the_write_probes_see_a_rewrite_that_leaves_the_corpus_identical(
    loom: Loom, kb: KnowledgeBase, store_calls: list[str], row_writes: list[str]
) -> None:
    """Negative control: rewriting everything leaves an equal corpus, and both probes see it."""
    kb.sync(_docs("a", "b", "c"))
    corpus = (kb.list_docs(), _entries(loom))
    store_calls.clear()
    row_writes.clear()
    kb.rebuild()
    assert (kb.list_docs(), _entries(loom)) == corpus
    assert store_calls.count("append_batch") == 1
    assert row_writes != []


def test_the_reconcile_event_records_written_unchanged_removed_and_retained(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """CorpusReconciled carries the scope, the source and the four lists of the result."""
    kb.sync(_docs("a", "b", "c"), source="wiki")
    kb.put_doc(_doc("learned"), source="agent")
    position = loom.log.position
    result = kb.sync([_doc("a"), _doc("b", "b edited"), _doc("n")], source="wiki")
    record = _appended(loom, position)[-1]
    assert isinstance(record, CorpusReconciled)
    assert (record.scope, record.source) == (SCOPE, "wiki")
    assert (record.written, record.unchanged, record.removed, record.retained) == (
        ["b", "n"],
        ["a"],
        ["c"],
        ["learned"],
    )
    assert result == SyncResult(
        written=("b", "n"), unchanged=("a",), removed=("c",), retained=("learned",)
    )


def test_a_sync_appends_all_its_events_in_one_save(
    loom: Loom, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync's document events and its CorpusReconciled go to the log in ONE save call."""
    kb.sync(_docs("a", "b", "c"))
    saves: list[list[str]] = []
    original = loom.log.append

    def spy(stream: Any, *, expected_version: int, events: Any, **kwargs: Any) -> Any:
        saves.append([cls.__name__ for cls, _fields in events])
        return original(stream, expected_version=expected_version, events=events, **kwargs)

    monkeypatch.setattr(loom.log, "append", spy)
    kb.sync([_doc("a", "a edited"), _doc("b"), _doc("d")])
    assert saves == [["DocumentWritten", "DocumentWritten", "DocumentRemoved", "CorpusReconciled"]]


def test_plan_sync_returns_what_the_following_sync_returns(kb: KnowledgeBase) -> None:
    """plan_sync gives the same SyncResult as the sync run right after it on the same input."""
    kb.sync(_docs("a", "b", "c", "d"), source="wiki")
    kb.put_doc(_doc("learned"), source="agent")
    docs = [_doc("a"), _doc("b", "b edited"), _doc("d"), _doc("n")]
    planned = kb.plan_sync(docs, source="wiki")
    assert planned == kb.sync(docs, source="wiki")
    assert planned == SyncResult(
        written=("b", "n"), unchanged=("a", "d"), removed=("c",), retained=("learned",)
    )


def test_plan_sync_appends_and_writes_nothing(
    loom: Loom, kb: KnowledgeBase, store_calls: list[str]
) -> None:
    """plan_sync of a destructive change appends no event and calls no store write."""
    kb.sync(_docs("a", "b", "c"))
    position = loom.log.position
    store_calls.clear()
    kb.plan_sync([_doc("a", "a edited"), _doc("b"), _doc("n")])
    assert (loom.log.position, store_calls) == (position, [])
    assert _revisions(kb) == {"a": (1, None), "b": (1, None), "c": (1, None)}


def test_a_writer_that_lost_the_race_decides_again_on_the_new_state(
    loom: Loom, db_url: str
) -> None:
    """A sync whose stream moved while it decided re-decides, and refuses a doc taken meanwhile."""
    with Loom(db_url) as other_process:
        rival = open_knowledge_base(other_process, SCOPE)
        cut: list[str] = []

        def chunker(doc: Doc) -> list[str]:
            if not cut:
                rival.put_doc(_doc("x"), source="agent")  # lands between decide and append
            cut.append(doc.id)
            return [doc.text]

        kb = open_knowledge_base(loom, SCOPE, chunker=chunker)
        with pytest.raises(SourceConflictError) as refused:
            kb.sync([_doc("w"), _doc("x")], source="wiki")
        assert refused.value.owners == {"x": "agent"}
        assert _revisions(kb) == {"x": (1, "agent")}


# -- sources ------------------------------------------------------------------------------------


def test_a_reconcile_touches_only_its_own_source_and_reports_others_retained(
    kb: KnowledgeBase,
) -> None:
    """A source's sync leaves another source's documents alone and lists them as retained."""
    kb.sync(_docs("w1", "w2"), source="wiki")
    kb.put_doc(_doc("learned"), source="agent")
    result = kb.sync(_docs("w1"), source="wiki")
    assert (result.removed, result.retained) == (("w2",), ("learned",))
    assert _revisions(kb) == {"learned": (1, "agent"), "w1": (1, "wiki")}


def test_none_is_a_source_not_a_wildcard(kb: KnowledgeBase) -> None:
    """source=None reconciles only the unstamped documents, and a named source keeps out of them."""
    kb.sync(_docs("u1", "u2"))
    kb.sync(_docs("w1"), source="wiki")
    assert kb.sync(_docs("w1"), source="wiki").retained == ("u1", "u2")
    result = kb.sync([], allow_mass_delete=True)
    assert (result.removed, result.retained) == (("u1", "u2"), ("w1",))
    assert _revisions(kb) == {"w1": (1, "wiki")}


def test_an_absent_document_may_be_created_by_any_source(kb: KnowledgeBase) -> None:
    """A document nobody holds is created by whichever source writes it first."""
    kb.put_doc(_doc("a"), source="agent")
    kb.sync(_docs("w"), source="wiki")
    kb.remove_doc("a", source="agent")
    kb.put_doc(_doc("a"), source="wiki")
    assert _revisions(kb) == {"a": (2, "wiki"), "w": (1, "wiki")}


@pytest.mark.parametrize("verb", ["put_doc", "remove_doc", "sync"])
def test_writing_a_document_another_source_owns_is_refused(
    loom: Loom, kb: KnowledgeBase, verb: str
) -> None:
    """put_doc, remove_doc and sync of another source's document raise SourceConflictError."""
    kb.put_doc(_doc("learned"), source="agent")
    position = loom.log.position
    with pytest.raises(SourceConflictError) as refused:
        if verb == "put_doc":
            kb.put_doc(_doc("learned", "rewritten"), source="wiki")
        elif verb == "remove_doc":
            kb.remove_doc("learned", source="wiki")
        else:
            kb.sync([_doc("fresh"), _doc("learned")], source="wiki")
    assert (refused.value.writer, refused.value.owners) == ("wiki", {"learned": "agent"})
    assert loom.log.position == position
    assert _revisions(kb) == {"learned": (1, "agent")}


# -- the mass-delete guard ----------------------------------------------------------------------


def test_an_empty_sync_of_a_source_with_documents_is_refused(loom: Loom, kb: KnowledgeBase) -> None:
    """sync([]) of a source owning documents raises MassDeleteRefusedError saying how many."""
    kb.sync(_docs("a", "b", "c"), source="wiki")
    position = loom.log.position
    with pytest.raises(MassDeleteRefusedError, match="would remove 3 of the 3 documents"):
        kb.sync([], source="wiki")
    assert loom.log.position == position
    assert len(kb.list_docs()) == 3


def test_removing_more_than_the_guard_s_fraction_is_refused(loom: Loom, kb: KnowledgeBase) -> None:
    """A sync removing 3 of 4 documents (over the default half) is refused and appends nothing."""
    kb.sync(_docs("a", "b", "c", "d"))
    position = loom.log.position
    with pytest.raises(MassDeleteRefusedError, match="would remove 3 of the 4") as refused:
        kb.sync(_docs("a"))
    assert (refused.value.would_remove, refused.value.owned) == (3, 4)
    assert loom.log.position == position


def test_removing_up_to_the_guard_s_fraction_is_allowed(kb: KnowledgeBase) -> None:
    """A sync removing exactly half of the source's documents goes through."""
    kb.sync(_docs("a", "b", "c", "d"))
    assert kb.sync(_docs("a", "b")).removed == ("c", "d")


def test_allow_mass_delete_overrides_the_guard(kb: KnowledgeBase) -> None:
    """allow_mass_delete=True lets an empty sync remove every document of the source."""
    kb.sync(_docs("a", "b", "c"))
    assert kb.sync([], allow_mass_delete=True).removed == ("a", "b", "c")
    assert kb.list_docs() == []


def test_the_guard_s_fraction_is_an_option_of_the_knowledge_base(loom: Loom) -> None:
    """Opened with max_removal_fraction=0.8, a sync may remove 3 of 4 documents."""
    kb = open_knowledge_base(loom, "lenient", max_removal_fraction=0.8)
    kb.sync(_docs("a", "b", "c", "d"))
    assert kb.sync(_docs("a")).removed == ("b", "c", "d")


def test_an_empty_sync_of_a_source_with_no_documents_is_allowed(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """sync([]) of a source that owns nothing is not a mass delete: it records the reconcile."""
    kb.put_doc(_doc("learned"), source="agent")
    position = loom.log.position
    assert kb.sync([], source="wiki") == SyncResult(
        written=(), unchanged=(), removed=(), retained=("learned",)
    )
    assert [type(e) for e in _appended(loom, position)] == [CorpusReconciled]


def test_a_sync_of_a_revised_and_removed_document_leaves_no_passage_behind(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """After syncs that revise, shrink and drop documents, the rows are exactly the counted ones."""
    long_text = "\n\n".join(f"para {n} " + "x" * 900 for n in range(3))
    kb.sync([_doc("a", long_text), _doc("b", long_text), _doc("c")])
    kb.sync([_doc("a", "short now"), _doc("b", long_text), _doc("c")])
    kb.sync([_doc("b", long_text), _doc("c")])
    counted = sorted(
        f"{record.id}#{index}" for record in kb.list_docs() for index in range(record.passage_count)
    )
    assert (
        sorted(str(entry.id) for entry in _entries(loom))
        == counted
        == [
            "b#0",
            "b#1",
            "b#2",
            "c#0",
        ]
    )


def test_sync_events_carry_the_revision_and_the_passages_as_cut(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """A sync's DocumentWritten holds the new revision and its cut passages; a removal its last."""
    kb.sync(_docs("a", "b"))
    position = loom.log.position
    kb.sync([_doc("a", "edited")])
    written, removed, _ = _appended(loom, position)
    assert isinstance(written, DocumentWritten)
    assert (written.doc_id, written.revision, written.passages) == ("a", 2, ["edited"])
    assert isinstance(removed, DocumentRemoved)
    assert (removed.doc_id, removed.revision) == ("b", 1)


@pytest.mark.parametrize("source", ["", " ", "\t\n"])
def test_a_blank_source_is_refused(kb: KnowledgeBase, source: str) -> None:
    """A source names the one writer allowed to revise a document. ``""`` was taken, shown as
    no source at all, and the refusal that followed told the user to sync "without --source",
    the very command just refused."""
    position = kb.loom.log.position
    with pytest.raises(InvalidOptionError, match="source"):
        kb.put_doc(Doc(id="a.md", text="x"), source=source)
    with pytest.raises(InvalidOptionError, match="source"):
        kb.sync([Doc(id="a.md", text="x")], source=source)
    assert kb.loom.log.position == position  # nothing written
    kb.sync([Doc(id="a.md", text="x")], source=" ops ")  # the control: padded is a name


_SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token's shape
"""Made up, in two pieces so no scanner takes this file for a leak."""


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (Doc(id="leak.md", text=f"rotate {_SECRET} monthly"), "passages[0]"),
        (Doc(id="leak.md", text="rotate monthly", title=f"key {_SECRET}"), "title"),
        (Doc(id="leak.md", text="rotate monthly", meta={"owner": f"key {_SECRET}"}), "meta.owner"),
    ],
    ids=["passage", "title", "meta"],
)
@pytest.mark.parametrize("encryption", [None, MasterKey(bytes(range(32)))], ids=["clear", "sealed"])
def test_a_dry_run_in_refuse_mode_refuses_what_the_sync_would_refuse(
    db_url: str, doc: Doc, field: str, encryption: MasterKey | None
) -> None:
    """With the log's redactor set to refuse, a document the sync would refuse for a secret is
    refused by the plan too, naming the same field: the dry run of `loom knowledge sync` had
    planned it as written, and `--apply` then refused the whole sync. Nothing is appended. Both
    name the document as well as the field (the append's refusal named only the field). A
    ``put_doc`` of it names the field alike, sealed or clear: an encrypted log, which redacts
    the title and passages before sealing them, had said ``passages.0``."""
    with Loom(db_url, redactor=Redactor(mode="refuse"), encryption=encryption) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        docs = [_doc("fine"), doc]
        with pytest.raises(SecretRefusedError) as planned:
            kb.plan_sync(docs, source="wiki")
        position = loom.log.position
        with pytest.raises(SecretRefusedError) as synced:
            kb.sync(docs, source="wiki")
        assert loom.log.position == position
        assert (planned.value.pattern, planned.value.path) == (
            synced.value.pattern,
            synced.value.path,
        )
        assert synced.value.path == f"{DocumentWritten.TOPIC}.{field} of document 'leak.md'"
        with pytest.raises(SecretRefusedError) as put:
            kb.put_doc(doc, source="wiki")
        assert put.value.path == f"{DocumentWritten.TOPIC}.{field}"
        assert loom.log.position == position


def test_a_dry_run_in_redact_mode_refuses_meta_whose_keys_collide_as_the_sync_would(
    db_url: str,
) -> None:
    """Two meta keys holding secrets that redact to the same marker are refused in any mode
    (one entry would be lost). The plan refuses them as the sync does, naming the document;
    before, the dry run planned the document as written and the sync then refused the whole
    sync, naming only the event's field (ADR 0012, amended "colliding meta")."""
    meta = {_SECRET: "ci", _SECRET.replace("a1", "z9"): "deploy"}
    with Loom(db_url, redactor=Redactor(mode="redact")) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        docs = [_doc("fine"), Doc(id="leak.md", text="rotate monthly", meta=meta)]
        with pytest.raises(RedactedKeysCollideError) as planned:
            kb.plan_sync(docs, source="wiki")
        position = loom.log.position
        with pytest.raises(RedactedKeysCollideError) as synced:
            kb.sync(docs, source="wiki")
        assert loom.log.position == position
        assert planned.value.path == synced.value.path
        assert synced.value.path == f"{DocumentWritten.TOPIC}.meta of document 'leak.md'"
        assert _SECRET not in str(synced.value)


def test_a_dry_run_in_redact_mode_plans_a_document_holding_a_secret_as_written(
    db_url: str,
) -> None:
    """The control: redacting (the default) stores the document with a marker, so the plan and
    the sync both write it."""
    with Loom(db_url, redactor=Redactor(mode="redact")) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        leak = Doc(id="leak.md", text=f"rotate {_SECRET} monthly", meta={"by": f"k {_SECRET}"})
        docs = [_doc("fine"), leak]
        assert kb.plan_sync(docs, source="wiki") == kb.sync(docs, source="wiki")
        assert kb.list_docs()[1].id == "leak.md"
        redactor = loom.settings.redactor
        assert redactor is not None and redactor.total == 2  # the write's: the plans count none


class _Confidential(Redactor):
    """A team's own rule on top of the patterns: anything marked CONFIDENTIAL is refused."""

    def value(self, value: object, *, path: str) -> object:
        if "CONFIDENTIAL" in repr(value):
            raise SecretRefusedError(pattern="confidential", path=path)
        return super().value(value, path=path)


def test_a_dry_run_refuses_what_a_redactor_subclass_s_own_rule_refuses(db_url: str) -> None:
    """``Redactor.check`` made a plain ``Redactor`` of the patterns, so a subclass's own rule
    did not run in the plan, which planned as written what the sync then refused (a
    regression review): the check runs on a copy of the redactor itself."""
    with Loom(db_url, redactor=_Confidential(mode="refuse")) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        docs = [Doc(id="a.md", text="Rotate the logs.", meta={"class": "CONFIDENTIAL"})]
        with pytest.raises(SecretRefusedError) as planned:
            kb.plan_sync(docs, source="wiki")
        assert planned.value.path == f"{DocumentWritten.TOPIC}.meta of document 'a.md'"
