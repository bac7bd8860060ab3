"""A counterfactual of an execution that retrieved a document erased since withholds that
document's text, as the audit does (ADR 0055, amended "counterfactual").

The erased document is gone from today's corpus, so the replayed model request differs from
the recorded one, and the diff's removed lines were the recorded passage: ``loom audit``
blanked it while ``loom knowledge counterfactual`` printed it, in its text and in ``--json``
(``request_diffs`` and ``divergences``). A document that was not erased is the control: its
recorded text still shows.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

import loom_runtime.diff
from loom_knowledge import Doc
from loom_knowledge.corpus.counterfactual import counterfactual, render_counterfactual
from loom_runtime import MasterKey

ERASED = ("Zyxwvu", "Qwertyplace", "555-0199")
"""Planted in the erased document: its title, the start of its text, past a cut line's end."""
KEPT = "Nightlyrotation"
"""In the kept document's first revision, which the recording carried and today's lacks."""

FLOWS = """
import os

from loom_knowledge import ExtractiveModel, open_knowledge_base
from loom_knowledge.models.answering import answer_from_corpus
from loom_runtime import Loom, MasterKey

loom = Loom(os.environ["LOOM_DB_URL"], encryption=MasterKey.from_env())
kb = open_knowledge_base(loom, "handbook")


@loom.flow("ask")
def ask(ctx, question: str) -> list[str]:
    grounded = answer_from_corpus(kb, question, decide=ctx.decide, model=ExtractiveModel())
    return list(grounded.answer.cited_doc_ids)
"""


@pytest.fixture
def recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[tuple[Any, str, int]]:
    """The flows module (its ``loom``), an execution that retrieved both documents, and the
    position of the erasure of one of them; the other was revised since."""
    name = f"erased_flows_{request.node.name.replace('[', '_').replace(']', '_')}"
    (tmp_path / f"{name}.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LOOM_DB_URL", f"sqlite:///{tmp_path / 'loom.db'}")
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    monkeypatch.delenv("LOOM_FLOWS", raising=False)
    module = __import__(name)
    try:
        padding = " and more about her pager rota" * 8  # the line is cut past 240 characters
        module.kb.sync(
            [
                Doc(
                    id="people/carol",
                    title="Carol Zyxwvu",
                    text=f"Carol lives on Qwertyplace Road; page her backup{padding}: 555-0199.",
                ),
                Doc(id="ops/backups", title="Backups", text=f"Page the backup {KEPT} on-call."),
            ]
        )
        run = module.loom.run("ask", question="who do I page for backup")
        report = module.loom.erase(document="handbook:people/carol", reason="r", by="dpo")
        assert report.position is not None
        module.kb.put_doc(Doc(id="ops/backups", title="Backups", text="Page the backup desk."))
        yield module, str(run.execution_id), report.position
    finally:
        module.loom.close()
        sys.modules.pop(name, None)


def _shown(text: str) -> list[str]:
    return [word for word in ERASED if word in text]


def test_the_report_withholds_the_erased_document_and_shows_the_kept_one(
    recorded: tuple[Any, str, int],
) -> None:
    module, execution_id, position = recorded
    report = counterfactual(module.loom, execution_id)
    assert not report.unchanged
    [diff] = report.request_diffs
    text = render_counterfactual(report)
    encoded = msgspec.json.encode(report).decode()
    for shown in (diff, text, encoded, *report.divergences):
        assert _shown(shown) == [], shown
    assert f'"content": "[erased (position {position})]"' in diff
    assert any(f"[erased (position {position})]" in d for d in report.divergences)
    # The control: the kept document's recorded revision still shows, and so does today's.
    assert KEPT in diff and "Page the backup desk." in diff
    assert any(KEPT in d for d in report.divergences)
    assert '"doc_id": "people/carol"' in diff  # its provenance stays, as in the audit


def test_the_cli_withholds_it_in_text_and_json(recorded: tuple[Any, str, int]) -> None:
    from loom_runtime.tools.cli import app

    module, execution_id, position = recorded
    flows = ["--flows", f"{module.__name__}:loom"]
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(
            app, ["knowledge", "counterfactual", execution_id, *flows, *extra]
        )
        assert result.exit_code == 1, result.output
        assert _shown(result.output) == [], result.output
        assert KEPT in result.output
        assert f"[erased (position {position})]" in result.output
    reported = json.loads(result.stdout)
    assert all(_shown(d) == [] for d in reported["request_diffs"] + reported["divergences"])


def test_a_diff_too_large_to_show_gives_no_excerpt_of_the_recorded_request(
    recorded: tuple[Any, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the diff's bounds the two requests are summarised, each by an excerpt around their
    first difference: the recorded one's is withheld when it holds an erased document."""
    module, execution_id, position = recorded
    monkeypatch.setattr(loom_runtime.diff, "MAX_DIFFED_CHARS", 100)
    monkeypatch.setattr(loom_runtime.diff, "_EXCERPT", 2000)  # wide enough to reach the text
    [diff] = counterfactual(module.loom, execution_id).request_diffs
    assert "too large to diff" in diff
    assert _shown(diff) == [], diff
    assert f"erased at position {position}" in diff
    assert "replayed input of 'model'" in diff and "Page the backup desk." in diff
