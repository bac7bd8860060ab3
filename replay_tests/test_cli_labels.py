"""ADR 0034 on the command line: `loom executions list` selects by --tenant/--user/--session
and repeatable --tag (every one must match), pages within the selection, and `--json`,
`executions show` and the audit carry the labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from loom_knowledge.tools.audit import audit
from loom_knowledge.tools.audit_render import render_html, render_text
from loom_runtime import Labels, Loom
from loom_runtime.tools.cli import ExitCode, app

ACME = Labels(tenant="acme", user="u-1", session="s-1", tags=("eval", "nightly"))


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


class Log:
    """A SQLite log of five executions: acme (all labels), plain, acme (tag eval only), beta,
    acme (tag nightly only), in that order."""

    def __init__(self, tmp_path: Path) -> None:
        self.db = f"sqlite:///{tmp_path / 'loom.db'}"
        with Loom(self.db) as loom:

            @loom.flow("echo")
            def echo(ctx: Any, text: str) -> str:
                return str(ctx.decide("echo", lambda: text))

            labels = [
                ACME,
                None,
                Labels(tenant="acme", tags=("eval",)),
                Labels(tenant="beta", user="u-2", tags=("eval",)),
                Labels(tenant="acme", tags=("nightly",)),
            ]
            self.ids = [
                str(
                    loom.run("echo", text="hi", labels=given).execution_id
                    if given
                    else loom.run("echo", text="hi").execution_id
                )
                for given in labels
            ]

    def listed(self, *options: str) -> list[str]:
        result = _invoke("executions", "list", "--json", "--db", self.db, *options)
        assert result.exit_code == ExitCode.OK, result.output
        return [row["execution_id"] for row in json.loads(result.stdout)]


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path)


def test_each_option_excludes_the_executions_without_its_label(log: Log) -> None:
    """--tenant, --user, --session, --tag select; repeated --tag needs every tag."""
    ids = log.ids
    assert log.listed() == ids
    assert log.listed("--tenant", "acme") == [ids[0], ids[2], ids[4]]
    assert log.listed("--tenant", "nobody") == []
    assert log.listed("--user", "u-2") == [ids[3]]
    assert log.listed("--session", "s-1") == [ids[0]]
    assert log.listed("--tag", "eval") == [ids[0], ids[2], ids[3]]
    assert log.listed("--tag", "eval", "--tag", "nightly") == [ids[0]]
    assert log.listed("--tenant", "acme", "--tag", "nightly") == [ids[0], ids[4]]


@pytest.mark.parametrize(
    ("option", "value", "known"),
    [
        ("--tenant", "acm", "tenant 'acm' (known: 'acme', 'beta')"),
        ("--user", "u-3", "user 'u-3' (known: 'u-1', 'u-2')"),
        ("--session", "s-2", "session 's-2' (known: 's-1')"),
        ("--tag", "evl", "tag 'evl' (known: 'eval', 'nightly')"),
        ("--flow", "ech", "flow 'ech' (known: 'echo')"),
    ],
)
def test_a_filter_no_execution_matches_at_all_is_named_with_the_known_values(
    log: Log, option: str, value: str, known: str
) -> None:
    """A misspelt filter printed an empty table and exited 0, with no hint, where `loom
    retain --tenant` warns and `knowledge list --scope` refuses (a newcomer's walk). The
    list still exits 0 (an empty selection is an answer), and says on stderr which values
    exist (ADR 0008, amended "unknown filters")."""
    result = _invoke("executions", "list", "--db", log.db, option, value)
    assert result.exit_code == ExitCode.OK
    assert f"warning: no execution has {known}; check the name" in " ".join(result.stderr.split())


def test_filters_that_each_match_but_not_together_warn_of_nothing(log: Log) -> None:
    """The control: beta's executions have no user u-1, but both values exist."""
    result = _invoke("executions", "list", "--db", log.db, "--tenant", "beta", "--user", "u-1")
    assert result.exit_code == ExitCode.OK and result.stderr == ""


def test_json_carries_the_labels_and_an_unlabelled_execution_has_none(log: Log) -> None:
    result = _invoke("executions", "list", "--json", "--db", log.db)
    rows = {row["execution_id"]: row for row in json.loads(result.stdout)}
    labelled, plain = rows[log.ids[0]], rows[log.ids[1]]
    assert {k: labelled[k] for k in ("tenant", "user", "session", "tags")} == {
        "tenant": "acme",
        "user": "u-1",
        "session": "s-1",
        "tags": ["eval", "nightly"],
    }
    assert {k: plain[k] for k in ("tenant", "user", "session", "tags")} == {
        "tenant": None,
        "user": None,
        "session": None,
        "tags": [],
    }


def test_paging_walks_the_selection_not_the_log(log: Log) -> None:
    """--limit/--after page through the executions the filter selects, skipping others."""
    ids = log.ids
    first = _invoke("executions", "list", "--json", "--db", log.db, "--tenant", "acme",
                    "--limit", "2")  # fmt: skip
    assert [row["execution_id"] for row in json.loads(first.stdout)] == [ids[0], ids[2]]
    assert first.stderr == f"warning: more: --after {ids[2]} for the next page\n"
    assert log.listed("--tenant", "acme", "--limit", "2", "--after", ids[2]) == [ids[4]]
    outside = _invoke("executions", "list", "--db", log.db, "--tenant", "acme",
                      "--after", ids[3])  # fmt: skip
    assert outside.exit_code == ExitCode.USAGE
    assert "--tenant" in outside.stderr


@pytest.mark.parametrize("option", ["--tenant", "--user", "--session", "--tag"])
def test_a_label_that_could_never_be_stored_is_a_usage_error(log: Log, option: str) -> None:
    result = _invoke("executions", "list", "--db", log.db, option, " acme")
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.startswith("error: ") and "surrounding spaces" in result.stderr


def test_the_table_shows_what_each_execution_ran_for_only_when_any_has_labels(log: Log) -> None:
    table = _invoke("executions", "list", "--db", log.db, "--tag", "eval", "--tag", "nightly")
    words = table.stdout.split()  # a narrow pipe folds the column, never a word
    assert "for" in words and words[words.index("for") - 1] == "ran"
    for word in ("tenant", "acme;", "user", "u-1;", "session", "s-1;", "tags", "eval,", "nightly"):
        assert word in words
    plain_only = _invoke("executions", "list", "--db", log.db, "--tenant", "nobody")
    assert "ran for" not in plain_only.stdout


def test_show_and_its_json_carry_the_labels(log: Log) -> None:
    shown = _invoke("executions", "show", log.ids[0], "--db", log.db)
    assert shown.exit_code == ExitCode.OK
    assert "ran for tenant acme; user u-1; session s-1; tags eval, nightly" in shown.stdout
    assert "ran for" not in _invoke("executions", "show", log.ids[1], "--db", log.db).stdout
    data = json.loads(_invoke("executions", "show", log.ids[0], "--json", "--db", log.db).stdout)
    assert (data["tenant"], data["user"], data["session"], data["tags"]) == (
        "acme", "u-1", "s-1", ["eval", "nightly"])  # fmt: skip


def test_the_audit_says_what_the_execution_ran_for(log: Log) -> None:
    with Loom(log.db) as loom:
        report = audit(loom, log.ids[0])
        plain = audit(loom, log.ids[1])
    assert report.labels == ACME
    line = "ran for tenant acme; user u-1; session s-1; tags eval, nightly"
    assert line in render_text(report).splitlines()
    assert line in render_html(report)
    assert "ran for" not in render_text(plain)


FLOWS = """
from loom_runtime import FlowRegistry

flows = FlowRegistry()


@flows.flow("echo")
def echo(ctx, text):
    return ctx.decide("echo", lambda: text)
"""


def test_run_records_the_labels_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loom run --tenant/--user/--session/--tag` labels the execution at its start, so the
    command line can start what `executions list --tenant` later selects."""
    (tmp_path / "label_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    common = ("--db", db, "--flows", "label_flows:flows", "--input", '{"text": "hi"}')
    labelled = _invoke("run", "echo", *common, "--tenant", "acme", "--user", "u-1",
                       "--session", "s-1", "--tag", "eval", "--tag", "nightly")  # fmt: skip
    assert labelled.exit_code == ExitCode.OK, labelled.output
    plain = _invoke("run", "echo", *common)
    assert plain.exit_code == ExitCode.OK, plain.output
    listed = _invoke("executions", "list", "--json", "--db", db, "--tenant", "acme")
    [row] = json.loads(listed.stdout)
    assert row["execution_id"] == labelled.stdout.split()[1]
    assert (row["tenant"], row["user"], row["session"], row["tags"]) == (
        "acme", "u-1", "s-1", ["eval", "nightly"])  # fmt: skip


def test_run_refuses_a_label_that_could_never_be_stored_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "label_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    result = _invoke("run", "echo", "--db", db, "--flows", "label_flows:flows",
                     "--input", '{"text": "hi"}', "--tenant", " acme")  # fmt: skip
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.startswith("error: ") and "surrounding spaces" in result.stderr
    with Loom(db) as loom:
        assert loom.executions() == []
