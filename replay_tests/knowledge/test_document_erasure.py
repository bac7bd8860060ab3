"""Erasing a corpus document (ADR 0055), on SQLite and PostgreSQL.

The claims: with encryption on, a document's title and passages are sealed under its own key
in the log; erasing it (every revision) destroys the key, appends a forget event, and the
corpus index forgets it on that event (manifest, passage index, search); a rebuild from
position 0 ends in the same state; other documents retrieve identically; ``loom verify``
passes before and after; the raw database holds none of its planted text; an unknown document
is a typed error that writes nothing; a write after the erasure is refused typed; an
execution that retrieved it replays as recorded (its decision is its own, sealed under its
own key).
"""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from loom_knowledge import Doc, Passage, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_knowledge.corpus.events import DocumentWritten
from loom_knowledge.corpus.keys import stream_name
from loom_knowledge.corpus.knowledge_base import corpus_index, drop_corpus
from loom_knowledge.corpus.retrieval import Mode
from loom_knowledge.tools.audit import audit
from loom_knowledge.tools.audit_render import render_text
from loom_memory import HashingEmbedder
from loom_runtime import (
    EncryptionOffError,
    ErasureSubjectError,
    FlowContext,
    Loom,
    MasterKey,
    SubjectErasedError,
    Tampering,
    catch_up,
    keyring_for,
    rebuild,
    stream_id,
    verify_keys,
)
from loom_runtime.erasure import forget_events
from replay_tests.runtime.test_erasure import _raw_bytes_postgres, _raw_bytes_sqlite
from replay_tests.runtime.test_verify_keys import delete_key_row, run_sql

KEY = MasterKey(b"d" * 32)


def _raw(url: str) -> bytes:
    """The raw database after erasure: the SQLite files (main and WAL, after checkpoint and
    VACUUM), or PostgreSQL's tables and ``pg_dump`` with every ``bytea`` value (the log's
    event rows, dumped as hex) decoded, so text stored in them is found by a grep."""
    if url.startswith("sqlite"):
        return _raw_bytes_sqlite(url)
    dumped = _raw_bytes_postgres(url)
    decoded = [bytes.fromhex(h.decode()) for h in re.findall(rb"\\x((?:[0-9a-f]{2})+)", dumped)]
    return dumped + b"".join(decoded)


SCOPE = "handbook"


def _docs(secret: str, kept: str) -> list[Doc]:
    return [
        Doc(id="people/alice", title=f"Alice {secret}", text=f"Alice's address is {secret}."),
        Doc(id="ops/backups", title="Backups", text=f"Backups run nightly; tag {kept}."),
        Doc(id="ops/oncall", title="On-call", text="The on-call rota changes on Mondays."),
    ]


def _state(loom: Loom) -> tuple[object, ...]:
    """What a reader can see of the corpus: manifest, passages, searches, history, erasures."""
    kb = open_knowledge_base(loom, SCOPE)
    index = corpus_index(loom)
    kb.refresh()
    history = index.revision_history(
        SCOPE, {("people/alice", 1), ("people/alice", 2), ("ops/backups", 1)}
    )
    return (
        kb.list_docs(),
        kb.passages(),
        kb.search("address Alice backups nightly", limit=10),
        history,
        index.erasures(SCOPE),
    )


def test_an_erased_document_is_forgotten_everywhere_and_a_rebuild_agrees(db_url: str) -> None:
    token = uuid4().hex  # one term of the secret: the index's postings must lose it too
    secret, kept = f"SECRET-{token}", f"KEPT-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs(secret, kept))
        kb.put_doc(Doc(id="people/alice", title="Alice", text=f"Moved; now {secret} too."))
        before_backups = kb.search("backups nightly")
        seen_at = loom.log.position
        assert [p.doc_id for p in kb.search(secret)] == ["people/alice"]
        assert loom.log.verify().problem is None

        dry = loom.erase(document=f"{SCOPE}:people/alice", reason="request", by="dpo", dry_run=True)
        assert not dry.applied and loom.log.position == seen_at  # a dry run writes nothing
        report = loom.erase(document=f"{SCOPE}:people/alice", reason="request", by="dpo")

        subject = document_subject(SCOPE, "people/alice")
        assert report.applied and [s.subject for s in report.subjects] == [subject]
        assert report.subjects[0].events == 2  # both revisions
        assert [e.subjects for _, e in forget_events(loom)] == [(subject,)]
        assert loom.log.verify().problem is None
        assert kb.search(secret) == []
        assert "people/alice" not in {d.id for d in kb.list_docs()}
        assert all(p.doc_id != "people/alice" for p in kb.passages())
        assert kb.search("backups nightly") == before_backups  # others retrieve identically
        past = kb.as_of(seen_at)
        assert all(p.doc_id != "people/alice" for p in past.passages())
        assert past.search(secret) == []
        assert corpus_index(loom).erasures(SCOPE) == {"people/alice": report.position}
        history = corpus_index(loom).revision_history(SCOPE, {("people/alice", 2)})
        assert history == {("people/alice", 2): (report.position, "erased")}
        erased_state = _state(loom)

        drop_corpus(loom)  # a rebuild from position 0: the key is gone, the forget event stays
        assert _state(loom) == erased_state
        with pytest.raises(SubjectErasedError):  # never stored under a destroyed key
            kb.put_doc(Doc(id="people/alice", title="Alice", text="Back again."))
        with pytest.raises(SubjectErasedError):  # a sync whose source still holds it
            kb.sync(_docs(secret, kept))
        with pytest.raises(SubjectErasedError) as planned:  # and its plan, as sync would
            kb.plan_sync(_docs(secret, kept))
        assert planned.value.position == report.position
        assert _state(loom) == erased_state
        # The log holds a kept document's text only sealed; its index (deletable, rebuilt
        # from the log) holds it in clear to search it.
        assert not any(kept.encode() in r.state for r in loom.log.notifications())

    raw = _raw(db_url)
    assert raw.count(secret.encode()) == 0
    assert raw.count(token.encode()) == 0  # nor any of its terms
    assert raw.count(secret.lower().encode()) == 0
    assert b"loom.sealed" in raw and b"ops/backups" in raw  # ids stay in clear
    with Loom(db_url, encryption=KEY) as reopened:
        assert [p.doc_id for p in open_knowledge_base(reopened, SCOPE).search(kept)] == [
            "ops/backups"
        ]


def test_an_interrupted_erasure_run_again_ends_in_the_same_state(db_url: str) -> None:
    """The forget event is appended and the keys are not yet destroyed (a crash between the
    two writes): the index has already forgotten the document; erasing again destroys the key
    with a second forget event, and the index, applying it, stays as it was."""
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs("s", "k"))
        from loom_runtime import erasure

        keyring = erasure.keyring_of(loom, "document")
        destroy = keyring.destroy
        keyring.destroy = lambda subjects, *, position: 0  # type: ignore[method-assign]
        loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
        keyring.destroy = destroy  # type: ignore[method-assign]
        interrupted = _state(loom)
        assert "people/alice" in interrupted[4]
        half_done = verify_keys(loom.log, upto=loom.log.position)  # ADR 0049, amended "verify"
        assert half_done.problem is Tampering.ERASURE_INCOMPLETE
        assert document_subject(SCOPE, "people/alice") in half_done.detail
        again = loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
        assert again.applied and len(forget_events(loom)) == 2
        assert verify_keys(loom.log, upto=loom.log.position).ok
        first = forget_events(loom)[0][0]
        assert _state(loom) == interrupted
        assert corpus_index(loom).erasures(SCOPE) == {"people/alice": first}
        drop_corpus(loom)
        assert _state(loom) == interrupted


def test_verify_finds_a_document_s_deleted_key_row_in_its_sealed_text(db_url: str) -> None:
    """A document's key row deleted by hand (ADR 0049, amended "verify"): its text reads as
    erased, and ``verify_keys`` names the subject at the event that stored its sealed text,
    while the documents erased by ``loom erase`` check out."""
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs("s", "k"))
        loom.erase(document=f"{SCOPE}:ops/oncall", reason="r", by="dpo")
        assert verify_keys(loom.log, upto=loom.log.position).ok
        lost = document_subject(SCOPE, "people/alice")
        written = [
            r.position
            for r in loom.log.notifications(topics=(DocumentWritten.TOPIC,))
            if b"people/alice" in r.state
        ]
        delete_key_row(loom, lost)

        report = verify_keys(loom.log, upto=loom.log.position)

    assert report.problem is Tampering.KEY_MISSING
    assert report.position == written[0]
    assert lost in report.detail


def test_a_clear_title_that_begins_like_a_sealed_text_and_nests_deep_reads_as_clear(
    tmp_path: Path,
) -> None:
    """A document written before encryption was switched on is read in clear; a title that
    began like a sealed text and nested 3,000 brackets made the read's decoder raise
    ``RecursionError`` out of a search (found by an attack review, ADR 0049 amended
    "verify")."""
    deep = 'loom.sealed:{"subject":"x","z":' + "[" * 3000 + "]" * 3000 + "}"
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        open_knowledge_base(loom, SCOPE).sync([Doc(id="a", title=deep, text="alpha beta")])
    with Loom(url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.put_doc(Doc(id="b", title="B", text="gamma"))  # switches encryption on
        [hit] = kb.search("alpha", limit=3)
        assert hit.title == deep
        assert verify_keys(loom.log, upto=loom.log.position).ok


def _looks_sealed(subject: str) -> str:
    """A text shaped exactly like a sealed one (a well-formed envelope): what anyone who
    writes a document can put in its title or body."""
    envelope = {
        "subject": subject,
        "nonce": "bm5ubm5ubm5ubm5u",
        "ciphertext": "Y2NjY2NjY2NjY2NjY2NjY2NjYw==",
    }
    return "loom.sealed:" + json.dumps(envelope, separators=(",", ":"))


def test_a_document_whose_text_looks_sealed_is_indexed_in_clear_in_a_clear_log(
    tmp_path: Path,
) -> None:
    """A document's title and body are outsiders' text. One that began like a sealed text
    (under its own subject, even) was taken for sealed: in a clear log every later write and
    search of the corpus raised ``EncryptionOffError``, for good, since the event stays in the
    log (found by an attack review, ADR 0049 amended "verify"). Nothing is sealed before a
    log's first data key: such a text is clear."""
    fake = _looks_sealed(document_subject(SCOPE, "about-loom"))
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync([Doc(id="about-loom", title=fake, text=f"{fake}\n\nhow loom stores text")])
        kb.put_doc(Doc(id="other", text="unrelated words"))
        assert [p.doc_id for p in kb.search("unrelated")] == ["other"]
        assert kb.search("stores")[0].title == fake
    with Loom(url, encryption=KEY) as loom:  # switched on later: still clear, still indexed
        kb = open_knowledge_base(loom, SCOPE)
        kb.put_doc(Doc(id="sealed-one", text="zebra words"))
        drop_corpus(loom)  # rebuilt from position 0, the clear-era event included
        assert kb.search("stores")[0].title == fake
        assert [p.doc_id for p in kb.search("zebra")] == ["sealed-one"]
        assert verify_keys(loom.log, upto=loom.log.position).ok


def test_a_key_table_that_cannot_be_read_fails_the_read_never_indexes_ciphertext(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nothing can be sealed is read from the key table; an error there (a lock, a
    lost connection) was taken for "no key table", and a sealed revision was indexed as its
    ciphertext, for good (found by a review, ADR 0049 amended "verify")."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import OperationalError

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        open_knowledge_base(loom, SCOPE).sync([Doc(id="a", title="A", text="zebra crossing")])
    execute = Connection.execute

    def locked(self: Connection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        if "min(created_position)" in str(statement):
            raise OperationalError(str(statement), {}, Exception("database is locked"))
        return execute(self, statement, *args, **kwargs)

    with Loom(url, encryption=KEY) as loom:  # a reader that has not read it yet
        kb = open_knowledge_base(loom, SCOPE)
        monkeypatch.setattr(Connection, "execute", locked)
        with pytest.raises(OperationalError):
            drop_corpus(loom)
            kb.search("zebra")
        monkeypatch.undo()
        drop_corpus(loom)
        [hit] = kb.search("zebra")
        assert hit.title == "A"


def test_raising_the_key_rows_positions_does_not_hide_a_deleted_document_key(
    tmp_path: Path,
) -> None:
    """Verify reads no text stored before anything could be sealed (the lowest key row's
    ``created_position``); the rows are untrusted, so one edit raising that position hid a
    document whose key row was deleted (found by a review, ADR 0049 amended "verify"). A
    sealed execution's input bounds it, and a row made after its own sealed data is
    ``key-altered``."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        loom.flow("note")(lambda ctx: ctx.decide("d", lambda: "x"))
        loom.run("note")
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync([Doc(id="alice", title="Alice", text="zebra alice personal data")])
        loom.run("note")
        kb.put_doc(Doc(id="bob", text="giraffe bob"))
        assert verify_keys(loom.log, upto=loom.log.position).ok
        [alice, _] = [r.position for r in loom.log.notifications(topics=(DocumentWritten.TOPIC,))]
        delete_key_row(loom, document_subject(SCOPE, "alice"))
        run_sql(
            loom,
            "UPDATE loom_subject_keys SET created_position = :p "
            "WHERE subject <> 'loom:key-check' AND created_position < :p",
            p=alice,
        )
    with Loom(url, encryption=KEY) as loom:  # a process whose sealed_after is read afresh
        report = verify_keys(loom.log, upto=loom.log.position)
    # The first execution's row, raised past its own input, and alice's lost row after it.
    assert report.problem is Tampering.KEY_ALTERED, report
    assert report.detail.endswith("(1 more problem(s) in the key table)")


def test_erasure_counts_a_clear_revision_that_looks_sealed_as_clear(tmp_path: Path) -> None:
    """Erasure and retention told a document's sealed revisions from its clear ones by their
    look: a revision written in clear before encryption was switched on, whose text looks
    sealed, was counted as sealed (an erase of it alone said "already erased"; with a sealed
    revision after it, it was counted among the erased ones though its text stays in the
    log). Found by a review (ADR 0049, amended "verify")."""
    fake = _looks_sealed(document_subject(SCOPE, "about"))
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        open_knowledge_base(loom, SCOPE).sync([Doc(id="about", title=fake, text=fake)])
    subject = document_subject(SCOPE, "about")
    with Loom(url, encryption=KEY) as loom:
        loom.flow("note")(lambda ctx: ctx.decide("d", lambda: "x"))
        loom.run("note")  # switches encryption on: the document's revision stays clear
        alone = loom.erase(document=f"{SCOPE}:about", reason="r", by="dpo", dry_run=True)
        assert alone.subjects == () and alone.not_erasable == (f"{subject}@1",)
        with pytest.raises(ErasureSubjectError, match="before encryption"):
            loom.erase(document=f"{SCOPE}:about", reason="r", by="dpo")
        open_knowledge_base(loom, SCOPE).put_doc(Doc(id="about", text="zebra new text"))
        dry = loom.erase(document=f"{SCOPE}:about", reason="r", by="dpo", dry_run=True)
        assert [(s.subject, s.events) for s in dry.subjects] == [(subject, 1)]
        assert dry.not_erasable == (f"{subject}@1",)
        retained = loom.retain(older_than=timedelta(microseconds=1), scope=SCOPE, dry_run=True)
        assert f"{subject}@1" in retained.not_erasable


@pytest.mark.parametrize("first", [True, False], ids=["first-write", "after-another"])
def test_a_document_with_nothing_to_seal_is_erased_like_any_other(
    tmp_path: Path, first: bool
) -> None:
    """A document with no title and no passages (an empty text: its meta is all it holds)
    written with encryption on was counted as a revision stored in clear, since nothing of
    it looked sealed: its erasure was refused as "recorded before encryption was switched
    on", which it was not, and it stayed listed. Found by a stateful test of the corpus."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        if not first:
            kb.put_doc(Doc(id="full", text="node disk"), source="a")
        kb.put_doc(Doc(id="empty", text="", meta={"owner": "alice"}), source="a")
        subject = document_subject(SCOPE, "empty")
        dry = loom.erase(document=f"{SCOPE}:empty", reason="r", by="dpo", dry_run=True)
        assert [(s.subject, s.events) for s in dry.subjects] == [(subject, 1)]
        assert dry.not_erasable == ()
        assert loom.erase(document=f"{SCOPE}:empty", reason="r", by="dpo").applied
        assert "empty" not in [doc.id for doc in kb.list_docs()]
        with pytest.raises(SubjectErasedError):  # erased: not written again
            kb.put_doc(Doc(id="empty", text="", meta={"owner": "alice"}), source="a")
        assert verify_keys(loom.log, upto=loom.log.position).ok
        listed = kb.list_docs()
        rebuild(loom.log, corpus_index(loom))
        assert kb.list_docs() == listed


def test_a_process_holding_a_key_another_erased_indexes_none_of_its_text(db_url: str) -> None:
    """A process caches each data key it opens. Another process erased a document this one
    wrote; this one's rebuild of the corpus index then opened the document's revision with
    the cached key and committed its text to the passage store, in every page before the one
    holding the forget event (a page is 500 events: a reader between pages found it, and a
    file not VACUUMed kept it). A fresh process indexes it as erased from the start; so does
    this one now. Found by a stateful test of erasure."""
    with Loom(db_url, encryption=KEY) as writer, Loom(db_url, encryption=KEY) as operator:
        kb = open_knowledge_base(writer, SCOPE)
        kb.put_doc(Doc(id="people/carol", text="Carol lives at zqcarolsecret road"))
        written = writer.log.position
        kb.put_doc(Doc(id="ops/x", text="runbook step"))
        operator.erase(document=f"{SCOPE}:people/carol", reason="r", by="dpo")
        index = corpus_index(writer)
        index.reset()
        catch_up(writer.log, index, upto=written)  # a page that ends before the forget event
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                held = conn.execute(
                    text("SELECT count(*) FROM loom_kb_entries WHERE entry LIKE :planted"),
                    {"planted": "%zqcarolsecret%"},
                ).scalar()
        finally:
            engine.dispose()
        assert held == 0
        catch_up(writer.log, index)
        assert kb.search("zqcarolsecret") == []


def test_bad_document_names_are_typed_errors_that_write_nothing(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        open_knowledge_base(loom, SCOPE).sync(_docs("s", "k"))
        head = loom.log.position
        for named in (f"{SCOPE}:no-such-doc", "no-such-scope:people/alice", "no-colon", ":x"):
            with pytest.raises(ErasureSubjectError):
                loom.erase(document=named, reason="r", by="dpo")
        assert loom.log.position == head
        loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
        with pytest.raises(ErasureSubjectError, match="already erased"):
            loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
    with Loom(db_url) as clear, pytest.raises(EncryptionOffError):
        clear.erase(document=f"{SCOPE}:ops/backups", reason="r", by="dpo")


def test_a_document_ingested_in_clear_is_listed_not_erasable(db_url: str) -> None:
    with Loom(db_url) as clear:
        open_knowledge_base(clear, SCOPE).sync(_docs("s", "k"))
    with Loom(db_url, encryption=KEY) as loom:
        report = loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo", dry_run=True)
        assert report.subjects == ()
        assert report.not_erasable == (f"{document_subject(SCOPE, 'people/alice')}@1",)
        with pytest.raises(ErasureSubjectError, match="before encryption"):
            loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")


def test_an_execution_that_retrieved_an_erased_document_replays_as_recorded(
    db_url: str,
) -> None:
    """Its retrieval decision is the execution's own record, sealed under the execution's
    key: erasing the document does not reach it (erase the execution for that)."""
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs("private-detail", "k"))

        @loom.flow("ask")
        def ask(ctx: FlowContext, question: str) -> list[str]:
            found: list[Passage] = kb.retrieve(question, decide=ctx.decide)
            return [p.doc_id for p in found]

        run = loom.run("ask", question="Alice address")
        assert "people/alice" in run.output
        seen = kb.seen_by(run.execution_id)
        report = loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
        assert loom.replay(run.execution_id).identical
        assert "people/alice" not in loom.run("ask", question="Alice address").output

        # The audit and the corpus as the execution saw it say "erased at P", never the text.
        assert seen.erased() == {"people/alice": report.position}
        assert "people/alice" in {d.id for d in seen.list_docs()}  # it was there then
        assert all(p.doc_id != "people/alice" for p in seen.passages())
        shown = [p for r in audit(loom, run.execution_id).retrievals for p in r.passages]
        alice = [p for p in shown if p.doc_id == "people/alice"]
        others = [p for p in shown if p.doc_id != "people/alice"]
        assert alice and all(
            (p.status, p.ended_position, p.text) == ("erased", report.position, "") for p in alice
        )
        assert all(p.status == "current" and p.text for p in others)
        assert "private-detail" not in render_text(audit(loom, run.execution_id))


def test_without_encryption_documents_are_stored_as_before(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'clear.db'}"
    with Loom(url) as loom:
        open_knowledge_base(loom, SCOPE).sync(_docs("CLEAR-TEXT", "k"))
        stream = stream_id(stream_name(SCOPE))
        written = [e for e in loom.log.events(stream) if isinstance(e, DocumentWritten)]
    assert written[0].passages == ["Alice's address is CLEAR-TEXT."]
    assert written[0].title == "Alice CLEAR-TEXT"


def test_the_cli_erases_a_document_dry_run_first_then_with_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        open_knowledge_base(loom, SCOPE).sync(_docs("s", "k"))
    runner = CliRunner()
    named = f"{SCOPE}:people/alice"
    dry = runner.invoke(app, ["erase", "--document", named, "--reason", "request", "--db", url])
    assert dry.exit_code == 0, dry.output
    assert f"would erase 1 document(s) of document={named}" in dry.output
    applied = runner.invoke(
        app,
        ["erase", "--document", named, "--reason", "request", "--apply", "--json", "--db", url],
    )
    assert applied.exit_code == 0, applied.output
    assert '"applied": true' in applied.output and '"execution_id": null' in applied.output
    unknown = runner.invoke(
        app, ["erase", "--document", f"{SCOPE}:nope", "--reason", "r", "--db", url]
    )
    assert unknown.exit_code == 2 and "never held a document" in unknown.output
    verify = runner.invoke(app, ["verify", "--db", url])
    assert verify.exit_code == 0, verify.output
    search = runner.invoke(app, ["knowledge", "search", "Alice", "--scope", SCOPE, "--db", url])
    assert "people/alice" not in search.output


@pytest.mark.parametrize("how", ["erase", "retain"])
def test_an_applied_erasure_leaves_no_text_in_any_table_before_anything_reads(
    db_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The read models forget on the forget event, but catch up only when read: an erasure
    from the CLI (a cron job's retention run, say) left a scope or memory nobody reads with
    the erased text in clear, in its passage index, term tables and entries, indefinitely.
    An applied erasure catches every read model up to its forget event itself. Every row of
    every table is read raw, with no loom read in between; the text kept is the control."""
    from freezegun import freeze_time

    from loom_memory import EventSourcedMemory, MemoryEntry, PostgresMemoryStore, SqliteMemoryStore
    from loom_runtime.tools.cli import app

    url = db_url
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    docs = _docs("zzcarolstreet", "zzkeptterm")
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        sql = PostgresMemoryStore if "postgresql" in url else SqliteMemoryStore
        memory = EventSourcedMemory(loom, store=sql(loom.log.engine))
        with freeze_time("2026-01-01"):  # old enough for the retention runs
            kb.sync(docs[:1])
            memory.append("dave", [MemoryEntry(content="card zzdaveterm", role="user")])
        for doc in docs[1:]:  # written now; the one above is not synced again (ADR 0053, insync)
            kb.put_doc(doc)
        memory.append("erin", [MemoryEntry(content="mail zzerinterm", role="user")])
        memory.close()
    if how == "erase":
        commands = [
            ["erase", "--document", f"{SCOPE}:people/alice"],
            ["erase", "--memory-key", "memory:dave"],
        ]
    else:
        commands = [
            ["retain", "--older-than", "30d", "--scope", SCOPE],
            ["retain", "--older-than", "30d", "--memory", "memory"],
        ]
    for command in commands:
        done = CliRunner().invoke(app, [*command, "--reason", "r", "--apply", "--db", url])
        assert done.exit_code == 0, done.output

    rows = _table_rows(url)
    assert "zzkeptterm" in rows and "zzerinterm" in rows
    assert "zzcarolstreet" not in rows
    assert "zzdaveterm" not in rows


def test_a_read_model_that_cannot_catch_up_is_named_and_the_erasure_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys are destroyed before the read models catch up, so a failure there does not
    undo the erasure; the command names the read model on stderr and exits 1, and the
    report lists it, while the read models that could catch up did."""
    import loom_runtime.projection
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        open_knowledge_base(loom, SCOPE).sync(_docs("zzcarolstreet", "zzkeptterm"))
    catch_up = loom_runtime.projection.catch_up

    def failing(log: object, projection: object, **kwargs: object) -> int:
        if getattr(projection, "name", "") == "knowledge":
            raise OSError("disk full\nsecond line")
        return catch_up(log, projection, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loom_runtime.projection, "catch_up", failing)
    named = ["erase", "--document", f"{SCOPE}:people/alice", "--reason", "r", "--db", url]
    done = CliRunner().invoke(app, [*named, "--apply", "--json"])
    assert done.exit_code == 1, done.output
    assert "warning: read model knowledge: disk full; it still holds" in done.stderr
    assert "second line" not in done.stderr
    report = json.loads(done.stdout)
    assert report["applied"] and report["unpurged"] == ["knowledge: disk full"]
    assert "zzcarolstreet" in _table_rows(url)
    monkeypatch.setattr(loom_runtime.projection, "catch_up", catch_up)
    again = CliRunner().invoke(app, [*named, "--apply"])
    assert again.exit_code == 2 and "already erased" in again.output  # the erasure stood
    doctor = CliRunner().invoke(app, ["doctor", "--db", url])
    assert doctor.exit_code == 0, doctor.output
    rows = _table_rows(url)
    assert "zzkeptterm" in rows and "zzcarolstreet" not in rows


def test_a_read_model_that_cannot_even_be_opened_leaves_the_erasure_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening a package's read models can fail too (a stemmed store without its extra, a
    lock): that failure, after the keys are destroyed, raised out of the erasure, so its
    report was lost and nothing else was purged. It is listed in ``unpurged`` like a failed
    catch-up, logged by name, and the other read models still purge."""
    import loom_knowledge.corpus.knowledge_base
    from loom_memory import EventSourcedMemory, MemoryEntry, SqliteMemoryStore

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        open_knowledge_base(loom, SCOPE).sync(_docs("zzcarolstreet", "zzkeptterm"))
        memory = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
        memory.append("dave", [MemoryEntry(content="card zzdaveterm", role="user")])
        memory.close()

    def unopenable(log: object, *, unopened: object = None) -> list[object]:
        raise RuntimeError("stemming needs the snowballstemmer package\nmore")

    monkeypatch.setattr(loom_knowledge.corpus.knowledge_base, "corpus_projections", unopenable)
    with Loom(url, encryption=KEY) as loom:
        report = loom.erase(memory_key="memory:dave", reason="r", by="dpo")
    assert report.applied
    assert report.unpurged == ("knowledge: stemming needs the snowballstemmer package",)
    assert "read model knowledge did not catch up" in caplog.text
    assert "zzdaveterm" not in _table_rows(url)


def _table_rows(url: str, prefix: str = "") -> str:
    """Every row of every table (whose name starts with ``prefix``) of the database at
    ``url``, read raw (no loom read that would catch a read model up first), bytes as bytes."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t.startswith(prefix)]
            rows = [conn.execute(text(f'SELECT * FROM "{name}"')).all() for name in tables]
    finally:
        engine.dispose()
    return repr([[_raw_values(row) for row in found] for found in rows])


def _raw_values(row: Any) -> tuple[Any, ...]:
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)


@pytest.mark.parametrize("write", ["put_doc", "sync"])
def test_a_write_racing_the_erasure_is_refused_and_stores_nothing(db_url: str, write: str) -> None:
    """A write that read the document's key live just before another process erased it is
    refused typed by its own append, which reads the key again in its transaction: nothing is
    stored, never a text sealed under the destroyed key. A sync that writes other documents
    too is refused whole (one append). A rebuild agrees, and the next write is refused too."""
    racing = f"RACING-{uuid4().hex}"
    alice = document_subject(SCOPE, "people/alice")
    with Loom(db_url, encryption=KEY) as loom, Loom(db_url, encryption=KEY) as other:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs("s", "k"))
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        ensure = keyring.ensure

        def erased_meanwhile(subject: str, *, position: int) -> object:
            aead = ensure(subject, position=position)  # read live, as the write goes on
            if subject == alice:
                other.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
            return aead

        keyring.ensure = erased_meanwhile  # type: ignore[assignment,method-assign]
        edited = Doc(id="people/alice", title="Alice", text=f"Now {racing}.")
        try:
            with pytest.raises(SubjectErasedError) as refused:
                if write == "put_doc":
                    kb.put_doc(edited)
                else:
                    new = Doc(id="ops/new", title="New", text=f"A new page, {racing} too.")
                    kb.sync([edited, *_docs("s", "k")[1:], new])
        finally:
            keyring.ensure = ensure  # type: ignore[method-assign]
        [(forget_position, _)] = forget_events(loom)
        assert f"forget event at log position {forget_position}" in str(refused.value)
        assert loom.log.position == forget_position  # nothing appended after the erasure
        assert kb.search(racing) == [] and kb.search("Alice") == []
        assert "ops/new" not in {d.id for d in kb.list_docs()}
        raced = _state(loom)
        drop_corpus(loom)
        assert _state(loom) == raced
        with pytest.raises(SubjectErasedError):
            kb.put_doc(Doc(id="people/alice", title="Alice", text="Again."))
        assert loom.log.verify().problem is None
    raw = _raw(db_url)
    assert raw.count(racing.encode()) == 0


@pytest.mark.waits  # the writer is given 1 s to reach the key row
def test_a_sync_waits_for_a_document_key_being_destroyed_and_is_refused(db_url: str) -> None:
    """A sync whose append reaches a document's key row while another transaction is
    destroying it waits for that transaction and is refused whole (on PostgreSQL the rows are
    read ``FOR SHARE``; a plain read would see the last committed key and store the sync
    under a key nobody holds). Both documents stay unwritten."""
    racing = f"RACING-{uuid4().hex}"
    outcome: dict[str, object] = {}
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs("s", "k"))
        before = loom.log.position
        edited = Doc(id="people/alice", title="Alice", text=f"Now {racing}.")
        new = Doc(id="ops/new", title="New", text=f"A new page, {racing} too.")

        def sync() -> None:
            try:
                outcome["result"] = kb.sync([edited, *_docs("s", "k")[1:], new])
            except BaseException as exc:  # the refusal is what the test looks for
                outcome["error"] = exc

        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                destroying = conn.begin()
                conn.execute(
                    text(
                        "UPDATE loom_subject_keys SET wrapped_key = NULL, erased_position = 999"
                        " WHERE subject = :subject"
                    ),
                    {"subject": document_subject(SCOPE, "people/alice")},
                )
                writer = threading.Thread(target=sync)
                writer.start()
                writer.join(1)  # the append reaches the key row while it is being destroyed
                destroying.commit()
        finally:
            engine.dispose()
        writer.join(30)
        assert not writer.is_alive()
        assert isinstance(outcome.get("error"), SubjectErasedError), outcome
        assert "forget event at log position 999" in str(outcome["error"])
        assert loom.log.position == before
        assert kb.search(racing) == []


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_vector_and_hybrid_retrieval_forget_an_erased_document(tmp_path: Path, mode: Mode) -> None:
    """The retriever's held passages, vectors and term index (current and as-of) are stacked
    again after a forget event, so neither search returns the erased text."""
    url = f"sqlite:///{tmp_path / 'v.db'}"
    with Loom(url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE, embedder=HashingEmbedder(), min_score=0.0)
        kb.sync(_docs("hidden-word", "k"))
        at = loom.log.position
        assert "people/alice" in {p.doc_id for p in kb.search("Alice hidden-word", mode=mode)}
        past = kb.as_of(at)
        assert "people/alice" in {p.doc_id for p in past.search("Alice", mode=mode)}
        loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
        found = kb.search("Alice hidden-word address", mode=mode, limit=10)
        assert found and all(p.doc_id != "people/alice" for p in found)
        then = kb.as_of(at).search("Alice hidden-word address", mode=mode, limit=10)
        assert then and all(p.doc_id != "people/alice" for p in then)
        assert all(p.doc_id != "people/alice" for p in past.search("Alice", mode=mode))


class _Crash(BaseException):
    """The process dies in the middle of the index's purge."""


def test_a_crash_mid_purge_leaves_the_index_as_it_was_and_the_next_read_purges(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge is written in the page's transaction with the index's position: a crash after
    the passages were deleted (the erasure's own catch-up, after the keys were destroyed)
    rolls both back, and the next catch-up applies it whole."""
    from loom_knowledge.corpus.corpus_index import CorpusIndex

    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(_docs("crash-word", "k"))
        before = _state(loom)
        purge = CorpusIndex._forgotten

        def crashing(self: CorpusIndex, conn: object, position: int, event: object) -> None:
            purge(self, conn, position, event)  # type: ignore[arg-type]
            raise _Crash

        monkeypatch.setattr(CorpusIndex, "_forgotten", crashing)
        with pytest.raises(_Crash):
            loom.erase(document=f"{SCOPE}:people/alice", reason="r", by="dpo")
        monkeypatch.setattr(CorpusIndex, "_forgotten", purge)
        assert keyring_for(loom.log.engine).live([document_subject(SCOPE, "people/alice")]) == []
        index = corpus_index(loom)
        assert index.erasures(SCOPE) == {}
        assert [p.doc_id for p in index.search_passages(SCOPE, "crash", limit=5)] == [
            "people/alice"
        ]
        after = _state(loom)  # catches up: the purge applied whole
        assert after != before and "people/alice" not in {d.id for d in after[0]}  # type: ignore[attr-defined]
        drop_corpus(loom)
        assert _state(loom) == after


def test_a_document_id_with_a_line_break_forges_no_line_of_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure's report printed the selector and each subject's name as they are: a
    document id (corpus text, which a sync takes from files) holding a line break printed a
    line loom did not write. Each report line stays one line, the break spelt out."""
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    doc_id = "people/x\nFORGED: nothing was erased"
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        open_knowledge_base(loom, SCOPE).sync([Doc(id=doc_id, title="X", text="x's note.")])
    runner = CliRunner()
    for apply in ([], ["--apply"]):
        shown = runner.invoke(
            app, ["erase", "--document", f"{SCOPE}:{doc_id}", "--reason", "r", *apply, "--db", url]
        )
        assert shown.exit_code == 0, shown.output
        assert " 1 document(s) of document=" in shown.output, shown.output  # the control
        lines = shown.output.splitlines()
        assert not [line for line in lines if line.lstrip().startswith("FORGED")], shown.output
