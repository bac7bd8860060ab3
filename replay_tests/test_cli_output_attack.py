"""What an attack review of the CLI found in its input and output (ADR 0008, amended "cli
review"): JSON the parser cannot read past its limits, imported start times out of UTC, and
line separators that split a recorded value into lines of loom's own output.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner, Result

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import read_bundle, write_bundle
from loom_runtime.tools.cli import ExitCode, app

flows = FlowRegistry()


@flows.flow("echo", version="t")
def echo(ctx: FlowContext, text: Any) -> object:
    return ctx.decide("said", lambda: text)


FLOWS = "--flows=replay_tests.test_cli_output_attack:flows"


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _one_line_usage_error(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


DEEP = "[" * 3000 + "]" * 3000
HUGE = "9" * 5000  # past Python's 4,300 digits for an int read from text


@pytest.mark.parametrize("value", [DEEP, HUGE], ids=["deep", "huge-int"])
def test_json_the_parser_cannot_read_is_a_usage_error(tmp_path: Path, value: str) -> None:
    """Valid JSON that Python's parser refuses (nested past its depth, an integer past its
    digit limit) escaped ``run --input`` and ``fork --override`` as a traceback, exit 1."""
    db = f"--db=sqlite:///{tmp_path / 'loom.db'}"
    _one_line_usage_error(_invoke("run", "echo", "--input", f'{{"text": {value}}}', db, FLOWS))
    assert not (tmp_path / "loom.db").exists()  # refused before the database is opened
    ran = _invoke("run", "echo", "--input", '{"text": "hi"}', db, FLOWS, "--json")
    assert ran.exit_code == 0, ran.output  # the control
    execution_id = msgspec.json.decode(ran.stdout)["execution_id"]
    forked = _invoke("fork", execution_id, "--at-count", "0", "--override", f"said={value}", db)
    _one_line_usage_error(forked)


def _imported_starting_at(tmp_path: Path, timestamp: str) -> str:
    """A log holding one imported execution whose recorded start is ``timestamp``; its URL."""
    with Loom(f"sqlite:///{tmp_path / 'source.db'}", flows=flows) as loom:
        path = loom.export(loom.run("echo", text="hi").execution_id, tmp_path / "one.json")
    real = read_bundle(path)
    created, *rest = real.events
    state = msgspec.json.decode(created.state) | {"timestamp": timestamp}
    moved = msgspec.structs.replace(created, state=msgspec.json.encode(state).decode())
    write_bundle(real.resealed([moved, *rest]), tmp_path / "moved.json")
    db = f"sqlite:///{tmp_path / 'target.db'}"
    imported = _invoke("import", str(tmp_path / "moved.json"), f"--db={db}")
    assert imported.exit_code == 0, imported.output
    return db


def test_a_start_recorded_without_a_zone_is_listed_and_filtered_as_utc(tmp_path: Path) -> None:
    """An imported execution whose writer stored its start with no zone (read as UTC, as
    retention reads it) made ``executions list --since`` raise a naive/aware TypeError."""
    db = _imported_starting_at(tmp_path, "2026-12-06T10:00:00")
    listed = _invoke("executions", "list", f"--db={db}", "--since", "2026-12-06T09:00:00Z")
    assert listed.exit_code == 0, listed.output
    assert "2026-12-06 10:00:00" in listed.output
    later = _invoke("executions", "list", f"--db={db}", "--since", "2026-12-06T11:00:00Z")
    assert later.exit_code == 0 and "2026-12-06 10:00:00" not in later.output


def test_a_start_recorded_at_another_offset_is_shown_in_utc(tmp_path: Path) -> None:
    """The column says ``started (UTC)``; a start recorded at +05:00 was shown at its own
    local time, five hours off."""
    db = _imported_starting_at(tmp_path, "2026-12-06T19:35:29+05:00")
    listed = _invoke("executions", "list", f"--db={db}")
    assert listed.exit_code == 0, listed.output
    assert "2026-12-06 14:35:29" in listed.output and "19:35:29" not in listed.output
    as_json = _invoke("executions", "list", f"--db={db}", "--json")
    assert "2026-12-06T14:35:29" in as_json.stdout


FORGED = "A\x85output:\u2028FORGED\u2029  measured: nothing"


def test_a_line_separator_in_a_value_forges_no_line(tmp_path: Path) -> None:
    """A recorded value holding NEL, LINE SEPARATOR or PARAGRAPH SEPARATOR was split into lines
    of ``bundle show`` (``str.splitlines`` splits on them), one reading ``output:``, and reached
    the terminal raw in ``diff`` and ``executions show``. Each is shown as ``<U+XXXX>``."""
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(db, flows=flows) as loom:
        forged = loom.run("echo", text=FORGED).execution_id
        plain = loom.run("echo", text="plain").execution_id
        path = loom.export(forged, tmp_path / "forged.json")
        other = loom.export(plain, tmp_path / "plain.json")
    outputs = {
        "bundle show": _invoke("bundle", "show", str(path)),
        "diff": _invoke("diff", str(path), str(other)),
        "executions show": _invoke("executions", "show", str(forged), f"--db={db}"),
    }
    for command, result in outputs.items():
        assert result.exception is None or isinstance(result.exception, SystemExit), command
        text = result.output
        assert not any(separator in text for separator in "\x85\u2028\u2029"), command
        assert "<U+2028>" in text, (command, text)  # the control: the value is shown
        lines = text.splitlines()
        assert not [line for line in lines if line.strip().startswith("FORGED")], command


def _ok_or_one_failed_line(result: Result, command: list[str]) -> None:
    """``command`` succeeded, or failed (exit 1) in one line; never a traceback."""
    assert "Traceback" not in result.output, (command, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        command,
        result.exception,
    )
    if result.exit_code != 0:
        assert result.exit_code == ExitCode.FAILED, (command, result.output)
        assert len(result.output.strip().splitlines()) == 1, (command, result.output)


def _edited_decision(tmp_path: Path, old: bytes, new: bytes | None) -> tuple[str, str]:
    """A log holding one ``echo`` execution whose decision row's stored state is edited
    (``old`` replaced by ``new``; None: the state set to NULL); its URL and execution id."""
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}", flows=flows) as loom:
        execution_id = str(loom.run("echo", text=1).execution_id)
    with closing(sqlite3.connect(path)) as connection, connection:
        ((rowid, state),) = connection.execute(
            "SELECT rowid, state FROM stored_events WHERE topic LIKE '%DecisionRecorded%'"
        ).fetchall()
        assert old in state
        edited = None if new is None else state.replace(old, new, 1)
        connection.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (edited, rowid))
    return f"sqlite:///{path}", execution_id


@pytest.mark.parametrize(
    ("new", "commands"),
    [
        (None, (["executions", "show"], ["audit"])),  # a state set to NULL
        (b'"value":' + HUGE.encode(), (["executions", "show"],)),  # past Python's digits
        (b'"value":1e400', (["audit"],)),  # past a float's range
    ],
    ids=["null-state", "huge-int", "1e400"],
)
def test_an_edited_row_is_one_line_never_a_traceback(
    tmp_path: Path, new: bytes | None, commands: tuple[list[str], ...]
) -> None:
    """A decision row edited to hold what loom never writes (no state, an integer Python's
    ``json`` refuses, a number no float holds) ended ``executions show`` and ``audit`` in a
    ``TypeError``, ``ValueError`` or ``msgspec.ValidationError`` traceback; ADR 0018 promises
    one line naming the damage (or the value shown as stored, where nothing needs it read)."""
    url, execution_id = _edited_decision(tmp_path, b'"value":1', new)
    for command in commands:
        _ok_or_one_failed_line(_invoke(*command, execution_id, f"--db={url}"), command)


def test_a_bug_in_an_upcaster_is_not_reported_as_an_edited_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a state that is not bytes is called edited for being no state (a row set to NULL):
    a ``TypeError`` raised by an event class's own upcaster is that code's bug, raised as it
    is, not "the row may have been edited" (a regression review of the NULL-state fix)."""
    from loom_runtime.errors import LogCorruptError
    from loom_runtime.execution import Execution
    from loom_runtime.storage import mapper

    cls = Execution.DecisionRecorded

    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["attempt"] = state.get("missing") + 1  # type: ignore[operator]  # the bug

    monkeypatch.setattr(cls, "class_version", 2, raising=False)
    monkeypatch.setattr(cls, "upcast_v1_v2", staticmethod(upcast_v1_v2), raising=False)
    mapper._decoder.cache_clear()
    mapper._shape.cache_clear()
    try:
        topic = mapper._shape(cls)[0]
        where: dict[str, Any] = {
            "stream": "00000000-0000-0000-0000-000000000001",
            "version": 2,
            "topic": topic,
        }
        with pytest.raises(TypeError):
            mapper.decode_state(**where, state=b'{"key":"k","kind":"call","input":1,"value":2}')
        with pytest.raises(LogCorruptError, match="no stored state"):
            mapper.decode_state(**where, state=None)  # type: ignore[arg-type]
    finally:
        monkeypatch.undo()
        mapper._decoder.cache_clear()
        mapper._shape.cache_clear()


@pytest.mark.parametrize(
    ("rows", "column"),
    [
        ("topic LIKE '%DecisionRecorded%'", "state"),
        ("originator_version = 1", "state"),  # the execution's start
        ("topic LIKE '%DecisionRecorded%'", "topic"),
    ],
    ids=["decision-state", "start-state", "decision-topic"],
)
def test_stored_text_that_is_not_utf8_is_one_line_and_verify_names_the_row(
    tmp_path: Path, rows: str, column: str
) -> None:
    """A row edited to hold TEXT that is not UTF-8 ended every reading command, and ``loom
    verify`` itself, in an ``OperationalError`` traceback (sqlite3 fails the fetch before loom
    sees the value). Now ``verify`` answers TAMPERED at that row, and every other command says
    the log is damaged in one line, exit 1 (ADR 0018, "not UTF-8")."""
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}", flows=flows) as loom:
        execution_id = str(loom.run("echo", text=1).execution_id)
        export = tmp_path / "bundle.json"
        loom.export(execution_id, export)  # the control: the log was readable
    with closing(sqlite3.connect(path)) as connection, connection:
        edited = connection.execute(
            f"UPDATE stored_events SET {column} = CAST(X'7B22FF' AS TEXT) WHERE {rows}"
        )
        assert edited.rowcount == 1
    url = f"--db=sqlite:///{path}"
    verified = _invoke("verify", url)
    assert "Traceback" not in verified.output, verified.output
    assert verified.exit_code == ExitCode.FAILED, verified.output
    assert "TAMPERED" in verified.output, verified.output
    for command in (
        ["executions", "show", execution_id],
        ["executions", "list"],
        ["audit", execution_id],
        ["replay", execution_id, FLOWS],
        ["export", execution_id, "-o", str(tmp_path / "again.json")],
    ):
        result = _invoke(*command, url)
        _ok_or_one_failed_line(result, command)
        assert result.exit_code == 0 or "UTF-8" in result.output, (command, result.output)


@pytest.mark.parametrize(
    "damage",
    [
        "ALTER TABLE stored_events RENAME COLUMN topic TO topik",
        "ALTER TABLE stored_events RENAME TO events_moved",
    ],
    ids=["column", "table"],
)
def test_a_log_table_changed_outside_loom_is_one_line_never_a_traceback(
    tmp_path: Path, damage: str
) -> None:
    """A ``stored_events`` table whose columns (or name) were changed ended every command,
    ``loom verify`` included, in an ``OperationalError`` traceback ("no such column: topic";
    a CLI review). It is one line saying the database lacks what loom made, exit 1; with the
    table renamed away, verify finds the chain's events gone: TAMPERED."""
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}", flows=flows) as loom:
        execution_id = str(loom.run("echo", text=1).execution_id)
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(damage)
    _one_line_each(f"sqlite:///{path}", execution_id, moved=damage.endswith("events_moved"))


def test_flow_names_that_print_alike_are_listed_apart(tmp_path: Path) -> None:
    """A flow name may hold a no-break space (names in every script are allowed, ADR 0002
    "flow names"), so an imported bundle's 'billing\u00a0' printed exactly like 'billing ' in
    `executions list` (a regression review). The list shows every space but U+0020, and one at
    either end, as <U+XXXX>; combining marks stay as written, so Arabic typed in keyboard
    order (not in NFC) reads as Arabic (the second regression review)."""
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    arabic = "\u0645\u062d\u0645\u062f\u0651\u064e"  # shadda before fatha: not NFC
    with Loom(db) as loom:
        for name in ("billing\u00a0", " lead", arabic):
            loom.flow(name)(lambda ctx: 1)
            loom.run(name)
    result = _invoke("executions", "list", f"--db={db}")
    assert result.exit_code == 0, result.output
    assert "billing<U+00A0>" in result.output, result.output
    assert "<U+0020>lead" in result.output, result.output
    assert arabic in result.output  # the control: marks as written, no codes


def test_a_flows_own_sqlite_error_is_its_traceback_not_a_damaged_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's one-line translations of sqlite3 errors (a missing table, a lock, text that is
    not UTF-8) took a flow's own database error for the log's: `loom run` printed "changed
    outside loom" where the flow's traceback and its execution id belong (a regression
    review). A flow's recorded failure is printed as its traceback."""
    (tmp_path / "app_db_flows.py").write_text(
        "import sqlite3\n"
        "from loom_runtime import FlowRegistry\n"
        "flows = FlowRegistry()\n"
        "@flows.flow('lookup')\n"
        "def lookup(ctx):\n"
        "    return sqlite3.connect(':memory:').execute('SELECT * FROM orders').fetchall()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    url = f"--db=sqlite:///{tmp_path / 'loom.db'}"
    result = _invoke("run", "lookup", "--flows=app_db_flows:flows", url)
    assert result.exit_code == ExitCode.FAILED, result.output
    assert "no such table: orders" in result.output
    assert "changed outside loom" not in result.output, result.output
    assert "recorded as the failure of execution" in result.output


@pytest.mark.parametrize(
    "damage",
    [
        "ALTER TABLE loom_events RENAME COLUMN topic TO topik",
        "ALTER TABLE loom_events RENAME TO events_moved",
    ],
    ids=["column", "table"],
)
def test_a_postgresql_log_table_changed_outside_loom_is_one_line_never_a_traceback(
    pg_url: str, damage: str
) -> None:
    """The PostgreSQL half of the test above: an ``UndefinedColumn`` or ``UndefinedTable``
    from the server ended every command in a traceback (left by the first fix, SQLite's
    only). It is the same one line, exit 1."""
    import psycopg

    with Loom(pg_url, flows=flows) as loom:
        execution_id = str(loom.run("echo", text=1).execution_id)
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as connection:
        connection.execute(damage)  # type: ignore[arg-type]
    _one_line_each(pg_url, execution_id, moved=damage.endswith("events_moved"))


def test_executions_list_takes_a_flow_name_as_the_list_shows_it(tmp_path: Path) -> None:
    """The list shows a no-break space in a flow name as <U+00A0>, and --flow took only the
    stored name, which a terminal cannot type apart from a space (a review): the name as shown
    selects it too, and the plain space's flow is not selected by it."""
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(db) as loom:
        for name in ("billing\u00a0", "billing "):
            loom.flow(name)(lambda ctx: 1)
            loom.run(name)
    result = _invoke("executions", "list", "--flow", "billing<U+00A0>", "--json", f"--db={db}")
    assert result.exit_code == 0, result.output
    listed = msgspec.json.decode(result.output)
    assert [row["flow"] for row in listed] == ["billing\u00a0"], listed


def _one_line_each(url: str, execution_id: str, *, moved: bool) -> None:
    """Each command on a log whose table was changed outside loom fails in one line, no
    traceback: "changed outside loom", or TAMPERED from verify when the table was renamed
    away (the chain's events are gone; the other commands would see a new empty table)."""
    commands = [["verify"]] + ([] if moved else [["executions", "list"], ["audit", execution_id]])
    for command in commands:
        result = _invoke(*command, f"--db={url}")
        assert "Traceback" not in result.output, (command, result.output)
        assert result.exit_code == ExitCode.FAILED, (command, result.output)
        said = "TAMPERED" if moved else "changed outside loom"
        assert said in result.output, (command, result.output)
        assert len(result.output.strip().splitlines()) == 1, (command, result.output)
