"""The loom CLI, driven through Typer's runner (Click's CliRunner)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_runtime.tools.cli import app


def _text(output: str) -> str:
    return " ".join(output.split())  # Rich wraps long lines


def test_demo_is_registered_through_the_entry_point() -> None:
    """loom_knowledge adds `demo` via the loom.cli entry point; the runtime never imports it."""
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "demo" in _text(result.output)


@pytest.mark.slow  # runs `loom demo` in subprocesses
def test_demo_runs_the_headline_and_exits_0(demo_folder: Path, session_tempfiles: Path) -> None:
    """`loom demo` replays identically in a fresh process and rebuilds an equal corpus."""
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    text = _text(result.output)
    assert "IDENTICAL" in text and "EQUAL to the original passage for passage" in text
    # The demo keeps its log for the user to explore: the suite's, in the session's folder.
    assert f"sqlite:///{session_tempfiles}/loom-demo-" in text


def _readme_corpus(url: str) -> tuple[int, list[object]]:
    """The README's corpus example followed in ``url``: scope runbooks, source runbook-repo,
    documents named like the demo's own. Returns the log head and the scope's manifest."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_runtime import Loom

    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "runbooks")
        kb.sync(
            [
                Doc(id="database-slow-queries.md", text="Our own notes on slow queries."),
                Doc(id="disk.md", text="Our own disk runbook."),
            ],
            source="runbook-repo",
        )
        return loom.log.position, list(kb.list_docs())


@pytest.mark.slow  # runs `loom demo` in subprocesses
@pytest.mark.parametrize("env", [False, True], ids=["default", "LOOM_DB_URL"])
def test_demo_never_touches_the_users_database(
    demo_folder: Path, monkeypatch: pytest.MonkeyPatch, env: bool
) -> None:
    """Without --db the demo writes a new file of its own: ./loom.db (or LOOM_DB_URL's
    database), holding the README example's corpus, is byte for byte what it was."""
    if env:
        monkeypatch.setenv("LOOM_DB_URL", f"sqlite:///{demo_folder / 'prod.db'}")
    database = demo_folder / ("prod.db" if env else "loom.db")
    _readme_corpus(f"sqlite:///{database}")
    before = {p.name: p.read_bytes() for p in demo_folder.glob("*.db*")}
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in demo_folder.glob("*.db*")} == before
    assert "loom-demo-" in _text(result.output)  # it says where its own log is


@pytest.mark.slow  # runs `loom demo` in subprocesses
def test_demo_with_an_explicit_db_writes_only_a_scope_of_its_own(db_url: str) -> None:
    """--db given: the README example's scope is untouched; every corpus event the demo
    appended is in one fresh demo-... scope; no corpus table of the database is dropped."""
    from loom_knowledge import open_knowledge_base
    from loom_runtime import Loom

    head, manifest = _readme_corpus(db_url)
    result = CliRunner().invoke(app, ["demo", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert "IDENTICAL" in _text(result.output)
    # Each step is one line, as a pipe gets it (step 6 was split in two, read as hard wrapping).
    (skipped,) = [line for line in result.stdout.splitlines() if line.startswith("6. ")]
    assert skipped.startswith("6. rebuild skipped") and skipped.endswith("from the log alone)")
    with Loom(db_url) as loom:
        assert list(open_knowledge_base(loom, "runbooks").list_docs()) == manifest
        scopes = {
            getattr(loom.log.decode(n), "scope", None) for n in loom.log.notifications(after=head)
        } - {None}
    [scope] = scopes
    assert isinstance(scope, str) and scope.startswith("demo-")


def test_bad_database_url_is_a_usage_error() -> None:
    """Exit code 2 and a message saying what a good URL looks like."""
    result = CliRunner().invoke(app, ["demo", "--db", "mysql://nowhere/x"])
    assert result.exit_code == 2
    assert "SQLite or PostgreSQL" in _text(result.output)


FLOWS = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()

@flows.flow("double")
def double(ctx, n: int) -> int:
    return ctx.decide("twice", lambda: n * 2, kind="math")
"""


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, _text(result.output)


def test_run_list_show_replay_export_rebuild_doctor(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's round trip through the CLI, each command's exit code checked."""
    (tmp_path / "cli_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = _cli(
        "run", "double", "--input", '{"n": 21}', "--db", db_url, "--flows", "cli_flows:flows"
    )
    assert code == 0 and "42" in out
    execution_id = out.split()[1]
    code, out = _cli("executions", "list", "--db", db_url)
    assert code == 0 and execution_id in out and "completed" in out
    code, out = _cli("executions", "show", execution_id, "--db", db_url)
    assert code == 0 and "twice" in out and "math" in out
    code, out = _cli("replay", execution_id, "--db", db_url, "--flows", "cli_flows:flows")
    assert code == 0 and "replayed identically" in out
    bundle = tmp_path / "incident.json"
    code, out = _cli("export", execution_id, "-o", str(bundle), "--db", db_url)
    assert code == 0 and bundle.exists()
    code, out = _cli("replay", str(bundle), "--flows", "cli_flows:flows")
    assert code == 0 and "replayed identically" in out
    code, out = _cli("rebuild", "--db", db_url)
    assert code == 0 and "rebuilt" in out
    code, out = _cli("doctor", "--db", db_url)
    assert code == 0 and "FAIL" not in out


def test_a_divergent_replay_exits_1_and_bad_input_exits_2(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit codes: 1 for a divergence, 2 for a usage error (bad JSON, unknown flow or id)."""
    (tmp_path / "cli_flows_old.py").write_text(FLOWS)
    (tmp_path / "cli_flows_new.py").write_text(
        FLOWS.replace("n * 2", "n * 3").replace('"twice"', '"thrice"')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = _cli(
        "run", "double", "--input", '{"n": 1}', "--db", db_url, "--flows", "cli_flows_old:flows"
    )
    execution_id = out.split()[1]
    code, out = _cli("replay", execution_id, "--db", db_url, "--flows", "cli_flows_new:flows")
    assert code == 1 and "UnrecordedDecisionError" in out and "'twice'" in out
    assert _cli("run", "double", "--input", "{nope", "--db", db_url)[0] == 2
    assert _cli("run", "nope", "--db", db_url, "--flows", "cli_flows_old:flows")[0] == 2
    assert _cli("replay", "not-an-id", "--db", db_url, "--flows", "cli_flows_old:flows")[0] == 2


def test_doctor_passes_a_healthy_log_whose_projections_catch_up_lazily(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes with no read after them leave projections behind the head (they catch up on
    the next read, by design): doctor catches them up and reports ok, not FAIL."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_runtime import Loom

    (tmp_path / "lazy_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with Loom(db_url) as loom:
        open_knowledge_base(loom, "ops").put_doc(Doc(id="a", text="alpha"))
    assert (
        _cli("run", "double", "--input", '{"n": 1}', "--db", db_url, "--flows", "lazy_flows:flows")[
            0
        ]
        == 0
    )
    code, out = _cli("doctor", "--db", db_url)
    assert code == 0 and "FAIL" not in out, out
    assert "caught up from 1 to" in out


def test_doctor_fails_when_a_projection_cannot_catch_up(db_url: str) -> None:
    """A projection whose rows and position disagree (rewound, rows kept) cannot apply the
    log again: reported with the next step, exit 1."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_runtime import Loom

    with Loom(db_url) as loom:
        open_knowledge_base(loom, "ops").put_doc(Doc(id="a", text="alpha"))
        with loom.log.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE loom_tracking SET position = 0")
    code, out = _cli("doctor", "--db", db_url)
    assert code == 1 and "FAIL" in out and "loom rebuild" in out


def test_doctor_fails_an_erasure_left_half_done_until_it_is_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADR 0049, amended "verify": the forget event appended, the keys not destroyed (a crash
    between the two writes) is an operator's next step, which doctor names."""
    from loom_runtime import Labels, Loom, MasterKey, erasure

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    key = MasterKey.generate()
    monkeypatch.setenv("LOOM_MASTER_KEY", key)
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        loom.flow("note")(lambda ctx: "x")
        loom.run("note", labels=Labels(user="alice"))
        code, out = _cli("doctor", "--db", url)
        assert code == 0 and "keys: 1 data keys agree with the forget log" in _text(out), out
        keyring = erasure.keyring_of(loom, "user")
        with monkeypatch.context() as patched:
            patched.setattr(keyring, "destroy", lambda subjects, *, position: 0)
            loom.erase(user="alice", reason="request", by="dpo")
        code, out = _cli("doctor", "--db", url)
        assert code == 1 and "FAIL keys: erasure-incomplete" in _text(out), out
        assert "run the same `loom erase ... --apply` again" in _text(out)
        loom.erase(user="alice", reason="request", by="dpo")
    code, out = _cli("doctor", "--db", url)
    assert code == 0 and "FAIL" not in out, out


def test_doctor_fails_an_encrypted_log_opened_without_its_master_key(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``$LOOM_MASTER_KEY`` doctor said all was well of an encrypted log, where every
    run, worker and erasure of that process is refused (found by an acceptance audit of the
    erasure issue). With the key it says encryption is on; a clear log says off."""
    from loom_runtime import Labels, Loom, MasterKey

    def note(ctx: object) -> str:
        return "x"

    monkeypatch.delenv("LOOM_MASTER_KEY", raising=False)
    clear = f"sqlite:///{tmp_path / 'clear.db'}"
    with Loom(clear) as loom:
        loom.flow("note")(note)
        loom.run("note")
    code, out = _cli("doctor", "--db", clear)
    assert code == 0 and "encryption: off" in _text(out), out
    key = MasterKey.generate()
    monkeypatch.setenv("LOOM_MASTER_KEY", key)
    with Loom(db_url, encryption=MasterKey.from_env()) as loom:
        loom.flow("note")(note)
        loom.run("note", labels=Labels(user="alice"))
    monkeypatch.delenv("LOOM_MASTER_KEY")
    code, out = _cli("doctor", "--db", db_url)
    assert code == 1 and "FAIL" in out and "LOOM_MASTER_KEY" in _text(out), out
    monkeypatch.setenv("LOOM_MASTER_KEY", key)
    code, out = _cli("doctor", "--db", db_url)
    assert code == 0 and "encryption: on" in _text(out), out


def test_verify_reports_ok_then_the_first_altered_event(db_url: str) -> None:
    """`loom verify` exits 0 on an intact log with a head to keep; 1 after a row is altered."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_runtime import Loom

    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.put_doc(Doc(id="a", text="alpha"))
        kb.put_doc(Doc(id="b", text="beta"))
        table = loom.log.application.recorder.events_table_name  # type: ignore[attr-defined]
        code, out = _cli("verify", "--db", db_url)
        assert code == 0 and "ok: 2 events verified" in out
        head = out.split("head ")[1].split()[0]
        with loom.log.engine.begin() as conn:
            conn.exec_driver_sql(
                f"UPDATE {table} SET state = replace(state, 'alpha', 'omega') "
                if loom.log.engine.dialect.name == "sqlite"
                else f"UPDATE {table} SET state = convert_to(replace(convert_from(state, "
                "'UTF8'), 'alpha', 'omega'), 'UTF8')"
            )
        code, out = _cli("verify", "--db", db_url, "--anchor", head)
        assert code == 1 and "TAMPERED at log position 1" in out
    assert _cli("verify", "--db", db_url, "--anchor", "nonsense")[0] == 2


FLAKY = """
import os

from loom_runtime import FlowRegistry
from loom_runtime.backoff import Backoff

flows = FlowRegistry()
calls = []


def slow_once():
    calls.append(1)
    if len(calls) == 1:
        raise TimeoutError("slow")
    return "steady"


def fetch():
    if os.environ.get("LOOM_TEST_UPSTREAM_DOWN"):
        raise ConnectionError("upstream down")
    return "data"


@flows.flow("fetcher")
def fetcher(ctx) -> str:
    first = ctx.decide("first", slow_once, retry=Backoff(attempts=2, first_pause=0.0))
    data = ctx.decide("fetch", fetch, kind="http")
    return first + ":" + data
"""


def test_resume_retry_failed_and_fork_show_their_lineage(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed run is reopened with --retry-failed, then forked with an override; `executions
    show` tells each one's history and what was measured (the retry)."""
    (tmp_path / "cli_flaky.py").write_text(FLAKY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_flaky", raising=False)  # its call count is per test
    flows = ("--db", db_url, "--flows", "cli_flaky:flows")
    monkeypatch.setenv("LOOM_TEST_UPSTREAM_DOWN", "1")
    code, _ = _cli("run", "fetcher", *flows)
    assert code == 1
    code, out = _cli("executions", "list", "--db", db_url)
    (execution_id,) = re.findall(r"[0-9a-f]{8}-[0-9a-f-]{27}", out)
    code, out = _cli("executions", "show", execution_id, "--db", db_url)
    assert "--retry-failed" in out
    assert "1 retry:" in out and "builtins:TimeoutError:" in out and "(paused 0 s)" in out

    code, out = _cli("resume", execution_id, *flows)
    assert code == 2 and "retry_failed=True" in out
    monkeypatch.delenv("LOOM_TEST_UPSTREAM_DOWN")
    code, out = _cli("resume", execution_id, "--retry-failed", *flows)
    assert code == 0 and "steady:data" in out
    code, out = _cli("executions", "show", execution_id, "--db", db_url)
    assert "reopened by" in out and "upstream down" in out and "computed again: 'fetch'" in out

    code, out = _cli("fork", execution_id, "--at", "fetch", "--override", 'fetch="mock"', *flows)
    assert code == 0 and "steady:mock" in out
    fork_id = out.split()[1]
    code, out = _cli("executions", "show", fork_id, "--db", db_url)
    assert f"forked from execution {execution_id}, taking its first 1 decision(s)" in out
    assert "inherited" in out and "override" in out
    code, out = _cli("executions", "list", "--db", db_url)
    assert code == 0 and "parent" in out and execution_id[:8] in out.split(fork_id)[1]

    assert _cli("fork", execution_id, *flows)[0] == 2, "no point given"
    assert _cli("fork", execution_id, "--at", "nope", *flows)[0] == 2
    assert _cli("fork", execution_id, "--at-count", "9", *flows)[0] == 2
    assert _cli("fork", execution_id, "--at-count", "0", "--override", "x", *flows)[0] == 2


def test_executions_show_shortens_a_huge_input_and_output(db_url: str) -> None:
    """`executions show` shortens a decision's value in its table but printed the input and
    the output whole: a 2 MB prompt filled the terminal (a CLI review). Each is shortened to
    a head, saying how much was left out and that --json prints it whole."""
    from loom_runtime import Loom

    huge = "x" * 2_000_000
    with Loom(db_url) as loom:

        @loom.flow("echo")
        def echo(ctx: object, text: str) -> str:
            return text.upper()

        execution_id = str(loom.run("echo", text=huge).execution_id)
    code, out = _cli("executions", "show", execution_id, "--db", db_url)
    assert code == 0, out
    assert len(out) < 20_000, len(out)
    assert out.count("more characters as shown: --json prints it whole") == 2, out[-2_000:]
    assert "input: " in out and "output: " in out
    code, whole = _cli("executions", "show", execution_id, "--json", "--db", db_url)
    assert code == 0 and huge in whole and huge.upper() in whole


def test_executions_show_cuts_an_input_after_showing_its_invisible_characters(
    db_url: str,
) -> None:
    """The 4,000-character cut was made before invisible characters were shown as
    ``<U+XXXX>``: an input of 5,000 zero-width spaces printed as 32,000 characters (a CLI
    review). The cut is made on what is printed, newlines of an error message included."""
    from loom_runtime import Loom

    hidden = "\u200b" * 5_000
    with Loom(db_url) as loom:

        @loom.flow("echo-hidden")
        def echo_hidden(ctx: object, text: str) -> str:
            raise ValueError("\n" * 5_000)

        with pytest.raises(ValueError) as failed:
            loom.run("echo-hidden", text=hidden)
    execution_id = failed.value.__notes__[-1].split()[-1]  # "...the failure of execution ID"
    code, out = _cli("executions", "show", execution_id, "--db", db_url)
    assert code == 0, out
    assert len(out) < 12_000, len(out)
    assert "<U+200B>… (" in out, "the cut never leaves half an escape"
    assert out.count("more characters as shown: --json prints it whole") == 2, out[-2_000:]


def test_flows_naming_a_loom_bring_its_database_unless_db_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--flows app:loom`` names the ``Loom`` the flows are registered on, and the README's
    quickstart builds that ``Loom`` on the app's own database. The command used its flows
    and redactor but opened ``--db``, else ``LOOM_DB_URL``, else ``./loom.db``: a run was
    recorded in a new ``./loom.db`` while the flow's body read the app's corpus, and an
    audit there found none of its passages. Without ``--db`` (or ``LOOM_DB_URL``) the
    command now opens the named Loom's database; given one that differs, it warns that the
    flows' own reads and writes go elsewhere (ADR 0008, amended "flows bring their log")."""
    app = tmp_path / "app.db"
    (tmp_path / "app_loom_flows.py").write_text(
        FLOWS.replace("FlowRegistry", "Loom").replace("Loom()", f"Loom('sqlite:///{app}')")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out = _cli("run", "double", "--input", '{"n": 21}', "--flows", "app_loom_flows:flows")
    assert code == 0 and "42" in out, out
    assert not (elsewhere / "loom.db").exists()
    code, out = _cli("executions", "list", "--db", f"sqlite:///{app}")
    assert code == 0 and "completed" in out and "double" in out
    other = f"sqlite:///{tmp_path / 'other.db'}"
    code, out = _cli(
        "run", "double", "--input", '{"n": 1}', "--db", other, "--flows", "app_loom_flows:flows"
    )
    assert code == 0 and "warning:" in out and str(app) in out, out
    assert "warning:" not in _cli("executions", "list", "--db", other)[1]


def test_a_file_path_given_as_the_database_url_is_told_its_url() -> None:
    """``--db loom.db`` (a path, not a URL) is a usage error that names the URL it meant."""
    result = CliRunner().invoke(app, ["executions", "list", "--db", "./loom.db"])
    assert result.exit_code == 2
    assert "sqlite:///./loom.db" in _text(result.output)


def test_a_folder_given_as_the_database_is_told_so(tmp_path: Path) -> None:
    """``--db sqlite:///somefolder`` said "no loom database at" the folder, as if nothing
    were there (a newcomer's walk): the path is a folder, and a file in it is wanted."""
    for command in (["executions", "list"], ["run", "nope"]):
        result = CliRunner().invoke(app, [*command, "--db", f"sqlite:///{tmp_path}"])
        assert result.exit_code == 2, result.output
        assert f"{tmp_path} is a folder" in _text(result.output)


def test_flows_naming_a_loom_take_its_database_only_where_the_command_opens_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regression review of the rule above: a Loom of ``persistence="sqlalchemy"`` had a
    second, builtin log written into its database (the command line opens builtin logs
    only), and a bundle's replay, which needs no database, connected to the Loom's. Neither
    takes the Loom's URL; the first is warned about. A password given as a query parameter
    is not printed in the warning, nor is the query taken for another log."""
    app = tmp_path / "app.db"
    module = FLOWS.replace("FlowRegistry", "Loom")
    (tmp_path / "sa_loom_flows.py").write_text(
        module.replace("Loom()", f"Loom('sqlite:///{app}', persistence='sqlalchemy')")
    )
    (tmp_path / "pg_loom_flows.py").write_text(
        module.replace("Loom()", "Loom('postgresql://u:p@127.0.0.1:1/db?password=hunter2')")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out = _cli("run", "double", "--input", '{"n": 1}', "--flows", "sa_loom_flows:flows")
    assert code == 0 and "warning:" in out and str(app) in out, out
    assert not app.exists() and (tmp_path / "loom.db").exists()
    listed = _cli("executions", "list", "--json")[1]
    bundle = tmp_path / "run.json"
    assert _cli("export", json.loads(listed)[0]["execution_id"], "-o", str(bundle))[0] == 0
    code, out = _cli("replay", str(bundle), "--flows", "pg_loom_flows:flows")
    assert code == 0 and "replayed identically" in out, out
    other = f"sqlite:///{tmp_path / 'other.db'}"
    code, out = _cli(
        "run", "double", "--input", '{"n": 1}', "--db", other, "--flows", "pg_loom_flows:flows"
    )
    assert code == 0 and "warning:" in out and "127.0.0.1" in out and "hunter2" not in out, out


def test_flows_naming_an_encrypted_loom_lend_its_key_with_its_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second regression review: the named Loom's database was taken without its key, so
    with no ``LOOM_MASTER_KEY`` a run into a log that had no key table yet was written in
    clear (beyond erasure's reach). The key comes with the database."""
    app = tmp_path / "app.db"
    (tmp_path / "sealed_loom_flows.py").write_text(
        FLOWS.replace("FlowRegistry", "Loom")
        .replace("Loom()", f"Loom('sqlite:///{app}', encryption=MasterKey(bytes(range(32))))")
        .replace("import Loom", "import Loom, MasterKey")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOOM_DB_URL", raising=False)
    monkeypatch.delenv("LOOM_MASTER_KEY", raising=False)
    code, out = _cli(
        "run", "double", "--input", '{"n": 987654}', "--flows", "sealed_loom_flows:flows"
    )
    assert code == 0 and "1975308" in out, out
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("app.db*"))
    assert b"987654" not in stored and b"1975308" not in stored
    # Another key in the environment (a third review): the Loom's own opens its log, where
    # the environment's was refused, or made a keyless log's key table under itself.
    monkeypatch.setenv("LOOM_MASTER_KEY", "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleS0=")
    code, out = _cli("run", "double", "--input", '{"n": 2}', "--flows", "sealed_loom_flows:flows")
    assert code == 0 and "4" in out, out


def test_two_server_urls_that_differ_in_their_query_name_two_logs() -> None:
    """``?host=``, ``?dbname=`` and ``?options=`` name another server, database or schema;
    a password in the query does not make another log, and is never shown."""
    from sqlalchemy.engine import make_url

    from loom_runtime.tools.cli import _same_database, _shown

    one = make_url("postgresql+psycopg://app@/loom?host=/run/a")
    assert not _same_database(one, make_url("postgresql+psycopg://app@/loom?host=/run/b"))
    assert not _same_database(one, make_url("postgresql+psycopg://app@/loom?host=/run/a&dbname=x"))
    assert _same_database(one, make_url("postgresql+psycopg://app:pw@/loom?host=/run/a&password=s"))
    assert "s3cret" not in _shown(
        make_url("postgresql://app@h/loom?password=s3cret&sslmode=require")
    )
