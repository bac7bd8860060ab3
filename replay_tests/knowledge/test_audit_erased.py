"""``loom audit`` of an erased execution shows its forget-log entry (ADR 0049): who erased it,
when, why and where the forget event is, never the content; exit 1, as for a replay."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, Labels, Loom, MasterKey


def _erased(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, int]:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("shout", lambda: text.upper())

        run = loom.run("note", text="SECRET-NOTE", labels=Labels(user="alice"))
        report = loom.erase(user="alice", reason="art. 17 request", by="dpo@example.com")
    assert report.position is not None
    return url, str(run.execution_id), report.position


def test_audit_of_an_erased_execution_shows_the_forget_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url, execution_id, position = _erased(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["audit", execution_id, "--db", url])
    assert result.exit_code == 1, result.output
    assert f"erased by the forget event at log position {position}" in result.stdout
    assert "by dpo@example.com" in result.stdout
    assert "art. 17 request" in result.stdout
    assert "SECRET-NOTE" not in result.output
    # dated as every command dates (docs/cli.md): the full date in UTC, not an ISO stamp
    assert re.search(r"\(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\) by dpo@", result.stdout)


def test_audit_json_of_an_erased_execution_is_the_forget_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url, execution_id, position = _erased(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["audit", execution_id, "--json", "--db", url])
    assert result.exit_code == 1, result.output
    erased = json.loads(result.stdout)["erased"]
    assert erased["position"] == position
    assert erased["by"] == "dpo@example.com" and erased["reason"] == "art. 17 request"
    assert erased["subject"] == f"execution:{execution_id}"
    assert erased["at"].startswith("20")  # an ISO time
    assert "SECRET-NOTE" not in result.output
