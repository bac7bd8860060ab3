"""The CLI opens the log with the redactor of the ``Loom`` that ``--flows`` names (ADR 0029,
amended "cli redactor"): a log recorded through the app's own redactor replays through it.

With the built-in one, ``loom replay`` of a faithful recording diverged and printed the
secret the app redacts in the diff, and ``loom run`` stored it in clear.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner, Result

from loom_runtime import FlowContext, FlowRegistry, Loom, Redactor, SecretPattern
from loom_runtime.tools.cli import ExitCode, app

TOKEN = SecretPattern.compile("acme-token", r"acme_[0-9a-f]{16}", hints=("acme_",))
SECRET = "acme_0123456789abcdef"
REDACTOR = Redactor(extra=[TOKEN])

registry = FlowRegistry()


@registry.flow("lookup", version="t")
def lookup(ctx: FlowContext, customer: str) -> str:
    return ctx.decide("crm", lambda: "gold", input={"customer": customer, "auth": SECRET})


APP_DB = Path("loom-app-never-opened.db")
"""The app's own log: never opened by the CLI, which opens --db."""


def app_loom() -> Loom:
    """The app's own Loom, as ``--flows`` names it."""
    return Loom(f"sqlite:///{APP_DB}", flows=registry, redactor=REDACTOR)


FLOWS = "--flows=replay_tests.test_cli_app_redactor:app_loom"


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _stored(path: Path) -> bytes:
    with closing(sqlite3.connect(path)) as connection:
        return b"".join(
            bytes(state) for (state,) in connection.execute("SELECT state FROM stored_events")
        )


@pytest.mark.parametrize("recorded_by", ["python", "cli"])
def test_the_cli_replays_through_the_apps_redactor(tmp_path: Path, recorded_by: str) -> None:
    path = tmp_path / "loom.db"
    db = f"--db=sqlite:///{path}"
    if recorded_by == "python":
        with Loom(f"sqlite:///{path}", flows=registry, redactor=REDACTOR) as loom:
            execution_id = str(loom.run("lookup", customer="c-1").execution_id)
    else:
        ran = _invoke("run", "lookup", "--input", '{"customer": "c-1"}', "--json", db, FLOWS)
        assert ran.exit_code == 0, ran.output
        execution_id = msgspec.json.decode(ran.stdout)["execution_id"]
    assert SECRET.encode() not in _stored(path)  # stored redacted, whoever recorded it
    assert b"REDACTED" in _stored(path)  # the control: the input was recorded
    replayed = _invoke("replay", execution_id, db, FLOWS)
    assert replayed.exit_code == ExitCode.OK, replayed.output
    assert "replayed identically" in replayed.output
    assert SECRET not in replayed.output
    bundle = tmp_path / "b.json"
    assert _invoke("export", execution_id, "-o", str(bundle), db).exit_code == 0
    from_bundle = _invoke("replay", str(bundle), FLOWS)
    assert from_bundle.exit_code == ExitCode.OK, from_bundle.output
    assert SECRET not in from_bundle.output
    assert not APP_DB.exists()  # the app's URL was not used


def test_loom_import_redacts_through_the_apps_redactor(tmp_path: Path) -> None:
    """An import stores a bundle as if it were recorded here, through this log's redactor
    (ADR 0012, "import"); `loom import` used the built-in one, so a bundle from a log the
    app's redactor never saw was stored with the app's secret in clear, where
    `Loom(redactor=app).import_bundle` redacts it (a regression review)."""
    source = tmp_path / "source.db"
    with Loom(f"sqlite:///{source}", flows=registry, redactor=None) as loom:
        execution_id = loom.run("lookup", customer="c-1").execution_id
        loom.export(execution_id, tmp_path / "b.json")
    assert SECRET.encode() in _stored(source)  # the control: the bundle holds it in clear
    target = tmp_path / "target.db"
    imported = _invoke("import", str(tmp_path / "b.json"), f"--db=sqlite:///{target}", FLOWS)
    assert imported.exit_code == 0, imported.output
    assert SECRET.encode() not in _stored(target)
    assert b"REDACTED" in _stored(target)


def test_flows_that_fail_to_load_say_where_they_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands read ``--flows`` from ``$LOOM_FLOWS`` when it is not given, so `loom import`
    (which now takes it) failed in a job that never passed it, without saying why; a module
    that calls ``sys.exit`` when imported ended the command silently with its code (a second
    regression review). One line, naming the variable; exit 2."""
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LOOM_FLOWS", "exits_on_import:loom")
    with Loom(f"sqlite:///{tmp_path / 'source.db'}", flows=registry) as loom:
        loom.export(loom.run("lookup", customer="c-1").execution_id, tmp_path / "b.json")
    result = _invoke("import", str(tmp_path / "b.json"), f"--db=sqlite:///{tmp_path / 't.db'}")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.output.startswith("error: cannot load flows from 'exits_on_import:loom'")
    assert "SystemExit" in result.output and "$LOOM_FLOWS" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_loom_knowledge_sync_redacts_through_the_apps_redactor(tmp_path: Path) -> None:
    """`kb.sync` in the app redacts a document's text through the app's redactor (ADR 0012);
    `loom knowledge sync` took no --flows and stored through the built-in one, so the same
    folder synced from the command line kept the app's secret in clear (noted by the verdict
    review). With --flows (or $LOOM_FLOWS) naming the app's Loom, it is the app's."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "runbook.md").write_text(f"# Runbook\n\nCall the CRM with {SECRET} when paged.\n")
    for flows, stored_in_clear in ((None, True), (FLOWS, False)):
        path = tmp_path / f"{stored_in_clear}.db"
        args = ["knowledge", "sync", str(docs), "--scope=ops", "--apply", f"--db=sqlite:///{path}"]
        synced = _invoke(*args, *([flows] if flows else []))
        assert synced.exit_code == 0, synced.output
        assert b"Runbook" in _stored(path)  # the control: the document was stored
        assert (SECRET.encode() in _stored(path)) is stored_in_clear, flows
    assert not APP_DB.exists()  # the app's URL was not used
