"""Erasure by crypto-shredding (ADR 0049): executions sealed under their own keys, erased by
destroying them, on SQLite and PostgreSQL.

The claims: every other execution replays identically after one user is erased, the erased
ones raise a typed ``ErasedError`` naming the forget event, the chain verifies before and
after, a wrong master key is refused at open, nothing is stored under a destroyed key, and
the raw database files hold no planted plaintext, erased or not.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from sqlalchemy import create_engine, make_url, text
from typer.testing import CliRunner, Result

from loom_runtime import (
    ConfigurationError,
    EncryptionOffError,
    ErasedError,
    ErasureSubjectError,
    ExecutionNotFoundError,
    FlowContext,
    Labels,
    Loom,
    MasterKey,
    Run,
    SubjectErasedError,
    WrongMasterKeyError,
)
from loom_runtime.erasure import forget_events
from loom_runtime.execution import Forgotten

KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> dict[str, object]:
        length = ctx.decide("length", lambda: len(text))
        shout = ctx.decide("shout", lambda: text.upper())
        return {"text": text, "length": length, "shout": shout}

    @loom.flow("broken")
    def broken(ctx: FlowContext, text: str) -> str:
        ctx.decide("seen", lambda: text)
        raise ValueError(f"cannot handle {text}")


@pytest.fixture
def sealed(db_url: str) -> Iterator[Loom]:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        yield loom


def _user(index: int) -> Labels:
    return Labels(tenant=f"t{index % 2}", user=f"u{index % 10}")


def test_erasing_one_user_of_ten_leaves_ninety_executions_replaying_identically(
    sealed: Loom,
) -> None:
    runs = [sealed.run("note", text=f"entry {i}", labels=_user(i)) for i in range(100)]
    assert sealed.log.verify().problem is None

    report = sealed.erase(user="u3", reason="data-subject request", by="dpo@example.com")

    assert report.applied and report.position is not None
    assert len(report.subjects) == 10
    assert {s.events for s in report.subjects} == {4}  # Created, two decisions, Completed
    identical, erased = 0, []
    for index, run in enumerate(runs):
        try:
            result = sealed.replay(run.execution_id)
        except ErasedError as exc:
            erased.append((index, exc))
            continue
        assert result.identical, result.divergences
        assert result.output == run.output
        identical += 1
    assert identical == 90
    assert [index % 10 for index, _ in erased] == [3] * 10
    assert {exc.position for _, exc in erased} == {report.position}
    assert all(f"position {report.position}" in str(exc) for _, exc in erased)
    assert sealed.log.verify().problem is None
    [(position, event)] = forget_events(sealed)
    assert position == report.position
    assert isinstance(event, Forgotten)
    assert event.by == "dpo@example.com" and event.reason == "data-subject request"
    assert event.subjects == tuple(s.subject for s in report.subjects)
    assert event.events == (4,) * 10


def test_an_erased_execution_stays_erased_for_a_new_loom_and_its_audit_fields_stay(
    db_url: str,
) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        run = loom.run("note", text="alice's text", labels=Labels(user="alice"))
        kept = loom.run("note", text="bob's text", labels=Labels(user="bob"))
        loom.erase(execution=run.execution_id, reason="request", by="dpo")
    with Loom(db_url, encryption=KEY) as reopened:
        _register(reopened)
        with pytest.raises(ErasedError):
            reopened.execution(run.execution_id)
        assert reopened.replay(kept.execution_id).identical
        summaries = {s.execution_id: s for s in reopened.executions()}
        assert summaries[run.execution_id].user == "alice"  # labels stay, for audit
        assert summaries[run.execution_id].status == "completed"


def test_a_wrong_master_key_is_refused_at_open_never_read_as_erased(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        loom.run("note", text="x")
    wrong = Loom(db_url, encryption=MasterKey(b"w" * 32))
    with pytest.raises(WrongMasterKeyError, match="not the key the log was encrypted with"):
        _ = wrong.log
    wrong.close()


@pytest.mark.parametrize(
    "given", [MasterKey.generate(), b"k" * 32, object()], ids=["generated-text", "bytes", "object"]
)
def test_encryption_given_what_wraps_no_key_is_refused_when_the_loom_is_made(
    db_url: str, given: object
) -> None:
    """``MasterKey.generate()`` returns the key's text (for ``$LOOM_MASTER_KEY``): given to
    ``Loom(encryption=...)`` it was taken, and the first sealed write failed with
    ``AttributeError: 'str' object has no attribute 'wrap'``, in a flow. Refused at once."""
    with pytest.raises(ConfigurationError, match="MasterKey"):
        Loom(db_url, encryption=given)  # type: ignore[arg-type]


def test_a_sealed_execution_read_without_the_master_key_is_refused_typed(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        run = loom.run("note", text="x")
    with Loom(db_url) as plain, pytest.raises(EncryptionOffError, match="encryption="):
        plain.execution(run.execution_id)


def test_an_append_for_an_execution_whose_key_is_gone_fails_typed(db_url: str) -> None:
    """Another process erases the execution while its flow runs: the next decision is not
    stored under the destroyed key but refused, and nothing more is written."""
    with Loom(db_url, encryption=KEY) as loom, Loom(db_url, encryption=KEY) as other:
        started: list[object] = []

        @loom.flow("erased-midway")
        def erased_midway(ctx: FlowContext, text: str) -> str:
            ctx.decide("first", lambda: text)
            other.erase(execution=ctx.execution_id, reason="request", by="dpo")
            started.append(loom.log.position)
            return ctx.decide("second", lambda: text + "!")

        with pytest.raises(SubjectErasedError, match="nothing more can be stored"):
            loom.run("erased-midway", text="x")
        assert loom.log.position == started[0]  # nothing appended after the erasure


def test_failures_and_forks_are_sealed_and_replay_until_erased(sealed: Loom) -> None:
    with pytest.raises(ValueError, match="cannot handle PLAINTEXT-FAIL"):
        sealed.run("broken", text="PLAINTEXT-FAIL")
    [failed] = [s for s in sealed.executions() if s.flow == "broken"]
    execution = sealed.execution(failed.execution_id)
    assert execution.error is not None
    assert execution.error[1] == "cannot handle PLAINTEXT-FAIL"
    assert sealed.replay(failed.execution_id).identical

    parent = sealed.run("note", text="parent")
    fork = sealed.fork(parent.execution_id, at="shout", override={"shout": "OTHER"})
    assert fork.output["shout"] == "OTHER"
    assert sealed.replay(fork.execution_id).identical  # the fork has its own key
    sealed.erase(execution=parent.execution_id, reason="request", by="dpo")
    for erased in (parent, fork):  # the fork holds the parent's input: it goes with it
        with pytest.raises(ErasedError):
            sealed.replay(erased.execution_id)


def test_erasing_nothing_or_without_encryption_is_refused_typed_and_writes_nothing(
    db_url: str,
) -> None:
    with Loom(db_url) as plain:
        _register(plain)
        run = plain.run("note", text="x", labels=Labels(user="u"))
        with pytest.raises(EncryptionOffError, match=r"encryption=MasterKey\.from_env"):
            plain.erase(user="u", reason="r", by="b")
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        head = loom.log.position
        with pytest.raises(ErasureSubjectError, match="no executions of user=nobody"):
            loom.erase(user="nobody", reason="r", by="b")
        with pytest.raises(ExecutionNotFoundError):
            loom.erase(execution=uuid4(), reason="r", by="b")
        with pytest.raises(ErasureSubjectError, match="recorded before encryption"):
            loom.erase(user="u", reason="r", by="b")  # stored in clear: not erasable
        dry = loom.erase(user="u", reason="r", by="b", dry_run=True)
        assert dry.not_erasable == (str(run.execution_id),) and not dry.subjects
        with pytest.raises(ErasureSubjectError, match="exactly one"):
            loom.erase(user="u", tenant="t", reason="r", by="b")
        assert loom.log.position == head
        assert loom.replay(run.execution_id).identical  # the clear execution still replays


def test_a_dry_run_writes_nothing_and_a_second_erase_finds_it_already_erased(
    sealed: Loom,
) -> None:
    run = sealed.run("note", text="x", labels=Labels(user="u"))
    head = sealed.log.position
    dry = sealed.erase(user="u", reason="r", by="b", dry_run=True)
    assert not dry.applied and dry.position is None and len(dry.subjects) == 1
    assert sealed.log.position == head
    assert sealed.replay(run.execution_id).identical
    sealed.erase(user="u", reason="r", by="b")
    again = sealed.erase(user="u", reason="r", by="b", dry_run=True)
    assert again.already_erased == (str(run.execution_id),) and not again.subjects
    with pytest.raises(ErasureSubjectError, match="already erased"):
        sealed.erase(user="u", reason="r", by="b")


def test_export_refuses_an_erased_execution_and_a_live_bundle_replays_in_clear(
    sealed: Loom, tmp_path: Path
) -> None:
    live = sealed.run("note", text="LIVE-TEXT", labels=Labels(user="a"))
    gone = sealed.run("note", text="GONE-TEXT", labels=Labels(user="b"))
    sealed.erase(user="b", reason="r", by="b")
    bundle = sealed.export(live.execution_id, tmp_path / "live.json")
    assert "LIVE-TEXT" in bundle.read_text()  # a copy in clear: outside erasure's reach
    assert sealed.replay_bundle(bundle).identical
    with pytest.raises(ErasedError, match="cannot be exported"):
        sealed.export(gone.execution_id, tmp_path / "gone.json")
    assert not (tmp_path / "gone.json").exists()


def _raw_bytes_sqlite(url: str) -> bytes:
    path = Path(make_url(url).database or "")
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA secure_delete = ON")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("VACUUM")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = [p for p in path.parent.iterdir() if p.name.startswith(path.name)]
    assert path in files
    return b"".join(p.read_bytes() for p in files)


def _raw_bytes_postgres(url: str) -> bytes:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text("VACUUM"))
            tables = connection.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            ).scalars()
            dumped = b""
            for table in list(tables):
                rows = connection.execute(text(f'SELECT * FROM "{table}"')).all()
                dumped += repr(rows).encode()
    finally:
        engine.dispose()
    # The server's own pg_dump (scripts/with-postgres starts that version), else the one on
    # PATH; once found it must dump: a failing dump skipped silently checked nothing.
    bindir = Path(os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin"))
    pg_dump = str(bindir / "pg_dump") if (bindir / "pg_dump").exists() else shutil.which("pg_dump")
    if pg_dump is not None:
        plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        done = subprocess.run([pg_dump, plain], capture_output=True, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        assert b"loom_subject_keys" in done.stdout
        dumped += done.stdout
    return dumped


def test_raw_database_files_hold_no_planted_plaintext_after_erasure(db_url: str) -> None:
    erased_text = f"PLANTED-ERASED-{uuid4().hex}"
    kept_text = f"PLANTED-KEPT-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        loom.run("note", text=erased_text, labels=Labels(user="erased-user"))
        kept = loom.run("note", text=kept_text, labels=Labels(user="kept-user"))
        with pytest.raises(ValueError):
            loom.run("broken", text=erased_text, labels=Labels(user="erased-user"))
        loom.erase(user="erased-user", reason="request", by="dpo")
        assert loom.replay(kept.execution_id).identical
    raw = _raw_bytes_sqlite(db_url) if db_url.startswith("sqlite") else _raw_bytes_postgres(db_url)
    assert b"loom.sealed" in raw  # the payloads are there, sealed
    assert b"erased-user" in raw  # labels stay in clear (they select what an erasure covers)
    for planted in (erased_text, kept_text):
        for form in (planted, planted.upper(), planted.lower()):
            assert raw.count(form.encode()) == 0, form
    with Loom(db_url, encryption=KEY) as reopened:  # and the kept one still opens
        _register(reopened)
        assert reopened.execution(kept.execution_id).decisions["shout"].value is not None


def test_without_encryption_nothing_is_sealed(db_url: str) -> None:
    with Loom(db_url) as loom:
        _register(loom)
        run = loom.run("note", text="PLAIN-TEXT")
        rows = loom.log.rows(run.execution_id)
    assert all(b"loom.sealed" not in row.state for row in rows)
    assert b"PLAIN-TEXT" in rows[0].state


def _alice_s_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Run]:
    """An encrypted log (its key in ``LOOM_MASTER_KEY``) holding one execution of user
    alice: its URL and the run."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _register(loom)
        return url, loom.run("note", text="x", labels=Labels(user="alice"))


def test_the_cli_erases_a_user_dry_run_first_then_with_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url, run = _alice_s_note(tmp_path, monkeypatch)
    runner = CliRunner()

    dry = runner.invoke(app, ["erase", "--user", "alice", "--reason", "request", "--db", url])
    assert dry.exit_code == 0, dry.output
    assert "would erase 1 execution(s) of user=alice" in dry.output
    assert "pass --apply" in dry.output
    applied = runner.invoke(
        app, ["erase", "--user", "alice", "--reason", "request", "--apply", "--json", "--db", url]
    )
    assert applied.exit_code == 0, applied.output
    assert '"applied": true' in applied.output
    replay = runner.invoke(app, ["replay", str(run.execution_id), "--db", url])
    assert replay.exit_code == 1 and "was erased by the forget event" in replay.output
    audit = runner.invoke(app, ["audit", str(run.execution_id), "--db", url])
    assert audit.exit_code == 1 and "forget event at log position" in audit.output
    verify = runner.invoke(app, ["verify", "--db", url])
    assert verify.exit_code == 0, verify.output
    export = runner.invoke(
        app, ["export", str(run.execution_id), "-o", str(tmp_path / "b.json"), "--db", url]
    )
    assert export.exit_code == 1 and "erased execution cannot be exported" in export.output
    unknown = runner.invoke(app, ["erase", "--user", "nobody", "--reason", "r", "--db", url])
    assert unknown.exit_code == 2
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    wrong = runner.invoke(app, ["executions", "list", "--db", url])
    assert wrong.exit_code == 2 and "not the key the log was encrypted with" in wrong.output
    monkeypatch.delenv("LOOM_MASTER_KEY")
    off = runner.invoke(app, ["erase", "--user", "alice", "--reason", "r", "--db", url])
    assert off.exit_code == 2 and "encrypted, but was opened without its master key" in off.output


@pytest.mark.parametrize("by", ["", "  "])
def test_the_cli_refuses_an_erasure_that_does_not_say_who_erases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """``--by ""`` stored ``by: "unknown"`` in the forget log, where the Python API refuses an
    empty ``by=`` (found by an acceptance audit). Refused like a missing ``--reason``, before
    anything is written; without ``--by`` and ``$USER``, the login is recorded (below)."""
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    monkeypatch.delenv("USER", raising=False)
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _register(loom)
        loom.run("note", text="x", labels=Labels(user="alice"))
        head = loom.log.position
    refused = CliRunner().invoke(
        app, ["erase", "--user", "alice", "--reason", "r", "--apply", "--by", by, "--db", url]
    )
    assert refused.exit_code == 2 and "--by" in refused.output
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        assert loom.log.position == head
    applied = CliRunner().invoke(
        app, ["erase", "--user", "alice", "--reason", "r", "--apply", "--json", "--db", url]
    )
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.output)["by"] == getpass.getuser() != "unknown"


def test_a_dry_run_that_finds_nothing_erasable_exits_as_the_erasure_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run exited 0 where ``--apply`` refused with 2, so a script's
    ``loom erase ... && loom erase ... --apply`` checked nothing. Both now refuse alike, with
    one line on stderr and nothing on stdout, as every usage error."""
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url) as plain:
        _register(plain)
        clear = plain.run("note", text="x", labels=Labels(user="bob"))
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _register(loom)
        loom.run("note", text="y", labels=Labels(user="alice"))
    runner = CliRunner()

    def erase(*args: str) -> Result:
        return runner.invoke(app, ["erase", *args, "--reason", "r", "--db", url])

    cases = [
        (["--user", "bob"], "recorded before encryption"),
        (["--execution", str(clear.execution_id)], "recorded before encryption"),
    ]
    for args, why in cases:
        dry, applied = erase(*args), erase(*args, "--apply")
        assert (dry.exit_code, applied.exit_code) == (2, 2), (args, dry.output)
        assert why in dry.stderr and why in applied.stderr
        assert dry.stdout == ""
    assert erase("--user", "alice", "--apply").exit_code == 0
    again = erase("--user", "alice")
    assert again.exit_code == 2 and "already erased" in again.stderr, again.output


class _Crash(BaseException):
    """The process dies mid-flow: nothing records a failure, the execution stays unfinished."""


def test_recovery_skips_an_unfinished_execution_that_was_erased(sealed: Loom) -> None:
    @sealed.flow("dies")
    def dies(ctx: FlowContext, text: str) -> str:
        ctx.decide("first", lambda: text)
        raise _Crash

    with pytest.raises(_Crash):
        sealed.run("dies", text="x", labels=Labels(user="gone"))
    sealed.erase(user="gone", reason="request", by="dpo")
    assert sealed.recover(dead_after=0.001, include_unowned=True) == []


def test_a_secret_in_a_sealed_error_message_is_redacted_before_it_is_sealed(
    sealed: Loom,
) -> None:
    with pytest.raises(ValueError):
        sealed.run("broken", text="Bearer abcdefgh12345678secret")
    [failed] = sealed.executions()
    execution = sealed.execution(failed.execution_id)
    assert execution.error is not None
    assert "abcdefgh12345678secret" not in execution.error[1]
    assert "[REDACTED" in execution.error[1]
    assert all(
        b"abcdefgh12345678secret" not in row.state for row in sealed.log.rows(failed.execution_id)
    )


def test_a_sealed_value_moved_to_another_place_does_not_open(sealed: Loom) -> None:
    """Associated data binds a ciphertext to its stream, version and field."""
    import msgspec

    from loom_runtime.errors import LogCorruptError
    from loom_runtime.sealing import Opener

    run = sealed.run("note", text="x")
    rows = sealed.log.rows(run.execution_id)
    value = msgspec.Raw(msgspec.json.encode(msgspec.json.decode(rows[1].state)["value"]))
    opener = Opener(sealed._keyring)
    assert bytes(opener.raw(value, run.execution_id, 2, "value")) == b"1"  # where it is
    for stream, version, field in (
        (run.execution_id, 3, "value"),
        (run.execution_id, 2, "input"),
        (uuid4(), 2, "value"),
    ):
        with pytest.raises(LogCorruptError, match="altered or moved"):
            opener.raw(value, stream, version, field)


def test_a_reason_or_name_with_line_breaks_forges_no_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erasure's ``reason`` and ``by`` are free text, printed back wherever the erased
    execution is shown: a line break in them printed a line loom did not write (a review's
    reason faked "its input, decisions and output are intact"). Shown on one line, the break
    as ``<U+000A>``, by every command that prints them."""
    from loom_runtime.tools.cli import app

    url, run = _alice_s_note(tmp_path, monkeypatch)
    runner = CliRunner()
    forged = "FORGED: its input, decisions and output are intact"
    applied = runner.invoke(
        app,
        [
            "erase",
            "--user",
            "alice",
            "--reason",
            f"gdpr\n{forged}",
            "--by",
            f"dpo\r\n{forged}",
            "--apply",
            "--db",
            url,
        ],
    )
    assert applied.exit_code == 0, applied.output
    for command in (["audit"], ["replay"], ["executions", "show"]):
        shown = runner.invoke(app, [*command, str(run.execution_id), "--db", url])
        assert "forget event" in shown.output, (command, shown.output)
        lines = shown.output.splitlines()
        assert not any(line.startswith("FORGED") for line in lines), (command, shown.output)


def test_an_erased_execution_read_without_the_master_key_says_it_was_erased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read without ``$LOOM_MASTER_KEY``, an erased execution said "sealed and the log was
    opened without encryption: open it with the key" (exit 2), sending a data-protection
    officer checking an erasure after a key that reveals only "erased". The forget log is in
    clear: the execution is reported erased, with its forget entry, key or not."""
    from loom_runtime.tools.cli import app

    url, run = _alice_s_note(tmp_path, monkeypatch)
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _register(loom)
        kept = loom.run("note", text="y", labels=Labels(user="bob"))
        report = loom.erase(user="alice", reason="request #7", by="dpo")
    monkeypatch.delenv("LOOM_MASTER_KEY")
    with Loom(url) as keyless:
        with pytest.raises(ErasedError) as erased:
            keyless.execution(run.execution_id)
        assert erased.value.position == report.position
        with pytest.raises(EncryptionOffError):  # the control: not erased, the key is needed
            keyless.execution(kept.execution_id)
    runner = CliRunner()
    for command in (["audit"], ["executions", "show"], ["replay"]):
        shown = runner.invoke(app, [*command, str(run.execution_id), "--db", url])
        assert shown.exit_code == 1, (command, shown.output)
        assert f"forget event at log position {report.position}" in shown.output, shown.output
    audited = runner.invoke(app, ["audit", str(run.execution_id), "--db", url])
    assert "request #7" in audited.output, audited.output  # its forget entry, as with the key
