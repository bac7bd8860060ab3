"""An imported bundle passes the importing log's redactor, as a recorded event does (ADR 0012,
amended 2026-12-04 "import").

The mapper redacts every event on its way to the database, but an import inserts the bundle's
stored rows as they are: a bundle recorded without a redactor (or by another tool) put its
secrets into a log whose redactor would never have let them in, in clear, past any later
erasure of a value it never saw. Now each imported row is checked as a recorded one: values
redacted (or refused, in refuse mode), an identifier holding a secret refused, nothing
written on a refusal.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, Loom, MasterKey, Redactor, SecretIdentifierError
from loom_runtime import bundle as bundle_module
from loom_runtime.errors import BundleFormatError, SecretRefusedError

SECRET = "AKIAIOSFODNN7EXAMPLE"
KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("creds")
    def creds(ctx: FlowContext, account: str) -> str:
        found = ctx.decide("lookup", lambda: f"{account} uses {SECRET}", input={"a": account})
        return f"answer: {found}"


def _bundle_without_redaction(tmp_path: Path) -> Path:
    """A bundle recorded by a log without a redactor: its value and output hold SECRET."""
    with Loom(f"sqlite:///{tmp_path / 'source.db'}", redactor=None) as loom:
        _register(loom)
        run = loom.run("creds", account="ops")
        path = loom.export(run.execution_id, tmp_path / "run.json")
    assert SECRET in path.read_text()
    return path


def _raw_bytes(path: Path) -> bytes:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = (path, path.with_name(path.name + "-wal"))
    return b"".join(file.read_bytes() for file in files if file.exists())


@pytest.mark.parametrize("key", [None, KEY], ids=["clear log", "encrypted log"])
def test_an_imported_secret_is_redacted_as_a_recorded_one_and_import_stays_idempotent(
    tmp_path: Path, key: MasterKey | None
) -> None:
    bundle = _bundle_without_redaction(tmp_path)
    target = tmp_path / "target.db"
    with Loom(f"sqlite:///{target}", encryption=key) as loom:
        _register(loom)
        imported = loom.import_bundle(bundle)
        execution = loom.execution(imported)
        value = msgspec.json.decode(execution.decisions["lookup"].value)
        assert value == "ops uses [REDACTED:aws-key]"
        assert execution.output is not None
        assert SECRET not in bytes(execution.output).decode()
        before = loom.log.position
        assert loom.import_bundle(bundle) == imported  # the same bundle again: nothing written
        assert loom.log.position == before
    assert SECRET.encode() not in _raw_bytes(target)


def test_refuse_mode_refuses_the_import_and_writes_nothing(tmp_path: Path) -> None:
    bundle = _bundle_without_redaction(tmp_path)
    with Loom(f"sqlite:///{tmp_path / 'target.db'}", redactor=Redactor(mode="refuse")) as loom:
        with pytest.raises(SecretRefusedError):
            loom.import_bundle(bundle)
        assert loom.executions() == []


def _bundle_with_a_secret_key(tmp_path: Path) -> Path:
    with Loom(f"sqlite:///{tmp_path / 'keyed.db'}", redactor=None) as loom:

        @loom.flow("keyed")
        def keyed(ctx: FlowContext) -> int:
            return ctx.decide(f"call with {SECRET}", lambda: 1)

        run = loom.run("keyed")
        return loom.export(run.execution_id, tmp_path / "keyed.json")


def test_a_decision_key_holding_a_secret_refuses_the_import(tmp_path: Path) -> None:
    """A key is an identifier: never rewritten (another key would name another decision).
    The refusal says which event, never the secret."""
    bundle = _bundle_with_a_secret_key(tmp_path)
    with Loom(f"sqlite:///{tmp_path / 'target.db'}") as loom:
        with pytest.raises(SecretIdentifierError, match=r"event 2 \(") as refused:
            loom.import_bundle(bundle)
        assert SECRET not in str(refused.value)
        assert loom.executions() == []


@pytest.mark.parametrize("redactor", [None, "builtin"], ids=["no redactor", "redactor"])
def test_a_member_the_event_does_not_have_refuses_the_import(
    tmp_path: Path, redactor: str | None
) -> None:
    """The mapper's decode skips a member its event does not define, so it was stored with
    the row unread: a secret in it past the redactor, in clear on an encrypted log."""
    bundle = _bundle_without_redaction(tmp_path)
    original = bundle_module.read_bundle(bundle)
    events = list(original.events)
    decided = events[1]
    state = msgspec.json.decode(decided.state)
    state["note"] = f"aws {SECRET}"
    events[1] = msgspec.structs.replace(decided, state=msgspec.json.encode(state).decode())
    bundle_module.write_bundle(original.resealed(events), tmp_path / "crafted.json")
    with Loom(f"sqlite:///{tmp_path / 'target.db'}", redactor=redactor) as loom:
        with pytest.raises(BundleFormatError, match="'note'"):
            loom.import_bundle(tmp_path / "crafted.json")
        assert loom.executions() == []


def test_loom_import_reports_a_refused_file_and_imports_the_others(tmp_path: Path) -> None:
    from loom_runtime.tools.cli import app

    with Loom(f"sqlite:///{tmp_path / 'clean.db'}") as loom:
        _register(loom)
        first = loom.export(loom.run("creds", account="a").execution_id, tmp_path / "a.json")
        last = loom.export(loom.run("creds", account="c").execution_id, tmp_path / "c.json")
    refused = _bundle_with_a_secret_key(tmp_path)
    url = f"sqlite:///{tmp_path / 'target.db'}"
    result = CliRunner().invoke(app, ["import", str(first), str(refused), str(last), "--db", url])
    assert result.exit_code == 1, result.output
    assert "keyed.json" in result.output and SECRET not in result.output
    assert "imported 2 execution(s)" in result.output


def test_a_clean_bundle_is_imported_byte_for_byte(tmp_path: Path) -> None:
    """Nothing to redact: the rows stored are the bundle's, not encoded again."""
    with Loom(f"sqlite:///{tmp_path / 'source.db'}") as loom:
        _register(loom)
        run = loom.run("creds", account="ops")  # redacted while recorded
        bundle = loom.export(run.execution_id, tmp_path / "run.json")
    states = [event.state.encode() for event in bundle_module.read_bundle(bundle).events]
    with Loom(f"sqlite:///{tmp_path / 'target.db'}") as loom:
        imported = loom.import_bundle(bundle)
        assert [row.state for row in loom.log.rows(imported)] == states


def test_a_member_an_upcaster_renames_is_not_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row of an older class version holds the members of that version: compared after its
    upcasters ran, as the decode reads it, or every older bundle would be refused once an
    event is versioned (mapper module docstring)."""
    from loom_runtime.execution import Execution
    from loom_runtime.storage import mapper

    bundle = bundle_module.read_bundle(_bundle_without_redaction(tmp_path))
    decided = next(row for row in bundle.rows() if row.topic == Execution.DecisionRecorded.TOPIC)
    state = msgspec.json.decode(decided.state)
    state["label"] = state.pop("kind")  # as version 1 named it
    old = msgspec.structs.replace(decided, state=msgspec.json.encode(state))

    def upcast_v1_v2(fields: dict[str, object]) -> None:
        fields["kind"] = fields.pop("label")

    cls = Execution.DecisionRecorded
    monkeypatch.setattr(cls, "class_version", 2, raising=False)
    monkeypatch.setattr(cls, "upcast_v1_v2", staticmethod(upcast_v1_v2), raising=False)
    mapper._decoder.cache_clear()  # its cached class version is the old one
    try:
        assert mapper.unknown_fields(old) == []
        assert mapper.unknown_fields(
            msgspec.structs.replace(old, state=old.state[:-1] + b',"x":1}')
        ) == ["x"]
    finally:
        monkeypatch.undo()
        mapper._decoder.cache_clear()
