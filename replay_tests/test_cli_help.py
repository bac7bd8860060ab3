"""Every ``--help`` reads like a conventional CLI's (ADR 0033): ``loom run [OPTIONS] FLOW``,
flags without a type, no ``{flow}``, ``<bool>`` or ``<list[str]>`` placeholders anywhere."""

from __future__ import annotations

import re
from typing import Any

import typer
from typer.testing import CliRunner

from loom_runtime.tools.cli import app

PLACEHOLDER = re.compile(r"<bool>|<list\[|\{[A-Za-z_][\w-]*\}")
"""Typer's own placeholders: a flag's ``<bool>`` type, a repeatable option's or a variadic
argument's Python type (``<list[str]>``, where a CLI shows ``<str>...``), a required argument
as ``{name}`` (``{}``, the default of ``run --input``, is a value, not a placeholder)."""


def _paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The app, every group and every command in it, by the words that name them."""
    found = [prefix]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += _paths(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


PATHS = _paths(typer.main.get_group(app))


def test_the_walk_finds_the_commands_and_the_placeholders_would_be_seen() -> None:
    assert {("run",), ("executions", "list"), ("knowledge", "sync"), ("bundle",)} <= set(PATHS)
    assert PLACEHOLDER.search("Usage: loom run [OPTIONS] {flow}")
    assert PLACEHOLDER.search("--apply  <bool>  Write")
    assert PLACEHOLDER.search("--tag  <list[str]>  A free tag")
    assert not PLACEHOLDER.search("[default: {}]")


def test_no_help_shows_a_placeholder() -> None:
    for path in PATHS:
        result = CliRunner().invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        found = PLACEHOLDER.findall(result.stdout)
        assert not found, (path, found, result.stdout)


def test_arguments_are_named_in_capitals_and_optional_ones_in_brackets() -> None:
    usage = {
        path: next(
            line
            for line in CliRunner().invoke(app, [*path, "--help"]).stdout.splitlines()
            if "Usage:" in line
        )
        .split("Usage:")[1]
        .strip()
        for path in [("run",), ("diff",), ("knowledge", "as-of")]
    }
    assert usage == {
        ("run",): "loom run [OPTIONS] FLOW",
        ("diff",): "loom diff [OPTIONS] A B",
        ("knowledge", "as-of"): "loom knowledge as-of [OPTIONS] WHEN",
    }


def test_a_help_paragraph_is_wrapped_to_the_terminal_not_where_the_source_broke_it(
    monkeypatch: Any,
) -> None:
    """Typer joins the lines of a command's first paragraph only, so the others printed the
    docstring's line breaks, ragged at any other width ("... --follow-external-links: what",
    "is synced", "stays in ..."). Each paragraph is one line on a terminal wide enough."""
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("TERMINAL_WIDTH", "300")
    out = CliRunner().invoke(app, ["knowledge", "sync", "--help"]).stdout
    sentence = "--follow-external-links: what is synced stays in the append-only log for good"
    assert any(sentence in line for line in out.splitlines()), out


def test_no_option_name_is_cut_short_on_an_80_column_terminal(monkeypatch: Any) -> None:
    """``loom knowledge sync --help`` showed ``--follow-external-li…`` at 80 columns, an
    option nobody could then type (a wide type column, ``<int range> [x>=1]``, took the
    room), and ``--db`` an example URL cut as ``postgresql+psycopg://use…``."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    cut = re.compile(r"--[\w-]*…|\S{12,}…")
    for path in PATHS:
        out = CliRunner().invoke(app, [*path, "--help"]).stdout
        assert not cut.search(out), (path, out)


def _command(path: tuple[str, ...]) -> Any:
    command: Any = typer.main.get_group(app)
    for word in path:
        command = command.commands[word]
    return command


def test_every_option_of_every_command_says_what_it_does() -> None:
    """An option without help showed only its name in `--help` (`knowledge search --limit`)."""
    silent = [
        f"loom {' '.join(path)} {option.opts[0]}"
        for path in PATHS
        if path and not hasattr(_command(path), "commands")
        for option in _command(path).params
        if option.param_type_name == "option" and not option.help
    ]
    assert silent == []
    assert len([p for p in PATHS if p]) > 20  # the control: the walk reached the commands
