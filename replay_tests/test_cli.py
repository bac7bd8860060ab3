"""The loom CLI, driven through Typer's runner (Click's CliRunner)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from loom_runtime.cli import app


def _text(output: str) -> str:
    return " ".join(output.split())  # Rich wraps long lines


def test_demo_is_registered_through_the_entry_point() -> None:
    """loom_knowledge adds `demo` via the loom.cli entry point; the runtime never imports it."""
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "demo" in _text(result.output)


def test_demo_runs_the_headline_and_exits_0(db_url: str, tmp_path: Path) -> None:
    """`loom demo` replays identically in a fresh process and rebuilds an equal corpus."""
    result = CliRunner().invoke(app, ["demo", "--db", db_url])
    assert result.exit_code == 0, result.output
    text = _text(result.output)
    assert "IDENTICAL" in text and "EQUAL to the original passage for passage" in text


def test_bad_database_url_is_a_usage_error() -> None:
    """Exit code 2 and a message saying what a good URL looks like."""
    result = CliRunner().invoke(app, ["demo", "--db", "mysql://nowhere/x"])
    assert result.exit_code == 2
    assert "SQLite or PostgreSQL" in _text(result.output)
