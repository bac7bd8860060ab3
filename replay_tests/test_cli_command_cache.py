"""The suite's ``CliRunner().invoke`` builds each Typer app's Click command once
(``replay_tests/conftest.py``), and that shortcut changes no answer: a command registered
after a first invoke is found, and one invoke's options and output never reach the next."""

from __future__ import annotations

from pathlib import Path

import typer
import typer.testing
from typer.testing import CliRunner

from loom_runtime.tools.cli import app


def test_the_loom_command_is_built_once_for_every_invoke() -> None:
    first = typer.testing._get_command(app)  # type: ignore[attr-defined]
    assert typer.testing._get_command(app) is first  # type: ignore[attr-defined]


def test_a_command_registered_after_an_invoke_is_found() -> None:
    toy = typer.Typer()

    @toy.command()
    def hello() -> None:
        typer.echo("hello")

    @toy.command()
    def spare() -> None:
        typer.echo("spare")

    assert CliRunner().invoke(toy, ["hello"]).stdout == "hello\n"
    assert CliRunner().invoke(toy, ["later"]).exit_code == 2

    @toy.command()
    def later() -> None:
        typer.echo("later")

    result = CliRunner().invoke(toy, ["later"])
    assert (result.exit_code, result.stdout) == (0, "later\n")


def test_one_invoke_leaves_nothing_for_the_next(tmp_path: Path) -> None:
    """Options, output and exit codes are each invoke's own on the shared command."""
    missing = f"sqlite:///{tmp_path}/nothing-here.db"
    failed = CliRunner().invoke(app, ["executions", "list", "--db", missing])
    assert failed.exit_code == 2
    assert "no loom database" in failed.stderr
    ok = CliRunner().invoke(app, ["--version"])
    assert ok.exit_code == 0
    assert "no loom database" not in ok.stdout + ok.stderr
    again = CliRunner().invoke(app, ["executions", "list", "--db", missing])
    assert (again.exit_code, again.stderr) == (failed.exit_code, failed.stderr)
