"""A link loop in a synced folder is a link that points nowhere: skipped and listed.

``Path.resolve`` raises ``RuntimeError`` on a loop (before Python 3.13), which ended
`loom knowledge sync` in a traceback: two links pointing at each other, or a directory link
looping through another, stopped every sync of the folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge import scan_docs
from loom_runtime.tools.cli import app


@pytest.fixture
def looped(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "ok.md").write_text("Still synced.")
    (docs / "a.md").symlink_to("b.md")
    (docs / "b.md").symlink_to("a.md")
    (docs / "sub" / "x").symlink_to("../sub2")
    (docs / "sub2").symlink_to("sub/x")
    return docs


def test_a_link_loop_is_skipped_and_listed(looped: Path) -> None:
    """The rest of the folder is read; each looping link is listed as skipped."""
    scan = scan_docs(looped)
    assert [doc.id for doc in scan.docs] == ["ok.md"]
    assert scan.skipped == ["a.md", "b.md", "sub/x", "sub2"]


def test_the_cli_syncs_past_a_link_loop(looped: Path, tmp_path: Path) -> None:
    """`loom knowledge sync` warns about the loops and syncs the rest (exit 0)."""
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    result = CliRunner().invoke(
        app, ["knowledge", "sync", str(looped), "--scope", "ops", "--db", db, "--apply"]
    )
    assert result.exit_code == 0, result.output
    assert "skipped link a.md" in result.output
    assert "1 written" in result.output
