"""The loom CLI, driven through Typer's runner (Click's CliRunner)."""

from __future__ import annotations

from typer.testing import CliRunner

from loom_runtime.cli import app


def test_demo_records_then_replays_identically(db_url: str) -> None:
    """`loom demo` exits 0 and says the replay was identical with dependencies unreachable."""
    result = CliRunner().invoke(app, ["demo", "--db", db_url])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # Rich wraps long lines
    assert "unreachable" in text
    assert "replayed identically" in text


def test_bad_database_url_is_a_usage_error() -> None:
    """Exit code 2 and a message saying what a good URL looks like."""
    result = CliRunner().invoke(app, ["demo", "--db", "mysql://nowhere/x"])
    assert result.exit_code == 2
    assert "SQLite or PostgreSQL" in " ".join(result.output.split())
