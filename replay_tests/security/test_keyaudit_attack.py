"""What decides whether a stored text is sealed must not be a table anyone with SQL access can
edit (ADR 0049, amended "sealed floor"), on SQLite and PostgreSQL.

``loom verify`` and the corpus index told a document's sealed texts from an outsider's clear
ones by the lowest ``created_position`` among the key rows: deleting the first document's row
(or raising the rows' positions) moved that floor past its texts, so verify said ok and a
rebuild indexed the ciphertext as the document's text. Dropping or renaming the key table made
verify and doctor pass, every execution read as erased and ``loom erase`` say "already erased"
with no forget event. A key table missing a column crashed every command opened with the
master key. Each test here failed before.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_knowledge.corpus.events import DocumentWritten
from loom_knowledge.corpus.knowledge_base import drop_corpus
from loom_memory import EventSourcedMemory, InMemoryMemoryStore, MemoryEntry
from loom_memory.erasure import memory_subject
from loom_memory.events import MemoryAppended, memory_stream
from loom_runtime import FlowContext, Loom, MasterKey, Tampering, VerifyReport, keyring_for
from loom_runtime import verify_keys as _verify_keys
from loom_runtime.erasure import forget_events
from loom_runtime.errors import LogCorruptError
from replay_tests.knowledge.test_document_erasure import _looks_sealed
from replay_tests.runtime.test_verify_keys import delete_key_row, run_sql

KEY_BYTES = b"a" * 32
KEY = MasterKey(KEY_BYTES)
SCOPE = "s"
_ENVELOPE = "loom.sealed:"


def verify_keys(loom: Loom) -> VerifyReport:
    """The key audit of ``loom``'s log up to its head, read by a process of its own: nothing
    this one remembered of the key table (``sealed_after``) stands in for the table."""
    with Loom(_url(loom), encryption=KEY) as fresh:
        return _verify_keys(fresh.log, upto=fresh.log.position)


def _url(loom: Loom) -> str:
    return loom.settings.url.render_as_string(hide_password=False)


def _written_at(loom: Loom, doc_id: str) -> int:
    return next(
        r.position
        for r in loom.log.notifications(topics=(DocumentWritten.TOPIC,))
        if doc_id.encode() in r.state
    )


def _served(url: str, *, encryption: MasterKey | None = KEY) -> list[str]:
    """Every title and passage text the corpus serves after a rebuild from position 0, read
    by a process of its own."""
    with Loom(url, encryption=encryption) as loom:
        drop_corpus(loom)
        kb = open_knowledge_base(loom, SCOPE)
        return [text for p in kb.passages() for text in (p.text, p.title or "")]


@pytest.fixture
def two_documents(db_url: str) -> Iterator[Loom]:
    """A log whose only sealed data is two documents, ``alpha`` synced first (its key is the
    log's first data key), then ``beta`` by a later sync (a key made at a later position)."""
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync([Doc(id="alpha.md", title="Alpha", text="alpha private text about databases")])
        kb.put_doc(Doc(id="beta.md", title="Beta", text="beta text about queues"))
        assert _verify_keys(loom.log, upto=loom.log.position).ok
        yield loom


def test_deleting_the_first_document_s_key_row_is_key_missing_and_never_serves_ciphertext(
    two_documents: Loom,
) -> None:
    loom = two_documents
    alpha = _written_at(loom, "alpha.md")
    delete_key_row(loom, document_subject(SCOPE, "alpha.md"))

    report = verify_keys(loom)

    assert report.problem is Tampering.KEY_MISSING, report
    assert report.position == alpha
    assert document_subject(SCOPE, "alpha.md") in report.detail
    served = _served(_url(loom))
    assert not [text for text in served if text.startswith(_ENVELOPE)]
    assert "beta text about queues" in served  # the intact document is served as before


def test_raising_every_key_row_s_position_to_the_head_is_key_altered_and_serves_no_ciphertext(
    two_documents: Loom,
) -> None:
    """No sealed execution bounds the rows here: the log holds documents alone."""
    loom = two_documents
    run_sql(
        loom,
        "UPDATE loom_subject_keys SET created_position = :p WHERE subject <> 'loom:key-check'",
        p=loom.log.position,
    )

    report = verify_keys(loom)

    assert report.problem is Tampering.KEY_ALTERED, report
    assert report.position == _written_at(loom, "alpha.md")
    served = _served(_url(loom))
    assert not [text for text in served if text.startswith(_ENVELOPE)]


def test_a_key_row_made_past_the_log_s_head_is_key_altered(db_url: str) -> None:
    """A key made whose write never landed holds no data to compare with; a position past
    the head is a row no loom wrote (keys are made at the head, before their write)."""
    with Loom(db_url, encryption=KEY) as loom:
        open_knowledge_base(loom, SCOPE).put_doc(Doc(id="a", text="alpha"))
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        ghost = document_subject(SCOPE, "ghost")
        keyring.create(ghost, position=loom.log.position)
        assert verify_keys(loom).ok
        run_sql(
            loom,
            "UPDATE loom_subject_keys SET created_position = :p WHERE subject = :s",
            p=loom.log.position + 1_000,
            s=ghost,
        )

        report = verify_keys(loom)

    assert report.problem is Tampering.KEY_ALTERED, report
    assert ghost in report.detail


def test_deleting_the_first_memory_key_s_row_is_key_missing(db_url: str) -> None:
    """Memory keys share the path: their sealed entries are read from ``LogEvent.SEALED``."""
    with Loom(db_url, encryption=KEY) as loom:
        memory = EventSourcedMemory(loom, store=InMemoryMemoryStore())
        memory.append("alice", [MemoryEntry(content="alice's address", id="a1")])
        memory.append("bob", [MemoryEntry(content="bob", id="b1")])
        memory.close()
        first = next(
            r.position
            for r in loom.log.notifications(topics=(MemoryAppended.TOPIC,))
            if r.stream == memory_stream("memory", "alice")
        )
        delete_key_row(loom, memory_subject("memory", "alice"))

        report = verify_keys(loom)

    assert report.problem is Tampering.KEY_MISSING, report
    assert report.position == first


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


@pytest.mark.parametrize(
    "remove",
    ["DROP TABLE loom_subject_keys", "ALTER TABLE loom_subject_keys RENAME TO old_keys"],
    ids=["dropped", "renamed"],
)
def test_a_key_table_gone_is_key_missing_and_no_erasure_says_already_erased(
    db_url: str, remove: str
) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        first = loom.run("note", text="alice's address").execution_id
        loom.run("note", text="bob's")
        created = next(r.position for r in loom.log.notifications() if r.stream == first)
        run_sql(loom, remove)

    report = verify_keys(loom)

    assert report.problem is Tampering.KEY_MISSING, report
    assert report.position == created
    assert "loom_subject_keys" in report.detail and "gone" in report.detail
    with Loom(db_url, encryption=KEY) as reopened:
        with pytest.raises(LogCorruptError, match="no key table"):
            reopened.erase(execution=first, reason="r", by="dpo")
        assert forget_events(reopened) == []


def test_a_clear_log_s_document_shaped_like_a_sealed_text_is_no_alarm_and_not_served(
    db_url: str,
) -> None:
    """The control: a log never encrypted holds no key table and no sealed execution, so a
    document whose every text is shaped like a sealed one (what anyone who writes one can
    do) is no alarm; nor is it served as text, nor does it stop the corpus."""
    fake = _looks_sealed(document_subject(SCOPE, "fake"))
    with Loom(db_url) as loom:
        _register(loom)
        loom.run("note", text="plain")
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync([Doc(id="fake", title=fake, text=fake), Doc(id="plain", text="zebra words")])
        assert [p.doc_id for p in kb.search("zebra")] == ["plain"]
        url = _url(loom)
        report = _verify_keys(loom.log, upto=loom.log.position)
    assert report.ok and report.checked == 0
    served = _served(url, encryption=None)
    assert "zebra words" in served
    assert fake not in served


def test_a_key_table_missing_a_column_is_a_typed_error_with_the_master_key(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        loom.run("note", text="x")
        run_sql(loom, "ALTER TABLE loom_subject_keys DROP COLUMN erased_position")
    with Loom(db_url, encryption=KEY) as reopened, pytest.raises(LogCorruptError) as raised:
        _ = reopened.log
    assert "the key table (loom_subject_keys) could not be read" in str(raised.value)


def test_the_cli_with_the_master_key_says_the_key_table_could_not_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        _register(loom)
        loom.run("note", text="x")
        run_sql(loom, "ALTER TABLE loom_subject_keys DROP COLUMN erased_position")
    monkeypatch.setenv("LOOM_MASTER_KEY", base64.b64encode(KEY_BYTES).decode())
    for command in (["verify"], ["executions", "list"]):
        result = CliRunner().invoke(app, [*command, "--db", url])
        assert result.exit_code in (1, 2), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), command
        assert "key table (loom_subject_keys) could not be read" in " ".join(result.output.split())


@pytest.mark.parametrize("keyed", [True, False], ids=["master key set", "no master key"])
def test_doctor_says_a_gone_key_table_is_no_encryption_and_fails_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    """Doctor printed "encryption: on: the master key opens the key table" whenever a key
    was configured, the table gone or not, and checked the keys only where a table was: a
    dropped key table passed doctor whole (integrity review)."""
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        _register(loom)
        loom.run("note", text="alice's address")
        run_sql(loom, "DROP TABLE loom_subject_keys")
    if keyed:
        monkeypatch.setenv("LOOM_MASTER_KEY", base64.b64encode(KEY_BYTES).decode())
    else:
        monkeypatch.delenv("LOOM_MASTER_KEY", raising=False)
    result = CliRunner().invoke(app, ["doctor", "--db", url])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "opens the key table" not in said
    assert "key-missing" in said and "gone" in said
