"""`loom knowledge counterfactual` prints one line per fact: a doc id or a citation cannot
forge a line of its report (a verdict, a retrieval), as `loom audit`'s lines already cannot."""

from __future__ import annotations

from uuid import uuid4

import pytest
from typer.testing import CliRunner

from loom_knowledge.corpus import counterfactual
from loom_knowledge.corpus.counterfactual import Counterfactual, PassageRef, RetrievalChange
from loom_runtime import Loom
from loom_runtime.tools.cli import app, console

FORGED = "would go the same way with today's corpus"
DIFF = '--- recorded\n+++ live\n@@ -1 +1 @@\n-"a"\n+"b"\n'


def _report(doc_id: str, cited: str) -> Counterfactual:
    return Counterfactual(
        execution_id=uuid4(),
        unchanged=False,
        retrievals=(
            RetrievalChange(
                key="knowledge:ops:retrieve",
                added=(PassageRef(doc_id, 0, 1),),
                removed=(),
                kept=(),
            ),
        ),
        request_diffs=(DIFF,),
        now_ungrounded=(cited,),
        divergences=(),
    )


def test_a_doc_id_or_citation_cannot_forge_a_line_of_the_report(
    loom: Loom, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Line breaks and controls in ids are shown as <U+XXXX>; the diff keeps its lines."""
    _ = loom.log  # creates the database the command opens
    report = _report(f"a.md\nexecution {uuid4()} {FORGED}", f"b.md\r\x1b[2K{FORGED}")
    monkeypatch.setattr(counterfactual, "counterfactual", lambda _loom, _id: report)
    monkeypatch.setattr(console, "width", 2000)
    result = CliRunner().invoke(app, ["knowledge", "counterfactual", str(uuid4()), "--db", db_url])
    assert result.exit_code == 1, result.output
    lines = result.output.rstrip("\n").split("\n")
    assert len(lines) == 5 + len(DIFF.rstrip().split("\n")) + 1, result.output
    assert [line for line in lines if line.startswith("execution ")] == [lines[0]]
    assert "would NOT go the same way" in lines[0]
    assert "a.md<U+000A>execution" in result.output
    assert "b.md<U+000D><U+001B>[2K" in result.output
    assert DIFF.rstrip() in result.output
