"""An imported execution's recorded position is the exporting log's (ADR 0013, amended
"imported").

``kb.seen_by(id)`` turned that position into "the corpus as the execution saw it" in the
importing log, whose corpus there is another one: an auditor was shown the importing log's
``disk.md`` ("delete the database files") as what the agent saw ("rotate the logs"), and the
audit called the imported passages ``current`` (or ``erased``) by the importing log's
unrelated documents of the same id (review of 6 December). The import now records that it
was one, in the same transaction; ``seen_by`` refuses it, naming why, and the audit says the
position is another log's and the passages' fates unknown here. A native execution of the
importing log still answers (the control).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loom_knowledge import Doc, ExtractiveModel, ImportedExecutionError, open_knowledge_base
from loom_knowledge.models.answering import answer_from_corpus
from loom_knowledge.tools.audit import audit
from loom_knowledge.tools.audit_render import render_text
from loom_runtime import FlowContext, Loom


def _log(path: Path, text: str) -> Loom:
    loom = Loom(f"sqlite:///{path}")
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="disk.md", text=text))

    @loom.flow("answer")
    def answer(ctx: FlowContext, question: str) -> list[str]:
        grounded = answer_from_corpus(kb, question, decide=ctx.decide, model=ExtractiveModel())
        return list(grounded.answer.cited_doc_ids)

    return loom


def test_an_imported_execution_is_never_shown_another_logs_corpus(tmp_path: Path) -> None:
    exporting = _log(tmp_path / "a.db", "When the disk is full, rotate the logs.")
    importing = _log(tmp_path / "b.db", "When the disk is full, delete the database files.")
    with exporting, importing:
        run = exporting.run("answer", question="the disk is full")
        bundle = exporting.export(run.execution_id, tmp_path / "run.json")
        imported = importing.import_bundle(bundle)
        native = importing.run("answer", question="the disk is full").execution_id
        assert importing.imported(imported) is not None and importing.imported(native) is None
        kb = open_knowledge_base(importing, "ops")
        with pytest.raises(ImportedExecutionError, match="imported from another log"):
            kb.seen_by(imported)
        assert "delete the database files" in kb.seen_by(native).passages()[0].text  # control
        report = audit(importing, imported)
        text = render_text(report)
    assert report.imported
    [retrieval] = report.retrievals
    [passage] = retrieval.passages
    assert (passage.status, passage.text) == ("unknown", "When the disk is full, rotate the logs.")
    assert "imported from another log" in text and "delete the database" not in text


def test_an_imported_passage_is_not_blanked_by_this_logs_erasure(tmp_path: Path) -> None:
    """Erasing the importing log's own document of the same id erases nothing the imported
    execution saw: its passage and its model call keep their text."""
    from loom_runtime import MasterKey

    key = MasterKey(bytes(range(32)))
    exporting = _log(tmp_path / "a.db", "When the disk is full, rotate the logs.")
    with exporting:
        run = exporting.run("answer", question="the disk is full")
        bundle = exporting.export(run.execution_id, tmp_path / "run.json")
    with Loom(f"sqlite:///{tmp_path / 'b.db'}", encryption=key) as importing:
        kb = open_knowledge_base(importing, "ops")
        kb.put_doc(Doc(id="disk.md", text="Ask Jane Doe before touching the disk."))
        imported = importing.import_bundle(bundle)
        importing.erase(document="ops:disk.md", by="dpo", reason="request")
        report = audit(importing, imported)
    [passage] = report.retrievals[0].passages
    assert passage.status == "unknown" and "rotate the logs" in passage.text
    [call] = report.model_calls
    assert not call.erased and "rotate the logs" in call.raw_input


def test_executions_show_says_the_position_is_the_exporting_logs(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    exporting = _log(tmp_path / "a.db", "When the disk is full, rotate the logs.")
    with exporting, Loom(f"sqlite:///{tmp_path / 'b.db'}") as importing:
        run = exporting.run("answer", question="the disk is full")
        imported = importing.import_bundle(exporting.export(run.execution_id, tmp_path / "r.json"))
    shown = CliRunner().invoke(
        app, ["executions", "show", str(imported), "--db", f"sqlite:///{tmp_path / 'b.db'}"]
    )
    assert shown.exit_code == 0, shown.output
    assert "of the log it was exported from" in shown.stdout


def _picking_log(path: Path, text: str, key: Any = None) -> Loom:
    """A log whose flow makes a decision of its own before it retrieves, so a fork at 1
    inherits only that and retrieves live."""
    loom = Loom(f"sqlite:///{path}", encryption=key)
    kb = open_knowledge_base(loom, "ops")
    if text:
        kb.put_doc(Doc(id="disk.md", text=text))

    @loom.flow("answer")
    def answer(ctx: FlowContext, question: str) -> list[str]:
        ctx.decide("pick", lambda: question)
        grounded = answer_from_corpus(kb, question, decide=ctx.decide, model=ExtractiveModel())
        return list(grounded.answer.cited_doc_ids)

    return loom


def test_a_fork_made_here_is_audited_by_this_logs_corpus_for_what_it_retrieved(
    tmp_path: Path,
) -> None:
    """The review of the import record: a fork made here of an imported execution was
    audited as imported whole, so this log's erasure of a document the fork itself retrieved
    live no longer blanked it. Only what a fork inherited from an imported origin is another
    log's."""
    from loom_runtime import MasterKey

    with _picking_log(tmp_path / "a.db", "When the disk is full, rotate the logs.") as a:
        run = a.run("answer", question="the disk is full")
        bundle = a.export(run.execution_id, tmp_path / "run.json")
    secret = "Ask Jane Doe before touching the disk."
    key = MasterKey(bytes(range(32)))
    with _picking_log(tmp_path / "b.db", secret, key) as b:
        fork = b.fork(b.import_bundle(bundle), at=1)  # inherits "pick"; retrieves here, live
        b.erase(document="ops:disk.md", by="dpo", reason="request")
        report = audit(b, fork.execution_id)
        text = render_text(report)
    [passage] = report.retrievals[0].passages
    assert (passage.status, passage.text) == ("erased", "")
    assert "Jane Doe" not in report.model_calls[0].raw_input  # the request's passage blanked
    assert not report.imported and "imported from another log" not in text


def test_a_fork_of_a_fork_of_an_imported_execution_inherits_its_unknown(tmp_path: Path) -> None:
    """The review of the import record: only the direct parent was asked, so a fork of a
    fork judged the imported passages by this log's documents."""
    with _picking_log(tmp_path / "a.db", "When the disk is full, rotate the logs.") as a:
        run = a.run("answer", question="the disk is full")
        bundle = a.export(run.execution_id, tmp_path / "run.json")
    with _picking_log(tmp_path / "b.db", "When the disk is full, delete the database files.") as b:
        first = b.fork(b.import_bundle(bundle), at=3).execution_id
        second = b.fork(first, at=3).execution_id
        report = audit(b, second)
        text = render_text(report)
    assert "inherited retrievals: made in another log" in text
    [passage] = report.retrievals[0].passages
    assert report.retrievals[0].origin == "inherited"
    assert (passage.status, passage.text) == ("unknown", "When the disk is full, rotate the logs.")
