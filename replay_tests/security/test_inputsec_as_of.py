"""`loom knowledge as-of WHEN` refuses a WHEN it cannot read in one line, never a traceback.

A WHEN of digits was handed to ``int()``, which refuses digits that are not decimal ("²" is a
digit to ``str.isdigit``) and numbers of more than 4,300 digits: both ended in a ValueError
traceback instead of the usage error every other bad WHEN gets.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom
from loom_runtime.tools.cli import app


@pytest.mark.parametrize(
    "when", ["\u00b2", "\u0663\u00b2", "9" * 5000], ids=["superscript", "mixed", "huge"]
)
def test_an_unreadable_position_is_a_usage_error(loom: Loom, db_url: str, when: str) -> None:
    """Exit 2 with one `error:` line naming WHEN, as for any other bad WHEN."""
    open_knowledge_base(loom, "ops").put_doc(Doc(id="a.md", text="disk full"))
    result = CliRunner().invoke(app, ["knowledge", "as-of", when, "--scope", "ops", "--db", db_url])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: WHEN"), result.output
    assert result.output.count("\n") == 1, result.output


def test_a_decimal_position_in_another_script_still_reads(loom: Loom, db_url: str) -> None:
    """Arabic-Indic zero (U+0660) is a decimal digit int() reads: position 0, as before."""
    open_knowledge_base(loom, "ops").put_doc(Doc(id="a.md", text="disk full"))
    result = CliRunner().invoke(
        app, ["knowledge", "as-of", "\u0660", "--scope", "ops", "--db", db_url]
    )
    assert result.exit_code == 0, result.output
    assert "as of log position 0" in result.output
