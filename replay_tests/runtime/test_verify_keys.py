"""``loom verify`` checks the key table against the log (ADR 0049, amended "verify"), on SQLite
and PostgreSQL.

The chain covers the events, not ``loom_subject_keys``: a key row deleted, or set to
destroyed, by anyone with SQL access (no master key needed) made an execution read as erased,
and verify said ok. An erasure interrupted between its forget event and its keys left the
forget log saying a subject was erased while its data still opened, and verify said ok too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from loom_runtime import (
    ErasedError,
    FlowContext,
    Labels,
    Loom,
    MasterKey,
    Tampering,
    verify_keys,
    verify_log,
)
from loom_runtime.erasure import forget_events

KEY = MasterKey(b"v" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


@pytest.fixture
def sealed(db_url: str) -> Iterator[Loom]:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        yield loom


def _keys(loom: Loom) -> Any:
    """What ``loom verify`` checks after the chain: the key table against the log."""
    chain = verify_log(loom.log)
    assert chain.ok, chain
    return verify_keys(loom.log, upto=loom.log.position)


def run_sql(loom: Loom, statement: str, **parameters: object) -> None:
    """Run ``statement`` on the log's database as anyone with SQL access can."""
    engine = create_engine(loom.settings.url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), parameters)
    finally:
        engine.dispose()


def delete_key_row(loom: Loom, subject: str) -> None:
    """Delete ``subject``'s key row as anyone with SQL access can: no master key needed."""
    run_sql(loom, "DELETE FROM loom_subject_keys WHERE subject = :s", s=subject)


def _subject(execution_id: UUID) -> str:
    return f"execution:{execution_id}"


def _created_at(loom: Loom, execution_id: UUID) -> int:
    [first] = [r.position for r in loom.log.notifications() if r.stream == execution_id][:1]
    return first


def test_an_encrypted_log_with_erasures_checks_out(sealed: Loom) -> None:
    runs = [sealed.run("note", text=f"t{i}", labels=Labels(user=f"u{i % 2}")) for i in range(4)]
    sealed.erase(user="u1", reason="request", by="dpo")
    report = _keys(sealed)
    assert report.ok, report
    assert report.checked == len(runs)


def test_a_deleted_key_row_is_reported_where_the_execution_s_sealed_data_begins(
    sealed: Loom,
) -> None:
    kept = sealed.run("note", text="kept").execution_id
    lost = sealed.run("note", text="alice's address").execution_id
    delete_key_row(sealed, _subject(lost))

    report = _keys(sealed)

    assert report.problem is Tampering.KEY_MISSING
    assert report.position == _created_at(sealed, lost)
    assert _subject(lost) in report.detail and "never erased" in report.detail
    assert _subject(kept) not in report.detail


def test_a_key_destroyed_by_hand_is_an_erasure_the_forget_log_does_not_record(
    sealed: Loom,
) -> None:
    hidden = sealed.run("note", text="evidence").execution_id
    run_sql(
        sealed,
        "UPDATE loom_subject_keys SET wrapped_key = NULL WHERE subject = :s",
        s=_subject(hidden),
    )
    with pytest.raises(ErasedError):  # it reads as erased ...
        sealed.replay(hidden)

    report = _keys(sealed)  # ... but no forget event says so

    assert report.problem is Tampering.KEY_DESTROYED
    assert report.position == _created_at(sealed, hidden)
    assert "names no forget event" in report.detail


def test_a_destroyed_key_pointing_at_another_subject_s_forget_event_is_reported(
    sealed: Loom,
) -> None:
    sealed.run("note", text="erased", labels=Labels(user="bob"))
    hidden = sealed.run("note", text="evidence").execution_id
    position = sealed.erase(user="bob", reason="request", by="dpo").position
    assert _keys(sealed).ok
    run_sql(
        sealed,
        "UPDATE loom_subject_keys SET wrapped_key = NULL, erased_position = :p WHERE subject = :s",
        p=position,
        s=_subject(hidden),
    )

    report = _keys(sealed)

    assert report.problem is Tampering.KEY_DESTROYED
    assert report.position == position
    assert f"no event at {position} naming it" in report.detail


@pytest.mark.parametrize("past", [1, 10**12])
def test_a_destroyed_key_naming_a_position_past_the_verified_head_is_checked_there(
    sealed: Loom, past: int
) -> None:
    """A forger cannot hide a destruction beyond the head the events were read to: a
    position past it is looked up in the log as it is now (an erasure made since the read
    is found there; a made-up position is not)."""
    hidden = sealed.run("note", text="evidence").execution_id
    head = sealed.log.position
    sealed.run("note", text="later")  # so head + 1 is a real event, not a forget event
    run_sql(
        sealed,
        "UPDATE loom_subject_keys SET wrapped_key = NULL, erased_position = :p WHERE subject = :s",
        p=head + past,
        s=_subject(hidden),
    )

    report = verify_keys(sealed.log, upto=head)

    assert report.problem is Tampering.KEY_DESTROYED
    assert report.position == head + past


def test_an_erasure_made_after_the_events_were_read_is_not_a_forgery(sealed: Loom) -> None:
    sealed.run("note", text="x", labels=Labels(user="carol"))
    head = sealed.log.position
    sealed.erase(user="carol", reason="request", by="dpo")  # forget event past ``head``
    assert verify_keys(sealed.log, upto=head).ok


def test_an_interrupted_erasure_is_reported_until_it_is_run_again(
    sealed: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget event is appended, the keys are not destroyed (a crash between the two
    writes): the forget log says the user was erased while their data still opens."""
    from loom_runtime import erasure

    run = sealed.run("note", text="alice's address", labels=Labels(user="alice"))
    keyring = erasure.keyring_of(sealed, "user")
    monkeypatch.setattr(keyring, "destroy", lambda subjects, *, position: 0)
    sealed.erase(user="alice", reason="request", by="dpo")
    monkeypatch.undo()
    [(position, _)] = forget_events(sealed)
    assert sealed.replay(run.execution_id).identical  # still readable

    report = _keys(sealed)

    assert report.problem is Tampering.ERASURE_INCOMPLETE
    assert report.position == position
    assert _subject(run.execution_id) in report.detail and "again" in report.detail

    sealed.erase(user="alice", reason="request", by="dpo")  # run again: completed
    assert len(forget_events(sealed)) == 2
    assert _keys(sealed).ok
    with pytest.raises(ErasedError):
        sealed.replay(run.execution_id)


def test_several_problems_report_the_lowest_position_and_count_the_rest(sealed: Loom) -> None:
    first = sealed.run("note", text="a").execution_id
    second = sealed.run("note", text="b").execution_id
    run_sql(sealed, "DELETE FROM loom_subject_keys WHERE subject <> 'loom:key-check'")

    report = _keys(sealed)

    assert report.problem is Tampering.KEY_MISSING
    assert report.position == _created_at(sealed, first)
    assert _subject(first) in report.detail and _subject(second) not in report.detail
    assert "(1 more problem(s) in the key table)" in report.detail


def test_a_log_recorded_in_clear_has_no_key_table_to_check(db_url: str) -> None:
    with Loom(db_url) as loom:
        _register(loom)
        loom.run("note", text="plain")
        report = verify_keys(loom.log, upto=loom.log.position)
    assert report.ok and report.checked == 0


def test_the_cli_reports_a_key_row_problem_and_exits_1(sealed: Loom) -> None:
    from loom_runtime.tools.cli import app

    url = sealed.settings.url.render_as_string(hide_password=False)
    run = sealed.run("note", text="alice's address", labels=Labels(user="alice"))
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", "--db", url])
    assert ok.exit_code == 0, ok.output
    assert "1 data keys agree with the forget log" in ok.output

    delete_key_row(sealed, _subject(run.execution_id))
    tampered = runner.invoke(app, ["verify", "--db", url])
    assert tampered.exit_code == 1, tampered.output
    assert tampered.output.startswith("TAMPERED at log position")
    assert "key-missing" in tampered.output
    as_json = runner.invoke(app, ["verify", "--json", "--db", url])
    assert as_json.exit_code == 1
    report = json.loads(as_json.output)
    assert report["ok"] is False and report["problem"] == "key-missing"
    assert report["checked"] > 0 and report["head"] is not None  # the chain itself is intact


# -- found by an attack review of the first version -------------------------------------------


def test_clear_text_that_looks_sealed_is_not_taken_for_a_subject(sealed: Loom) -> None:
    """Only the fields loom seals are read (``LogEvent.SEALED``): a document's metadata and
    a memory key's name are stored in clear and chosen by outsiders, and a text in them that
    looks sealed named a subject with no key, a lasting false alarm on an honest log."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_memory import EventSourcedMemory, InMemoryMemoryStore, MemoryEntry

    forged = 'loom.sealed:{"subject":"execution:forged","nonce":"","ciphertext":""}'
    kb = open_knowledge_base(sealed, "hb")
    kb.sync([Doc(id="a", title="A", text="t", meta={"source_url": forged})])
    EventSourcedMemory(sealed, store=InMemoryMemoryStore()).append(
        forged, [MemoryEntry(content="hi", id="1")]
    )
    report = _keys(sealed)
    assert report.ok, report
    assert report.checked == 2  # the document's key and the memory key's


def test_deeply_nested_stored_text_is_read_without_raising(sealed: Loom) -> None:
    """A text that begins like a sealed one and nests thousands of brackets made the
    decoder raise ``RecursionError`` through ``loom verify`` (and through a read of a clear
    document title that looks sealed)."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_runtime.sealing import sealed_text_subject

    deep = 'loom.sealed:{"subject":"x","z":' + "[" * 3000 + "]" * 3000 + "}"
    assert sealed_text_subject(deep) is None
    open_knowledge_base(sealed, "hb").sync([Doc(id="a", title="A", text="t", meta={"u": deep})])
    assert _keys(sealed).ok


@pytest.mark.parametrize(
    "erased_position", ["'abc'", "X'00ff'", "1e19", "9.3e18", "-5", "0"], ids=repr
)
def test_a_key_row_with_a_forged_position_of_any_type_is_reported(
    sealed: Loom, erased_position: str
) -> None:
    """SQLite stores whatever type an UPDATE gives; a row is outside the chain, so its
    values are read as untrusted: never a ``ValueError`` or ``OverflowError`` out of verify."""
    if not sealed.settings.url.drivername.startswith("sqlite"):
        pytest.skip("PostgreSQL's bigint column refuses such values itself")
    hidden = sealed.run("note", text="evidence").execution_id
    run_sql(
        sealed,
        "UPDATE loom_subject_keys SET wrapped_key = NULL, "
        f"erased_position = {erased_position}, created_position = {erased_position} "
        "WHERE subject = :s",
        s=_subject(hidden),
    )
    report = _keys(sealed)
    assert report.problem is Tampering.KEY_DESTROYED, report


def test_a_key_destroyed_before_it_was_created_is_reported(sealed: Loom) -> None:
    """A key made after the forget event its row names cannot have been destroyed by it. An
    erased memory key's row deleted (not reported: its key was gone already), the key written
    again (a new key), and that key marked destroyed at the old forget event hid the data
    written after the erasure behind an erasure that names it."""
    from loom_memory import EventSourcedMemory, InMemoryMemoryStore, MemoryEntry
    from loom_memory.erasure import memory_subject

    subject = memory_subject("memory", "dave")
    memory = EventSourcedMemory(sealed, store=InMemoryMemoryStore())
    memory.append("dave", [MemoryEntry(content="before", id="1")])
    position = sealed.erase(memory_key="memory:dave", reason="request", by="dpo").position
    delete_key_row(sealed, subject)
    assert _keys(sealed).ok
    memory.append("dave", [MemoryEntry(content="after the erasure", id="2")])
    run_sql(
        sealed,
        "UPDATE loom_subject_keys SET wrapped_key = NULL, erased_position = :p WHERE subject = :s",
        p=position,
        s=subject,
    )
    report = _keys(sealed)
    assert report.problem is Tampering.KEY_DESTROYED, report
    assert "made at" in report.detail


def test_a_missing_key_check_row_is_reported(sealed: Loom) -> None:
    """Without its key-check row no master key can be proved, so every encrypted open is
    refused; verify, which needs no key, said the key table was fine."""
    sealed.run("note", text="x")
    run_sql(sealed, "DELETE FROM loom_subject_keys WHERE subject = 'loom:key-check'")
    report = _keys(sealed)
    assert report.problem is Tampering.KEY_MISSING
    assert "key-check" in report.detail


def test_the_cli_says_the_chain_is_intact_when_the_key_table_is_not(sealed: Loom) -> None:
    from loom_runtime.tools.cli import app

    url = sealed.settings.url.render_as_string(hide_password=False)
    run = sealed.run("note", text="x")
    delete_key_row(sealed, _subject(run.execution_id))
    result = CliRunner().invoke(app, ["verify", "--db", url])
    assert result.exit_code == 1
    assert "events verified before it" not in result.output
    assert "the chain of all" in " ".join(result.output.split())


def test_a_lost_row_is_reported_before_an_erasure_left_half_done(
    sealed: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted erasure at a lower position hid a deleted row behind "incomplete", the
    one problem a script would answer by erasing again."""
    from loom_runtime import erasure

    sealed.run("note", text="a", labels=Labels(user="alice"))
    keyring = erasure.keyring_of(sealed, "user")
    with monkeypatch.context() as patched:
        patched.setattr(keyring, "destroy", lambda subjects, *, position: 0)
        sealed.erase(user="alice", reason="request", by="dpo")
    lost = sealed.run("note", text="c").execution_id
    delete_key_row(sealed, _subject(lost))
    report = _keys(sealed)
    assert report.problem is Tampering.KEY_MISSING
    assert "(1 more problem(s) in the key table)" in report.detail


def test_a_key_table_whose_columns_were_altered_is_a_clear_cli_error(sealed: Loom) -> None:
    from loom_runtime.tools.cli import app

    if not sealed.settings.url.drivername.startswith("sqlite"):
        pytest.skip("one backend shows the CLI's handling")
    url = sealed.settings.url.render_as_string(hide_password=False)
    sealed.run("note", text="x")
    run_sql(sealed, "ALTER TABLE loom_subject_keys RENAME COLUMN erased_position TO gone")
    for command in (["verify"], ["verify", "--json"], ["doctor"]):
        result = CliRunner().invoke(app, [*command, "--db", url])
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), command
        assert "key table" in " ".join(result.output.split())
