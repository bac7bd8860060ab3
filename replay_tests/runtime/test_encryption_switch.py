"""When encryption is switched on for a log (ADR 0049): only a write that seals creates the
key table, so a read-only command run with ``$LOOM_MASTER_KEY`` set never writes to a log that
has none."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, Labels, Loom, MasterKey


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


def _fingerprint(path: Path) -> tuple[list[str], int, str]:
    """The tables, the number of events and a digest of every file of the database."""
    with sqlite3.connect(path) as connection:
        found = connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        tables = sorted(row[0] for row in found)
        events = connection.execute("SELECT count(*) FROM stored_events").fetchone()[0]
    digest = hashlib.sha256()
    for file in sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name)):
        digest.update(file.name.encode() + file.read_bytes())
    return tables, events, digest.hexdigest()


READ_ONLY = (
    ["verify"],
    ["executions", "list"],
    ["executions", "list", "--json"],
    ["erase", "--user", "alice", "--reason", "request"],  # a dry run, refused: all in clear
)


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: " ".join(c))
def test_a_read_only_command_with_a_master_key_never_writes_to_a_clear_log(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    path = tmp_path / "loom.db"
    url = f"sqlite:///{path}"
    with Loom(url) as loom:
        _register(loom)
        loom.run("note", text="x", labels=Labels(user="alice"))
    before = _fingerprint(path)
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())

    result = CliRunner().invoke(app, [*command, "--db", url])

    refused = command[0] == "erase" and "recorded before encryption" in result.stderr
    assert result.exit_code in (0, 1) or (result.exit_code == 2 and refused), result.output
    after = _fingerprint(path)
    assert "loom_subject_keys" not in after[0]
    assert after == before


def test_the_first_sealed_run_switches_encryption_on_and_from_then_on_the_key_is_checked(
    tmp_path: Path,
) -> None:
    """Opening a clear log with a key writes nothing; the first sealed run creates the key
    table, and from then on a wrong key is refused at open."""
    from loom_runtime import WrongMasterKeyError

    path = tmp_path / "loom.db"
    url = f"sqlite:///{path}"
    with Loom(url) as loom:
        _register(loom)
        clear = loom.run("note", text="clear")
    before = _fingerprint(path)
    with Loom(url, encryption=MasterKey(b"k" * 32)) as loom:
        _register(loom)
        assert loom.replay(clear.execution_id).identical
        dry = loom.erase(execution=clear.execution_id, reason="r", by="b", dry_run=True)
        assert dry.not_erasable == (str(clear.execution_id),)
    assert _fingerprint(path)[:2] == before[:2]
    with Loom(url, encryption=MasterKey(b"k" * 32)) as loom:
        _register(loom)
        sealed = loom.run("note", text="sealed")
    assert "loom_subject_keys" in _fingerprint(path)[0]
    with pytest.raises(WrongMasterKeyError):
        _ = Loom(url, encryption=MasterKey(b"w" * 32)).log
    with Loom(url, encryption=MasterKey(b"k" * 32)) as loom:
        _register(loom)
        assert loom.replay(sealed.execution_id).identical
