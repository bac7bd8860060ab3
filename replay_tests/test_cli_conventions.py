"""The conventions every ``loom`` command follows (ADR 0008), walked command by command.

One exit-code table (0 ok, 1 a check failed or something differs, 2 usage or not found),
errors on stderr, no hard wrapping in a pipe, ``--json`` with one schema per command, and
read-only commands that never create a database.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from loom_runtime.bundle import MAX_BUNDLE_BYTES
from loom_runtime.tools import readable_help
from loom_runtime.tools.cli import ExitCode, app

FLOWS = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("double")
def double(ctx, n: int) -> int:
    return ctx.decide("twice", lambda: n * 2, kind="math")
"""

MISSING_ID = "00000000-0000-4000-8000-000000000000"


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf command of the app by its path ("executions show"), from Typer itself."""
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            found |= _commands(command, f"{path} ")
        else:
            found[path] = command
    return found


COMMANDS = _commands(typer.main.get_group(app))


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


class Setup:
    """A SQLite log holding one execution of ``double`` and a scope ``ops`` of one document,
    its bundle, a docs folder, and the flows module on the import path."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from loom_knowledge import Doc, open_knowledge_base
        from loom_runtime import Loom

        (tmp_path / "conv_flows.py").write_text(FLOWS)
        (tmp_path / "conv_changed.py").write_text(FLOWS.replace('"twice"', '"thrice"'))
        monkeypatch.syspath_prepend(str(tmp_path))
        self.db = f"sqlite:///{tmp_path / 'loom.db'}"
        self.flows = "conv_flows:flows"
        with Loom(self.db) as loom:
            loom.flows = __import__("conv_flows").flows
            self.execution_id = str(loom.run("double", n=21).execution_id)
            open_knowledge_base(loom, "ops").put_doc(
                Doc(id="disk.md", text="Disk full: rotate the logs."), source="repo"
            )
            self.bundle = loom.export(self.execution_id, tmp_path / "run.json")
        # Every command runs with a master key (ADR 0049): a log recorded in clear stays
        # readable with encryption on, and `loom erase` can run its dry run.
        monkeypatch.setenv("LOOM_MASTER_KEY", "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleS0=")
        self.docs = tmp_path / "docs"
        self.docs.mkdir()
        (self.docs / "disk.md").write_text("Disk full: rotate the logs, then page someone.")
        self.tmp_path = tmp_path


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    monkeypatch.delenv("LOOM_FLOWS", raising=False)
    return Setup(tmp_path, monkeypatch)


def _cases(s: Setup) -> dict[str, list[tuple[list[str], ExitCode]]]:
    """For every command, invocations and the exit code the table gives them."""
    db, flows, eid = ["--db", s.db], ["--flows", s.flows], s.execution_id
    missing_db = ["--db", f"sqlite:///{s.tmp_path / 'absent.db'}"]
    return {
        "run": [
            (["run", "double", "--input", '{"n": 2}', *db, *flows], ExitCode.OK),
            (["run", "nope", *db, *flows], ExitCode.USAGE),
        ],
        "executions list": [
            (["executions", "list", *db], ExitCode.OK),
            (["executions", "list", *missing_db], ExitCode.USAGE),
        ],
        "executions show": [
            (["executions", "show", eid, *db], ExitCode.OK),
            (["executions", "show", MISSING_ID, *db], ExitCode.USAGE),
        ],
        "resume": [
            (["resume", eid, *db, *flows], ExitCode.OK),  # finished: its output again
            (["resume", MISSING_ID, *db, *flows], ExitCode.USAGE),
        ],
        "fork": [
            (["fork", eid, "--at-count", "0", *db, *flows], ExitCode.OK),
            (["fork", MISSING_ID, "--at-count", "0", *db, *flows], ExitCode.USAGE),
        ],
        "replay": [
            (["replay", eid, *db, *flows], ExitCode.OK),
            (["replay", eid, *db, "--flows", "conv_changed:flows"], ExitCode.FAILED),
            (["replay", str(s.bundle), *flows], ExitCode.OK),
            (["replay", "nonexistent.json", *flows], ExitCode.USAGE),
            (["replay", MISSING_ID, *db, *flows], ExitCode.USAGE),
        ],
        "export": [
            (["export", eid, "-o", str(s.tmp_path / "out.json"), *db], ExitCode.OK),
            (["export", MISSING_ID, "-o", str(s.tmp_path / "no.json"), *db], ExitCode.USAGE),
        ],
        "erase": [
            (["erase", "--execution", eid, "--reason", "request", *db], ExitCode.OK),  # dry run
            (["erase", "--user", "nobody", "--reason", "request", *db], ExitCode.USAGE),
            (["erase", "--user", "u", "--reason", "request", *missing_db], ExitCode.USAGE),
        ],
        "retain": [
            (["retain", "--older-than", "90d", *db], ExitCode.OK),  # dry run
            (["retain", "--older-than", "90 days", *db], ExitCode.USAGE),
            (["retain", "--older-than", "90d", *missing_db], ExitCode.USAGE),
        ],
        "import": [
            (["import", str(s.bundle), *db], ExitCode.OK),
            (["import", "nonexistent.json", *db], ExitCode.USAGE),
        ],
        "rebuild": [
            (["rebuild", *db], ExitCode.OK),
            (["rebuild", *missing_db], ExitCode.USAGE),
        ],
        "doctor": [
            (["doctor", *db], ExitCode.OK),
            (["doctor", *missing_db], ExitCode.USAGE),
        ],
        "verify": [
            (["verify", *db], ExitCode.OK),
            (["verify", *db, "--anchor", "nonsense"], ExitCode.USAGE),
            (["verify", *missing_db], ExitCode.USAGE),
        ],
        "demo": [(["demo", "--db", "mysql://nowhere/x"], ExitCode.USAGE)],
        "audit": [
            (["audit", eid, *db], ExitCode.OK),
            (["audit", MISSING_ID, *db], ExitCode.USAGE),
        ],
        "knowledge sync": [
            (["knowledge", "sync", str(s.docs), "--scope", "ops", "--source", "repo", *db], 0),
            (["knowledge", "sync", str(s.tmp_path / "none"), "--scope", "ops", *db], 2),
        ],
        "knowledge list": [
            (["knowledge", "list", "--scope", "ops", *db], ExitCode.OK),
            (["knowledge", "list", "--scope", "ops", *missing_db], ExitCode.USAGE),
        ],
        "knowledge search": [
            (["knowledge", "search", "disk", "--scope", "ops", *db], ExitCode.OK),
            (["knowledge", "search", "disk", "--scope", "ops", *missing_db], ExitCode.USAGE),
        ],
        "knowledge as-of": [
            (["knowledge", "as-of", "1", "--scope", "ops", *db], ExitCode.OK),
            (["knowledge", "as-of", "2026-11-30T14:00:00", "--scope", "ops", *db], 2),
        ],
        "knowledge counterfactual": [
            (["knowledge", "counterfactual", eid, *db, *flows], ExitCode.OK),
            (["knowledge", "counterfactual", MISSING_ID, *db, *flows], ExitCode.USAGE),
        ],
        "diff": [
            (["diff", str(s.bundle), str(s.bundle)], ExitCode.OK),
            (["diff", str(s.bundle), "nonexistent.json"], ExitCode.USAGE),
        ],
        "bundle show": [
            (["bundle", "show", str(s.bundle)], ExitCode.OK),
            (["bundle", "show", "nonexistent.json"], ExitCode.USAGE),
        ],
        "recover": [
            (["recover", *db, *flows], ExitCode.OK),
            (["recover", *missing_db, *flows], ExitCode.USAGE),
        ],
        "worker": [
            (["worker", "--stop-after", "0", *db, *flows], ExitCode.OK),
            (["worker", *missing_db, *flows], ExitCode.USAGE),
            (["worker", "--heartbeat", "60", "--dead-after", "30", *db, *flows], ExitCode.USAGE),
        ],
    }


def test_every_command_follows_the_exit_code_table(setup: Setup) -> None:
    """Each command, found in the Typer app, exits as the table says for success, for what
    it was asked that is not there, and (replay) for a divergence; a new command without
    rows here fails the first assertion. Every error is one line on stderr, nothing on stdout."""
    cases = _cases(setup)
    assert sorted(cases) == sorted(COMMANDS)
    for command, invocations in cases.items():
        for args, expected in invocations:
            result = _invoke(*args)
            assert result.exit_code == expected, (command, args, result.output)
            if expected == ExitCode.USAGE:
                assert result.stdout == "", (command, args, result.stdout)
                assert result.stderr.startswith("error: "), (command, args, result.stderr)
                assert result.stderr.count("\n") == 1, (command, args, result.stderr)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["executions", "list", "--stauts", "completed"], ["--stauts", "--status"]),
        (["rnu"], ["rnu", "run"]),
        (["demo", "--mode", "bogus"], ["bogus", "lexical"]),
        (["replay"], ["TARGET"]),
        (["knowledge", "search", "--limit", "many", "q", "--scope", "s"], ["--limit", "integer"]),
    ],
    ids=["misspelt flag", "misspelt command", "bad choice", "missing argument", "bad number"],
)
def test_a_command_line_click_refuses_is_one_line_naming_the_help(
    args: list[str], words: list[str]
) -> None:
    """A flag, command, choice or value the parser refuses (Typer drew a usage line and a box
    of several lines): one line on stderr, with what was wrong, the suggestion, and where the
    usage is shown; exit 2."""
    result = _invoke(*args)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert all(word in result.stderr for word in words), result.stderr
    assert "--help" in result.stderr
    # What the one line is printed for: Click's UsageError, found through Typer's one export.
    assert readable_help._USAGE_ERROR.__name__ == "UsageError"


def _keys(data: object) -> set[str]:
    assert isinstance(data, dict), data
    return set(data)


DECISION = {"key", "kind", "input", "value", "error_type", "message", "meta", "origin"}
PASSAGES = {"recorded", "position", "passages"}


def _a_run(*, flow: str, output: object, id: str | None = None) -> Any:
    """A check of a printed run: ``{execution_id, flow, output, log_position}``."""
    return lambda d: (
        _keys(d) == {"execution_id", "flow", "output", "log_position"}
        and (d["flow"], d["output"]) == (flow, output)
        and (id is None or d["execution_id"] == id)
    )


def _json_cases(s: Setup) -> dict[str, tuple[list[str], Any]]:
    """For every command that prints data: its --json invocation and a check of the schema."""
    db, flows, eid = ["--db", s.db], ["--flows", s.flows], s.execution_id

    def listing(keys: set[str]) -> Any:
        return lambda data: isinstance(data, list) and data and keys <= _keys(data[0])

    return {
        "executions list": (
            ["executions", "list", *db],
            listing({"execution_id", "flow", "status", "started_at", "parent_id"}),
        ),
        "executions show": (
            ["executions", "show", eid, *db],
            lambda d: d["id"] == eid and _keys(d["decisions"][0]) >= DECISION and d["output"] == 42,
        ),
        "replay": (
            ["replay", eid, *db, *flows],
            lambda d: d["identical"] is True and d["divergences"] == [] and d["output"] == 42,
        ),
        "audit": (["audit", eid, *db], lambda d: "execution_id" in d),
        "verify": (
            ["verify", *db],
            lambda d: d["ok"] is True and d["head"]["notification_id"] == d["checked"] == 4,
        ),
        "doctor": (
            ["doctor", *db],
            lambda d: d["ok"] is True and {"check", "ok", "detail"} <= _keys(d["checks"][0]),
        ),
        "knowledge sync": (
            ["knowledge", "sync", str(s.docs), "--scope", "ops", "--source", "repo", *db],
            lambda d: d["applied"] is False and d["written"] == ["disk.md"],
        ),
        "knowledge list": (
            ["knowledge", "list", "--scope", "ops", *db],
            listing({"id", "revision", "source", "fingerprint"}),
        ),
        "knowledge search": (
            ["knowledge", "search", "disk", "--scope", "ops", *db],
            lambda d: _keys(d) == PASSAGES and d["passages"][0]["doc_id"] == "disk.md",
        ),
        "knowledge as-of": (
            ["knowledge", "as-of", "4", "--scope", "ops", *db],
            lambda d: d["position"] == 4 and d["documents"][0]["id"] == "disk.md",
        ),
        "knowledge counterfactual": (
            ["knowledge", "counterfactual", eid, *db, *flows],
            lambda d: d["execution_id"] == eid and d["unchanged"] is True and d["retrievals"] == [],
        ),
        "diff": (
            ["diff", str(s.bundle), str(s.bundle)],
            lambda d: d["same"] is True and d["differences"] == [],
        ),
        "export": (
            ["export", eid, "-o", str(s.tmp_path / "exported"), *db],
            lambda d: d[0]["execution_id"] == eid and d[0]["bytes"] > 0,
        ),
        "retain": (
            ["retain", "--older-than", "90d", *db],
            lambda d: d["applied"] is False and d["subjects"] == [],  # nothing that old
        ),
        "import": (
            ["import", str(s.bundle), *db],
            lambda d: d[0]["status"] == "present" and d[0]["execution_id"] == eid,
        ),
        "bundle show": (
            ["bundle", "show", str(s.bundle)],
            lambda d: d["execution_id"] == eid and _keys(d["decisions"][0]) >= {"key", "input"},
        ),
        "recover": (["recover", *db, *flows], lambda d: d == []),  # nothing was interrupted
        # Each prints the run as recover lists it; they write, so after the commands that count
        "run": (
            ["run", "double", "--input", '{"n": 5}', *db, *flows],
            _a_run(flow="double", output=10),
        ),
        "resume": (["resume", eid, *db, *flows], _a_run(flow="double", output=42, id=eid)),
        "fork": (
            ["fork", eid, "--at-count", "0", "--override", "twice=7", *db, *flows],
            _a_run(flow="double", output=7),
        ),
        "erase": (
            [],
            lambda d: d["applied"] is False and len(d["subjects"]) == 1,
        ),  # made by the test, last
    }


PRINTS_NO_DATA = {
    "demo": "a walkthrough told to a person",
    "rebuild": "progress, then what was rebuilt",
    "worker": "runs until stopped, printing that it runs",
}
"""The commands without --json, and why: every other command prints data."""


def test_every_command_that_prints_data_has_one_json_schema(setup: Setup) -> None:
    """--json is offered exactly by the commands that print data (a new one without a row
    here fails, and so does a new one without --json that is not in PRINTS_NO_DATA), and
    what each prints parses as JSON of its schema, with nothing else on stdout."""
    cases = _json_cases(setup)
    with_json = {
        path
        for path, command in COMMANDS.items()
        if any("--json" in getattr(p, "opts", ()) for p in command.params)
    }
    assert sorted(with_json) == sorted(cases)
    assert sorted(set(COMMANDS) - with_json) == sorted(PRINTS_NO_DATA)
    for command, (args, check) in cases.items():
        if command == "erase":
            # On an execution the dry run can erase, recorded now (after the commands that
            # count events): sealed, as the key is set, unlike the clear one, whose dry run
            # is refused as --apply is.
            ran = _invoke(
                "run", "double", "--input", '{"n": 3}', "--db", setup.db, "--flows", setup.flows
            )
            args = [
                "erase",
                "--execution",
                ran.stdout.split()[1],
                "--reason",
                "r",
                "--db",
                setup.db,
            ]
        result = _invoke(*args, "--json")
        assert result.exit_code == 0, (command, result.output)
        assert check(json.loads(result.stdout)), (command, result.stdout)


READ_ONLY = [
    ["executions", "list"],
    ["executions", "show", MISSING_ID],
    ["verify"],
    ["doctor"],
    ["audit", MISSING_ID],
    ["rebuild"],
    ["export", MISSING_ID, "-o", "out.json"],
    ["replay", MISSING_ID],
    ["knowledge", "list", "--scope", "ops"],
    ["knowledge", "search", "q", "--scope", "ops"],
    ["knowledge", "as-of", "0", "--scope", "ops"],
    ["knowledge", "sync", ".", "--scope", "ops"],
    ["knowledge", "counterfactual", MISSING_ID],
]


@pytest.mark.parametrize("default", [True, False], ids=["./loom.db", "--db typo"])
@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_never_creates_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], default: bool
) -> None:
    """On a missing SQLite path: "no loom database at ...", exit 2, and no file appears
    (opening a missing SQLite file creates it, and verify then said "ok: 0 events")."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    db = [] if default else ["--db", f"sqlite:///{tmp_path / 'typo.db'}"]
    result = _invoke(*args, *db)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "no loom database at" in result.stderr
    assert str(tmp_path / ("loom.db" if default else "typo.db")) in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", ["another application's", "empty"])
@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_never_writes_into_a_database_that_is_not_loom_s(
    tmp_path: Path, args: list[str], content: str
) -> None:
    """An existing SQLite file with no loom log in it (another application's, or empty) had
    loom's tables written into it by `verify`, which then said "ok: 0 events verified": the
    wrong --db was changed and passed (integrity review). Refused, exit 2, the file as it was."""
    path = tmp_path / "app.db"
    if content == "empty":
        path.touch()
    else:
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        connection.close()
    before = path.read_bytes()
    result = _invoke(*args, "--db", f"sqlite:///{path}")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "no loom log in" in result.stderr
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_replaying_a_missing_file_says_file_not_found(tmp_path: Path) -> None:
    """A path that is not there is not taken for an execution id."""
    result = _invoke("replay", str(tmp_path / "nonexistent.json"))
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr == f"error: file not found: {tmp_path / 'nonexistent.json'}\n"


def test_a_directory_given_for_a_bundle_is_named_as_one(tmp_path: Path) -> None:
    """A path that is there but is no file is not "file not found" (it is found)."""
    folder = tmp_path / "recordings"
    folder.mkdir()
    for args in (("replay", str(folder)), ("bundle", "show", str(folder))):
        result = _invoke(*args)
        assert result.exit_code == ExitCode.USAGE, (args, result.output)
        assert result.stderr == f"error: {folder} is a directory, not a bundle file\n", args


def test_a_relative_folder_given_for_a_bundle_is_named_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``loom replay bundles`` (no slash, no suffix) was read as an execution id."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bundles").mkdir()
    result = _invoke("replay", "bundles")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr == "error: bundles is a directory, not a bundle file\n"


@pytest.mark.parametrize(
    ("content", "code"),
    [(b'{"format": "a note"}', ExitCode.FAILED), (None, ExitCode.USAGE)],
    ids=["not a bundle", "too large"],
)
def test_every_command_that_reads_a_bundle_exits_alike_for_one_unusable_file(
    tmp_path: Path, content: bytes | None, code: ExitCode
) -> None:
    """``replay`` exited 2 and ``bundle show`` and ``diff`` 1 for the same file. A bundle
    that fails its checks is an answer (1); one over the size cap is refused unread (2)."""
    bundle = tmp_path / "b.json"
    if content is None:  # a sparse file over the cap: nothing written, nothing held in memory
        with bundle.open("wb") as file:
            file.truncate(MAX_BUNDLE_BYTES + 1)
    else:
        bundle.write_bytes(content)
    commands = [["replay", str(bundle)], ["bundle", "show", str(bundle)]]
    commands.append(["diff", str(bundle), str(bundle)])
    for args in commands:
        result = _invoke(*args)
        assert (result.exit_code, args) == (code, args), result.output
        assert result.stderr.startswith("error: "), result.output
    # `import` reports each file's refusal and goes on (exit 1), naming the file once: it
    # printed "error: PATH: PATH is too large..." (a newcomer's walk).
    imported = _invoke("import", str(bundle), "--db", f"sqlite:///{tmp_path / 'l.db'}")
    assert imported.exit_code == ExitCode.FAILED, imported.output
    assert " ".join(imported.stderr.split()).count(str(bundle)) == 1, imported.stderr


def test_an_execution_is_named_by_the_start_of_its_id_as_tables_show_it(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``executions list`` shows a fork's parent by its first 8 characters, and every
    command refused them ("not an execution id"). A command that takes an id takes the start
    of one (4 characters or more) that begins exactly one id, as git and docker do; one that
    begins several is refused naming them, and one that begins none says so."""
    from uuid import UUID

    import loom_runtime.loom
    from loom_runtime import Loom

    short = setup.execution_id[:8]
    for args in (
        ["executions", "show", short],
        ["replay", short, "--flows", setup.flows],
        ["audit", short],
    ):
        result = _invoke(*args, "--db", setup.db)
        assert result.exit_code in (ExitCode.OK, ExitCode.FAILED), (args, result.output)
    erase = _invoke("erase", "--execution", short, "--reason", "r", "--db", setup.db)
    assert f"execution={setup.execution_id}" in erase.stderr, erase.output  # recorded in clear
    for text in (short.upper(), setup.execution_id.replace("-", "")):  # a whole id, no dashes
        shown = _invoke("executions", "show", text, "--json", "--db", setup.db)
        assert json.loads(shown.stdout)["id"] == setup.execution_id, shown.output

    twins = iter(
        [UUID("abcd0000-0000-4000-8000-000000000001"), UUID("abcd0000-0000-4000-8000-000000000002")]
    )
    monkeypatch.setattr(loom_runtime.loom, "uuid4", lambda: next(twins))
    with Loom(setup.db) as loom:
        loom.flows = __import__("conv_flows").flows
        loom.run("double", n=1)
        loom.run("double", n=2)
    both = _invoke("executions", "show", "abcd0000", "--db", setup.db)
    assert both.exit_code == ExitCode.USAGE, both.output
    assert "abcd0000 begins 2 execution ids" in both.stderr, both.stderr
    for text in ("abcd0000-0000-4000-8000-000000000003", "ffff"):
        none = _invoke("executions", "show", text, "--db", setup.db)
        assert none.exit_code == ExitCode.USAGE, none.output
    assert "no execution id begins with ffff" in none.stderr, none.stderr
    for text in ("abc", "zzz", "3f2b…"):  # too short to be one; not hex; a guide's ellipsis
        bad = _invoke("executions", "show", text, "--db", setup.db)
        assert bad.exit_code == ExitCode.USAGE, bad.output
        # the library's "expected a whole UUID" contradicted the CLI taking a start
        assert bad.stderr == (
            f"error: {text!r} is not an execution id: give a whole one, or its first 4 or more "
            "characters as `loom executions list` shows them\n"
        ), bad.stderr


def test_diff_of_execution_ids_says_it_reads_bundle_files(setup: Setup) -> None:
    """`loom diff ID ID` said only "file not found: ID": it compares bundle files, and the
    refusal says how to write one."""
    short = setup.execution_id[:8]
    for args in (["diff", short, short], ["bundle", "show", short]):
        result = _invoke(*args)
        assert result.exit_code == ExitCode.USAGE, result.output
        assert "loom export ID -o FILE" in result.stderr, result.stderr


def test_output_in_a_pipe_is_not_hard_wrapped(setup: Setup) -> None:
    """Not a terminal (the runner's stdout is not one): the anchor stays on one line, so
    `loom verify | grep head` finds it whole, and so does a long error message."""
    result = _invoke("verify", "--db", setup.db)
    assert result.exit_code == 0
    [line] = [line for line in result.stdout.splitlines() if "head" in line]
    assert re.search(r"head \d+:[0-9a-f]{64} \(keep it as --anchor\)$", line), line
    long_id = "x" * 200
    result = _invoke("executions", "show", long_id, "--db", setup.db)
    assert result.stderr.count("\n") == 1 and long_id in result.stderr


def test_a_table_in_a_pipe_keeps_every_column_whole(setup: Setup) -> None:
    """Not a terminal, a table is as wide as its rows: Rich fitted it to 80 columns, so with a
    fork and labels the flow column shrank to nothing and its names were gone (and a long
    name was folded across lines, so grep missed it)."""
    from loom_runtime import Labels, Loom

    flow = "incident-answer-with-a-rather-long-name"
    (setup.tmp_path / "conv_long.py").write_text(FLOWS.replace('"double"', f'"{flow}"'))
    with Loom(setup.db) as loom:
        loom.flows = __import__("conv_long").flows
        run = loom.run(flow, n=1, labels=Labels(user="alice", tenant="acme"))
        loom.fork(run.execution_id, at="twice", override={"twice": 5})
    result = _invoke("executions", "list", "--db", setup.db)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if flow in line]
    assert len(rows) == 2, result.stdout
    assert all("alice" in row for row in rows), result.stdout
    assert any(str(run.execution_id)[:8] in row for row in rows), result.stdout  # the parent


def test_version_and_completion_are_offered() -> None:
    """`loom --version` prints the installed version; completion scripts are available."""
    from importlib.metadata import version

    result = _invoke("--version")
    assert (result.exit_code, result.stdout) == (0, f"loom {version('loom-replay')}\n")
    # `--show-completion` detects the shell from the process's ancestors, which differ between
    # a terminal, CI and an xdist worker; naming the shell in the variable does not depend on them.
    for shell in ("bash", "zsh", "fish"):
        result = CliRunner().invoke(
            app, [], env={"_LOOM_COMPLETE": f"source_{shell}"}, prog_name="loom"
        )
        assert result.exit_code == 0 and f"_LOOM_COMPLETE=complete_{shell}" in result.stdout
    help_text = _invoke("--help").stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text


@pytest.mark.slow
def test_python_dash_m_loom_runtime_is_the_cli_and_keeps_errors_off_stdout(
    tmp_path: Path,
) -> None:
    """`python -m loom_runtime` runs the same app in a real process: --version on stdout,
    an error on stderr only, exit codes from the table."""
    run = [sys.executable, "-m", "loom_runtime"]
    done = subprocess.run([*run, "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("loom ")
    missing = f"sqlite:///{tmp_path / 'typo.db'}"
    done = subprocess.run(
        [*run, "verify", "--db", missing], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: no loom database at ")
    assert not (tmp_path / "typo.db").exists()


def test_flows_are_found_from_the_project_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--flows myapp.flows:flows` works from the directory holding `myapp`, as `python -m`
    would find it, though the current directory is not on the import path."""
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "flows.py").write_text(FLOWS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "myapp", raising=False)
    monkeypatch.delitem(sys.modules, "myapp.flows", raising=False)
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    result = _invoke(
        "run", "double", "--input", '{"n": 4}', "--db", db, "--flows", "myapp.flows:flows"
    )
    assert result.exit_code == 0, result.output
    assert "8" in result.stdout


def test_an_unregistered_flow_names_the_command_line_fix(setup: Setup) -> None:
    """Not "import the module that defines it" (a Python answer) but --flows or LOOM_FLOWS."""
    result = _invoke("run", "double", "--db", setup.db)
    assert result.exit_code == ExitCode.USAGE
    assert "pass --flows MODULE:ATTR or set LOOM_FLOWS" in result.stderr


def test_a_misspelt_flow_given_flows_suggests_the_name_not_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --flows given, "pass --flows" is the wrong fix for a typo: the message names the
    registered flow it most looks like, and the registry it looked in."""
    (tmp_path / "typo_flows.py").write_text(FLOWS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "typo_flows", raising=False)
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    result = _invoke("run", "doubel", "--db", db, "--flows", "typo_flows:flows")
    assert result.exit_code == ExitCode.USAGE
    assert "did you mean 'double'?" in result.stderr
    assert "pass --flows" not in result.stderr and "typo_flows:flows" in result.stderr


def _sync(s: Setup, *args: str) -> Result:
    return _invoke("knowledge", "sync", str(s.docs), "--scope", "ops", "--db", s.db, *args)


def test_sync_refusals_name_the_flag_in_one_line(setup: Setup) -> None:
    """A missing --source on a sourced corpus is one line naming the owner and the flag (not
    every document); the mass-delete refusal names --allow-mass-delete."""
    for index in range(30):
        (setup.docs / f"note-{index}.md").write_text(f"note {index}")
    assert _sync(setup, "--source", "repo", "--apply").exit_code == 0
    result = _sync(setup)
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr == (
        "error: 31 document(s) belong to source 'repo': pass --source NAME (documents are "
        "written by their owning source)\n"
    )
    for path in setup.docs.glob("note-*"):
        path.unlink()
    result = _sync(setup, "--source", "repo")
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr == (
        "error: sync would remove 30 of the 31 documents source 'repo' owns, more than the "
        "guard's 50%; if the source really dropped them, pass --allow-mass-delete\n"
    )
    assert _sync(setup, "--source", "repo", "--allow-mass-delete").exit_code == 0


def test_sync_prints_a_summary_and_lists_documents_only_when_verbose(setup: Setup) -> None:
    """One line for a folder of any size; --verbose lists what would be written."""
    for index in range(20):
        (setup.docs / f"note-{index}.md").write_text(f"note {index}")
    result = _sync(setup, "--source", "repo")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "plan (dry run; --apply to write): 21 to write, 0 unchanged, 0 to remove, "
        "0 retained (other sources)"
    ]
    verbose = _sync(setup, "--source", "repo", "--verbose").stdout.splitlines()
    assert len(verbose) == 22 and "  write  note-0.md" in verbose


def test_as_of_without_a_zone_says_how_to_give_one(setup: Setup) -> None:
    """A zone-less time names a different moment in every zone: refused with an example."""
    result = _invoke(
        "knowledge", "as-of", "2026-11-30T14:00:00", "--scope", "ops", "--db", setup.db
    )
    assert result.exit_code == ExitCode.USAGE
    assert "has no time zone" in result.stderr and "2026-11-30T14:00:00Z" in result.stderr
    result = _invoke(
        "knowledge", "as-of", "2099-11-30T14:00:00Z", "--scope", "ops", "--db", setup.db
    )
    assert result.exit_code == 0 and "disk.md" in result.stdout


@pytest.mark.parametrize("given", ["2026-12-04", "2026-12-04T09:30", "2026-12-04T09:30:15.5"])
def test_the_zones_a_refusal_suggests_are_accepted(setup: Setup, given: str) -> None:
    """The examples a zone-less time is refused with must themselves work: for a date alone
    they were ``2026-12-04Z`` (not an ISO time) and ``2026-12-04+01:00`` (read as no zone)."""
    refused = _invoke("executions", "list", "--since", given, "--db", setup.db)
    assert refused.exit_code == ExitCode.USAGE
    suggested = re.findall(r"e\.g\. (\S+) \(UTC\) or (\S+)$", refused.stderr.strip())
    assert suggested, refused.stderr
    for example in suggested[0]:
        accepted = _invoke("executions", "list", "--since", example, "--db", setup.db)
        assert accepted.exit_code == 0, (example, accepted.output)


@pytest.mark.parametrize(
    "command",
    [["list"], ["search", "disk"], ["as-of", "1"]],
    ids=lambda command: command[0],
)
def test_an_unknown_scope_is_named_with_the_known_ones(setup: Setup, command: list[str]) -> None:
    """A misspelt scope read as an empty corpus (exit 0, nothing listed): now exit 2 with
    the scopes that exist."""
    result = _invoke("knowledge", *command, "--scope", "opz", "--db", setup.db)
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr == "error: no scope named 'opz'; known: 'ops'\n"


def test_executions_list_filters_and_pages_with_full_dates(setup: Setup) -> None:
    """--flow/--status/--since/--until select, --limit/--after page (the next page's --after
    on stderr), and the table's dates carry the year."""
    db = ("--db", setup.db)
    for n in range(3):
        ran = _invoke("run", "double", "--input", f'{{"n": {n}}}', *db, "--flows", setup.flows)
        assert ran.exit_code == 0, ran.output
    every = json.loads(_invoke("executions", "list", "--json", *db).stdout)
    ids = [row["execution_id"] for row in every]
    assert len(ids) == 4
    page = _invoke("executions", "list", "--json", "--limit", "2", *db)
    assert [row["execution_id"] for row in json.loads(page.stdout)] == ids[:2]
    assert page.stderr == f"warning: more: --after {ids[1]} for the next page\n"
    rest = _invoke("executions", "list", "--json", "--limit", "2", "--after", ids[1], *db)
    assert [row["execution_id"] for row in json.loads(rest.stdout)] == ids[2:]
    assert rest.stderr == ""
    assert json.loads(_invoke("executions", "list", "--json", "--flow", "nope", *db).stdout) == []
    failed = _invoke("executions", "list", "--json", "--status", "failed", *db)
    assert json.loads(failed.stdout) == []
    future = _invoke("executions", "list", "--json", "--since", "2999-01-01T00:00:00Z", *db)
    assert json.loads(future.stdout) == []
    past = _invoke("executions", "list", "--json", "--until", "2999-01-01T00:00:00+01:00", *db)
    assert len(json.loads(past.stdout)) == 4
    assert _invoke("executions", "list", "--since", "2026-01-01T00:00", *db).exit_code == 2
    assert _invoke("executions", "list", "--status", "done", *db).exit_code == 2
    assert _invoke("executions", "list", "--after", MISSING_ID, *db).exit_code == 2
    year = every[0]["started_at"][:4]
    table = _invoke("executions", "list", *db).stdout
    assert re.search(rf"{year}-\d\d-\d\d \d\d:\d\d:\d\d", table), table


def test_replaying_a_bundle_needs_no_database_and_creates_none(
    setup: Setup, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle carries its execution: replayed from an empty directory, no loom.db appears."""
    empty = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(empty)
    result = _invoke("replay", str(setup.bundle), "--flows", setup.flows)
    assert result.exit_code == 0 and "replayed identically" in result.stdout
    assert list(empty.iterdir()) == []
    # Nor does a --db (a global LOOM_DB_URL, say) in a folder that does not exist matter.
    elsewhere = ["--db", f"sqlite:///{empty / 'nodir' / 'x.db'}"]
    result = _invoke("replay", str(setup.bundle), "--flows", setup.flows, *elsewhere)
    assert result.exit_code == 0 and "replayed identically" in result.stdout, result.output
    assert list(empty.iterdir()) == []


def test_every_command_on_a_sealed_log_without_the_key_says_so_in_one_line(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$LOOM_MASTER_KEY`` forgotten is the likeliest mistake on an encrypted log: every
    command that must open a sealed field says so on one line and exits 2 (a setup to fix,
    as for a wrong key), where seven of them printed a traceback and exited 1."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_runtime import Loom, MasterKey

    sealed = f"sqlite:///{setup.tmp_path / 'sealed.db'}"
    with Loom(sealed, encryption=MasterKey.from_env()) as loom:
        loom.flows = __import__("conv_flows").flows
        eid = str(loom.run("double", n=21).execution_id)
        open_knowledge_base(loom, "ops").put_doc(
            Doc(id="disk.md", text="Disk full: rotate the logs."), source="repo"
        )
    monkeypatch.delenv("LOOM_MASTER_KEY")
    db, flows = ["--db", sealed], ["--flows", setup.flows]
    for args in (
        ["run", "double", "--input", '{"n": 2}', *db, *flows],
        ["audit", eid, *db],
        ["export", eid, "-o", str(setup.tmp_path / "out.json"), *db],
        ["fork", eid, "--at-count", "0", *db, *flows],
        ["import", str(setup.bundle), *db],
        ["replay", eid, *db, *flows],
        ["executions", "show", eid, *db],
        ["knowledge", "counterfactual", eid, *db],
        [
            "knowledge",
            "sync",
            str(setup.docs),
            "--scope",
            "ops",
            "--source",
            "repo",
            "--apply",
            *db,
        ],
    ):
        result = _invoke(*args)
        assert result.exit_code == ExitCode.USAGE, (args, result.output)
        assert result.stdout == "", (args, result.stdout)
        assert result.stderr.startswith("error: "), (args, result.stderr)
        assert result.stderr.count("\n") == 1, (args, result.stderr)
        assert "LOOM_MASTER_KEY" in result.stderr or "master key" in result.stderr, args


def test_an_applied_sync_says_what_it_did_and_an_erased_file_how_to_go_on(
    setup: Setup,
) -> None:
    """After --apply the summary is in the past tense. A folder still holding a document
    that was erased cannot be synced (an erased document stays erased): one line naming it
    and the fix, not a traceback."""
    from loom_runtime import Loom, MasterKey

    applied = _sync(setup, "--source", "repo", "--apply")
    assert applied.exit_code == 0, applied.output
    assert applied.stdout.startswith("synced: 1 written, 0 unchanged, 0 removed"), applied.stdout
    with Loom(setup.db, encryption=MasterKey.from_env()) as loom:
        loom.erase(document="ops:disk.md", reason="request", by="dpo")
    (setup.docs / "disk.md").write_text("Disk full: rotate the logs, and page the owner.")
    # The dry run planned "1 written" where --apply then refused: it refuses alike now.
    for apply in (["--apply"], []):
        refused = _sync(setup, "--source", "repo", *apply)
        assert refused.exit_code == ExitCode.FAILED, (apply, refused.output)
        assert refused.stdout == ""
        assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("error: ")
        assert "disk.md" in refused.stderr and "remove its file" in refused.stderr, apply


def test_a_live_kind_no_decision_has_is_named_not_ignored(setup: Setup) -> None:
    """``--live retreival`` ran nothing live and answered "replayed identically" without a
    word. A kind the execution (or bundle) never recorded is named on stderr with the kinds it
    has; it is not refused, since code that now makes decisions of that kind runs them live.
    A kind it has runs live as before, without the warning."""
    target = ["--db", setup.db, "--flows", setup.flows]
    for recorded in (setup.execution_id, str(setup.bundle)):
        typo = _invoke("replay", recorded, "--live", "maths", *target)
        assert typo.exit_code == 0, typo.output
        assert typo.stderr.startswith("warning: --live maths: no recorded decision")
        assert "(its kinds: math)" in typo.stderr, typo.stderr
        live = _invoke("replay", recorded, "--live", "math", "--json", *target)
        assert live.exit_code == 0 and live.stderr == "", live.output
        assert json.loads(live.stdout)["live_values"] == {"twice": 42}


def test_a_database_in_a_missing_folder_is_one_line(setup: Setup) -> None:
    """``--db sqlite:///nope/dir/loom.db`` for a command that may create the database: the
    folder is named (exit 2), not sqlite's "unable to open database file" in a traceback, and
    no folder is made (a typo in a path must not leave directories behind)."""
    missing = setup.tmp_path / "nope" / "dir" / "loom.db"
    db = ["--db", f"sqlite:///{missing}"]
    for args in (
        ["run", "double", "--input", '{"n": 2}', "--flows", setup.flows, *db],
        ["knowledge", "sync", str(setup.docs), "--scope", "ops", "--apply", *db],
    ):
        result = _invoke(*args)
        assert result.exit_code == ExitCode.USAGE, (args, result.output)
        assert result.stderr.count("\n") == 1, result.stderr
        assert f"no folder {missing.parent}" in result.stderr, result.stderr
    assert not (setup.tmp_path / "nope").exists()


def test_audit_html_to_a_path_it_cannot_write_is_one_line(setup: Setup) -> None:
    """``loom audit ID --html nodir/a.html`` (or a folder) says it cannot write there, exit 2,
    as ``loom export -o`` does, rather than a FileNotFoundError traceback; ``--json`` with
    ``--html`` is refused, since one of them would be ignored."""
    db = ["--db", setup.db]
    for target in (setup.tmp_path / "nodir" / "a.html", setup.docs):
        result = _invoke("audit", setup.execution_id, "--html", str(target), *db)
        assert result.exit_code == ExitCode.USAGE, result.output
        assert result.stderr.startswith(f"error: cannot write {target}: "), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
    both = _invoke("audit", setup.execution_id, "--json", "--html", "a.html", *db)
    assert both.exit_code == ExitCode.USAGE and "--json or --html" in both.stderr, both.output
    assert not (setup.tmp_path / "a.html").exists()


def test_a_fork_override_the_fork_never_asked_for_is_named(setup: Setup) -> None:
    """``--override thrice=5`` on a flow that asks ``twice``: the fork runs (it is recorded),
    but an override that answered nothing is a likely typo, so stderr names it and the keys
    the fork did decide; one that was used is not mentioned."""
    args = ["fork", setup.execution_id, "--at-count", "0", "--db", setup.db]
    args += ["--flows", setup.flows]
    typo = _invoke(*args, "--override", "thrice=5")
    assert typo.exit_code == 0, typo.output
    assert typo.stderr == (
        "warning: --override thrice: the fork never asked for this key, so it answered "
        "nothing (the keys it asked: twice)\n"
    )
    used = _invoke(*args, "--override", "twice=5")
    assert used.exit_code == 0 and used.stderr == "", used.output
    assert used.stdout.rstrip().endswith("5")


def test_a_fork_override_names_the_keys_asked_before_the_fork_point_too(setup: Setup) -> None:
    """An override answers a key before the fork point as well, so the keys a misspelt one
    may have meant include those the fork took from its parent; the warning called them "the
    keys it decided" (a newcomer's walk): it says "asked"."""
    args = ["fork", setup.execution_id, "--at-count", "1", "--db", setup.db]
    typo = _invoke(*args, "--flows", setup.flows, "--override", "thrice=5")
    assert typo.exit_code == 0, typo.output
    assert "(the keys it asked: twice)" in typo.stderr, typo.stderr
    used = _invoke(*args, "--flows", setup.flows, "--override", "twice=5")
    assert used.exit_code == 0 and used.stderr == "" and used.stdout.rstrip().endswith("5")


def test_a_refusal_about_documents_without_a_source_says_so_in_words(setup: Setup) -> None:
    """The mass-delete refusal named the owner as Python prints it (``source None``)."""
    plain = ["knowledge", "sync", str(setup.docs), "--scope", "plain", "--db", setup.db]
    assert _invoke(*plain, "--apply").exit_code == 0
    (setup.docs / "disk.md").unlink()
    (setup.docs / "other.md").write_text("Something else entirely.")
    refused = _invoke(*plain, "--apply")
    assert refused.exit_code == ExitCode.USAGE, refused.output
    assert "None" not in refused.stderr, refused.stderr
    assert "of the 1 documents without a source" in refused.stderr, refused.stderr


def test_erase_naming_nothing_or_two_things_says_so_with_the_flags(setup: Setup) -> None:
    """The refusal named the Python arguments (``execution=, user=, ...``)."""
    for extra in ([], ["--user", "u", "--tenant", "t"]):
        refused = _invoke("erase", "--reason", "r", *extra, "--db", setup.db)
        assert refused.exit_code == ExitCode.USAGE, refused.output
        assert "--execution, --user, --tenant, --document or --memory-key" in refused.stderr
        assert "=" not in refused.stderr, refused.stderr


def test_as_of_past_the_head_says_so_in_the_command_s_words(setup: Setup) -> None:
    """A position past the log's head was refused with the Python method's name
    (``as_of needs ...``); the command names WHEN and the range it takes."""
    refused = _invoke("knowledge", "as-of", "999", "--scope", "ops", "--db", setup.db)
    assert refused.exit_code == ExitCode.USAGE, refused.output
    assert "as_of" not in refused.stderr, refused.stderr
    assert re.search(r"WHEN 999 is past the log's head \(\d+\)", refused.stderr), refused.stderr


def test_retain_with_two_selectors_names_the_flags(setup: Setup) -> None:
    """The refusal named the Python arguments (``tenant=``, ``scope=``)."""
    refused = _invoke(
        "retain", "--older-than", "90d", "--tenant", "t", "--scope", "ops", "--db", setup.db
    )
    assert refused.exit_code == ExitCode.USAGE, refused.output
    assert "give one of --tenant" in refused.stderr and "=" not in refused.stderr


def test_a_flow_s_own_loom_error_keeps_its_traceback_and_execution_id(setup: Setup) -> None:
    """A loom error raised by the flow's code (an empty decision key) is the flow's failure,
    recorded: it keeps its traceback, pointing at the flow's line, and the note naming the
    execution that ``loom resume --retry-failed`` needs (exit 1), as a ValueError would."""
    (setup.tmp_path / "conv_badkey.py").write_text(FLOWS.replace('"twice"', '""'))
    result = _invoke(
        "run", "double", "--input", '{"n": 2}', "--db", setup.db, "--flows", "conv_badkey:flows"
    )
    assert result.exit_code == 1, result.output
    assert re.search(r"conv_badkey\.py\", line \d+, in double", result.stderr), result.stderr
    assert "DecisionKeyError" in result.stderr
    assert "recorded as the failure of execution" in result.stderr


EVIL = "evil\x1b[2J\x1b]52;c;aGVsbG8=\x1b\\"
"""A clear-screen and a clipboard write (OSC 52, ended by ST): what a model could answer."""


def test_a_flow_s_failure_prints_its_traceback_inert_and_its_id_on_one_line(
    setup: Setup,
) -> None:
    """The flow's exception quotes a recorded answer: Typer's traceback printer wrote it raw,
    escape sequences and all, and wrapped the note's execution id onto a line of its own."""
    (setup.tmp_path / "conv_evil.py").write_text(
        FLOWS + "\n@flows.flow('quote')\ndef quote(ctx) -> str:\n"
        f"    answer = ctx.decide('model', lambda: {EVIL!r})\n"
        "    raise ValueError(f'unexpected answer: {answer}')\n"
    )
    result = _invoke("run", "quote", "--db", setup.db, "--flows", "conv_evil:flows")
    assert result.exit_code == ExitCode.FAILED, result.output
    assert "\x1b" not in result.stderr, result.stderr
    assert "ValueError: unexpected answer: evil<U+001B>[2J<U+001B>]52;c;" in result.stderr
    assert re.search(r"conv_evil\.py\", line \d+, in quote", result.stderr), result.stderr
    assert re.search(r"recorded as the failure of execution [0-9a-f-]{36}\n", result.stderr)


def test_a_flow_s_traceback_begins_at_the_flow(setup: Setup) -> None:
    """The traceback printed for a flow's failure began with eight frames of loom's command
    line, Typer, Click and the driver before the flow's own (docs/cli.md says its lines point
    at your code, a newcomer's walk found they did not): the frames before the first of the
    application's are left out (ADR 0008, amended "flow traceback")."""
    (setup.tmp_path / "conv_raises.py").write_text(
        FLOWS + "\n@flows.flow('boom')\ndef boom(ctx) -> str:\n    raise ValueError('boom')\n"
    )
    result = _invoke("run", "boom", "--db", setup.db, "--flows", "conv_raises:flows")
    assert result.exit_code == ExitCode.FAILED, result.output
    frames = re.findall(r'File "([^"]+)", line \d+, in (\w+)', result.stderr)
    assert frames and frames[0] == (str(setup.tmp_path / "conv_raises.py"), "boom"), frames
    assert "ValueError: boom" in result.stderr


@pytest.mark.parametrize(
    ("module", "said"),
    [
        ("raise RuntimeError('no config')\n", "RuntimeError: no config"),
        ("def broken(:\n", "SyntaxError"),
        ("def flows():\n    raise KeyError('HOME')\n", "KeyError: 'HOME'"),
    ],
    ids=["raises-on-import", "syntax-error", "factory-raises"],
)
def test_flows_that_fail_to_load_are_one_line_and_a_usage_error(
    setup: Setup, module: str, said: str
) -> None:
    """A --flows module that raised while importing printed a 60-line traceback and exited 1,
    which says "a check failed": `loom replay bundle.json` in CI read a typo as a divergence."""
    (setup.tmp_path / "conv_broken.py").write_text(module)
    result = _invoke("replay", setup.execution_id, "--db", setup.db, "--flows", "conv_broken:flows")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr.startswith("error: cannot load flows from 'conv_broken:flows'")
    assert said in result.stderr and "conv_broken.py" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _head(setup: Setup) -> tuple[int, str]:
    verified = _invoke("verify", "--json", "--db", setup.db)
    head = json.loads(verified.stdout)["head"]
    return head["notification_id"], head["global_hash"]


def test_an_anchor_in_capitals_or_with_a_line_end_is_the_same_anchor(setup: Setup) -> None:
    """Hex in capitals, or an anchor read from a file saved with CRLF, reported TAMPERED."""
    position, digest = _head(setup)
    for given in (
        f"{position}:{digest.upper()}",
        f"{position}:{digest}\r\n",
        f" {position}:{digest}",
    ):
        result = _invoke("verify", "--anchor", given, "--db", setup.db)
        assert result.exit_code == ExitCode.OK, (given, result.output)


@pytest.mark.parametrize("digest", ["not-hex", "", "abc"])
def test_an_anchor_that_is_no_hash_is_a_usage_error_not_tampering(
    setup: Setup, digest: str
) -> None:
    position, _ = _head(setup)
    result = _invoke("verify", "--anchor", f"{position}:{digest}", "--db", setup.db)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "TAMPERED" not in result.output and "--anchor" in result.stderr


def test_an_anchor_at_a_negative_position_is_a_usage_error(setup: Setup) -> None:
    _, digest = _head(setup)
    result = _invoke("verify", "--anchor", f"-1:{digest}", "--db", setup.db)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "TAMPERED" not in result.output


@pytest.mark.parametrize("group", [[], ["knowledge"], ["executions"], ["bundle"]])
def test_a_group_without_a_command_prints_its_help_and_no_empty_error(group: list[str]) -> None:
    result = _invoke(*group)
    assert "Usage:" in result.stdout
    assert "error:" not in result.stderr, result.stderr


def test_a_source_conflict_with_documents_of_no_source_says_how_to_write_them(
    setup: Setup,
) -> None:
    """It said "owned by source None: pass that --source", and --source None is a source
    named 'None'."""
    db = ["--db", setup.db]
    wrote = _invoke("knowledge", "sync", str(setup.docs), "--scope", "plain", "--apply", *db)
    assert wrote.exit_code == ExitCode.OK, wrote.output
    refused = _invoke(
        "knowledge", "sync", str(setup.docs), "--scope", "plain", "--source", "wiki", *db
    )
    assert refused.exit_code == ExitCode.USAGE, refused.output
    assert "None" not in refused.stderr, refused.stderr
    assert "no source" in refused.stderr and "without --source" in refused.stderr


def test_after_takes_the_start_of_an_id_as_every_other_option_does(setup: Setup) -> None:
    with_later = _invoke(
        "run", "double", "--input", '{"n": 1}', "--db", setup.db, "--flows", setup.flows
    )
    assert with_later.exit_code == ExitCode.OK, with_later.output
    whole = _invoke("executions", "list", "--json", "--after", setup.execution_id, "--db", setup.db)
    assert whole.exit_code == ExitCode.OK, whole.output
    for given in (setup.execution_id[:8], setup.execution_id.upper()):
        result = _invoke("executions", "list", "--json", "--after", given, "--db", setup.db)
        assert result.exit_code == ExitCode.OK, (given, result.output)
        assert json.loads(result.stdout) == json.loads(whole.stdout) != []


def test_worker_refuses_its_timings_in_flag_names(setup: Setup) -> None:
    result = _invoke(
        "worker", "--dead-after", "1", "--stop-after", "0", "--db", setup.db, "--flows", setup.flows
    )
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "--heartbeat" in result.stderr and "--dead-after" in result.stderr, result.stderr
    assert "=" not in result.stderr, result.stderr


@pytest.mark.parametrize("given", ["c---", "c-c-", "cc-c"])
def test_the_start_of_an_id_is_four_hex_digits_whatever_its_dashes(
    setup: Setup, given: str
) -> None:
    """Dashes counted towards the four characters: `c---` named an execution by one digit."""
    result = _invoke(
        "executions", "show", given.replace("c", setup.execution_id[0]), "--db", setup.db
    )
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "first 4 or more characters" in result.stderr, result.stderr


def test_the_start_of_an_id_may_hold_its_dashes(setup: Setup) -> None:
    """The control: an id's start as a table shows it, dash included, still names it."""
    result = _invoke("executions", "show", setup.execution_id[:13], "--db", setup.db)
    assert result.exit_code == ExitCode.OK, result.output


LIVE_FLOWS = """
import os
from loom_runtime import FlowRegistry

flows = FlowRegistry()

def search():
    if os.environ.get("CONV_SEARCH_DOWN"):
        raise ConnectionError("search backend is down")
    if os.environ.get("CONV_SEARCH_LONG"):
        return ["passage " * 2000]
    return ["disk.md"]

@flows.flow("lookup")
def lookup(ctx) -> list:
    return ctx.decide("search", search, kind="retrieval")
"""


def test_replay_json_describes_a_live_decision_that_raised(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live decision that failed left the exception in ``live_values``: ``--json`` printed a
    traceback (msgspec cannot encode it) where text mode answered."""
    (setup.tmp_path / "conv_live.py").write_text(LIVE_FLOWS)
    target = ["--db", setup.db, "--flows", "conv_live:flows"]
    recorded = _invoke("run", "lookup", "--json", *target)
    assert recorded.exit_code == ExitCode.OK, recorded.output
    execution_id = json.loads(recorded.stdout)["execution_id"]
    monkeypatch.setenv("CONV_SEARCH_DOWN", "1")
    result = _invoke("replay", execution_id, "--live", "retrieval", "--json", *target)
    assert result.exit_code == ExitCode.FAILED, result.output
    answer = json.loads(result.stdout)
    assert answer["identical"] is False
    assert answer["live_values"] == {
        "search": {"raised": "builtins:ConnectionError", "message": "search backend is down"}
    }


def test_replay_text_cuts_a_long_live_value_as_executions_show_cuts_values(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replay --live`` printed each live value's repr whole on one line (16,000 characters
    of passages here; a newcomer's walk): it is cut as ``executions show`` cuts a value, and
    says that ``--json`` prints it whole."""
    (setup.tmp_path / "conv_live_long.py").write_text(LIVE_FLOWS)
    target = ["--db", setup.db, "--flows", "conv_live_long:flows"]
    recorded = _invoke("run", "lookup", "--json", *target)
    execution_id = json.loads(recorded.stdout)["execution_id"]
    monkeypatch.setenv("CONV_SEARCH_LONG", "1")
    result = _invoke("replay", execution_id, "--live", "retrieval", *target)
    assert result.exit_code == ExitCode.FAILED, result.output
    [line] = [line for line in result.stdout.splitlines() if line.startswith("live ")]
    assert len(line) < 4_200 and line.endswith("--json prints it whole)"), line[-200:]


@pytest.mark.parametrize("command", [["erase", "--help"], ["knowledge", "--help"]])
def test_a_reader_that_goes_away_is_no_traceback(command: list[str]) -> None:
    """``loom erase --help | head``: the reader takes a few lines and closes the pipe while
    loom still writes. Click ends quietly on a broken pipe, but inside a subcommand loom's
    group caught it as a defect of its own and printed a traceback on the terminal."""
    process = subprocess.Popen(
        [sys.executable, "-m", "loom_runtime.tools.cli", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert process.stdout is not None
    for _ in range(10):  # as `head` does: some lines read, then the pipe closed
        process.stdout.readline()
    process.stdout.close()
    _, stderr = process.communicate(timeout=60)
    assert b"Traceback" not in stderr, stderr.decode()
