"""Two different document ids never print alike (docs/cli.md, "Output is inert").

A document id is anyone's text. ``visible`` already shows control and format characters as
``<U+XXXX>``, yet ``a`` and ``a `` (a trailing space), ``x y`` and ``x<NBSP>y``, and the
composed and decomposed spellings of ``café`` printed the same: a planted twin of a runbook
listed, searched and audited as the real one. Ids are now shown by ``identifier``: a space at
either end, any space that is not U+0020, and the combining marks of an id that is not in
NFC are escaped too. Ids in NFC with ordinary spaces (every script's) print unchanged.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.tools.audit_render import render_html, render_text
from loom_runtime import FlowContext, Loom
from loom_runtime.tools.cli import app
from loom_runtime.tools.display import identifier

CAFE_NFC = unicodedata.normalize("NFC", "café")
CAFE_NFD = unicodedata.normalize("NFD", "café")
TWINS = [
    ("a", "a "),
    ("a", " a"),
    ("x y", "x\u00a0y"),
    ("x y", "x\u2003y"),
    ("x y", "x\u3000y"),
    (CAFE_NFC, CAFE_NFD),
]


@pytest.mark.parametrize(("one", "other"), TWINS)
def test_twins_print_differently(one: str, other: str) -> None:
    assert one != other
    assert identifier(one) != identifier(other)
    assert identifier(identifier(other)) == identifier(other)  # idempotent


@pytest.mark.parametrize(
    "plain", ["runbooks/db-failover.md", "a b", CAFE_NFC, "नमस्ते दुनिया", "東京 駅", "Ünïcödé"]
)
def test_an_ordinary_id_prints_unchanged(plain: str) -> None:
    assert identifier(plain) == plain


def _scope(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "ops")
        for one, other in TWINS:
            for doc_id in (one, other):
                kb.put_doc(Doc(id=doc_id, text=f"restart the database {doc_id!r}"))
    return url


def test_knowledge_list_shows_every_twin_apart(tmp_path: Path) -> None:
    url = _scope(tmp_path)
    listed = CliRunner().invoke(app, ["knowledge", "list", "--scope", "ops", "--db", url])
    assert listed.exit_code == 0, listed.output
    rows = [line for line in listed.stdout.splitlines() if line.startswith("│")]
    cells = [row.split("│")[1].strip() for row in rows]  # the header's bars are heavy: ┃
    ids = {doc_id for pair in TWINS for doc_id in pair}
    assert len(cells) == len(ids)
    assert len(set(cells)) == len(cells), cells


def test_an_audit_shows_a_twin_apart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.put_doc(Doc(id="runbook ", text="restart the database by hand"))

        @loom.flow("ask")
        def ask(ctx: FlowContext, question: str) -> list[str]:
            return [p.doc_id for p in kb.retrieve(question, decide=ctx.decide)]

        run = loom.run("ask", question="restart database")
        from loom_knowledge.tools.audit import audit

        report = audit(loom, run.execution_id)
    assert "runbook<U+0020>#0" in render_text(report)
    assert "runbook&lt;U+0020&gt;#0" in render_html(report)
