"""An execution imported into an encrypted log is sealed under a key of its own (ADR 0049),
so it can be erased like one recorded there; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest
from typer.testing import CliRunner

from loom_runtime import ErasedError, FlowContext, Labels, Loom, MasterKey
from replay_tests.runtime.test_erasure import _raw_bytes_postgres, _raw_bytes_sqlite

KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> dict[str, object]:
        shout = ctx.decide("shout", lambda: text.upper())
        return {"text": text, "shout": shout}


def _raw(url: str) -> bytes:
    return _raw_bytes_sqlite(url) if url.startswith("sqlite") else _raw_bytes_postgres(url)


def _exported(tmp_path: Path, text: str, user: str) -> tuple[Path, object]:
    """A bundle recorded in another, clear log."""
    with Loom(f"sqlite:///{tmp_path / 'source.db'}") as source:
        _register(source)
        run = source.run("note", text=text, labels=Labels(user=user))
        return source.export(run.execution_id, tmp_path / "bundle.json"), run.output


def test_an_imported_execution_is_sealed_and_can_be_erased(db_url: str, tmp_path: Path) -> None:
    planted = f"PLANTED-IMPORTED-{uuid4().hex}"
    bundle, output = _exported(tmp_path, planted, "imported-user")
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        execution_id = loom.import_bundle(bundle)
        assert loom.replay(execution_id).output == output
        head = loom.log.position
        assert loom.import_bundle(bundle) == execution_id  # held identically: nothing written
        assert loom.log.position == head
    raw = _raw(db_url)
    assert b"imported-user" in raw  # labels stay in clear
    for form in (planted, planted.upper()):
        assert raw.count(form.encode()) == 0, form  # sealed, not in clear
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        report = loom.erase(user="imported-user", reason="request", by="dpo")
        assert [s.execution_id for s in report.subjects] == [str(execution_id)]
        assert report.not_erasable == ()
        with pytest.raises(ErasedError):
            loom.replay(execution_id)
        assert loom.log.verify().problem is None
        head = loom.log.position
        with pytest.raises(ErasedError, match="was erased"):
            loom.import_bundle(bundle)  # the copy cannot bring it back
        assert loom.log.position == head
    raw = _raw(db_url)
    for form in (planted, planted.upper()):
        assert raw.count(form.encode()) == 0, form


def test_loom_import_seals_with_the_master_key_and_reports_an_erased_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    planted = f"PLANTED-CLI-{uuid4().hex}"
    bundle, _ = _exported(tmp_path, planted, "cli-user")
    url = f"sqlite:///{tmp_path / 'target.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    runner = CliRunner()
    imported = runner.invoke(app, ["import", str(bundle), "--db", url])
    assert imported.exit_code == 0, imported.output
    assert _raw(url).count(planted.encode()) == 0
    erased = runner.invoke(
        app, ["erase", "--user", "cli-user", "--reason", "request", "--apply", "--db", url]
    )
    assert erased.exit_code == 0, erased.output
    again = runner.invoke(app, ["import", str(bundle), "--db", url])
    assert again.exit_code == 1 and "was erased" in again.output
