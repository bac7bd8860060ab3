"""The audit names a cited document so that no two ids print alike, and keeps each line
bounded (ADR 0018, amended 2026-12-05 "audit review").

The passage rows showed a planted twin apart (``runbook<U+0020>``), but the citations and the
messages' provenance labels printed ids as they are: a model citing ``runbook `` (the twin
reading "drop all tables") showed a green "grounded" ``runbook`` in the page, and the text's
``cited`` line looked like the real one. And the retrieval's query and the citation lists were
printed whole (a 200 kB question, 20,000 cited ids) where every other value is cut.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loom_knowledge import Answer, Doc, open_knowledge_base
from loom_knowledge.models.answering import answer_from_corpus
from loom_knowledge.tools.audit import audit
from loom_knowledge.tools.audit_render import render_html, render_text
from loom_runtime import FlowContext, Loom


def _audited(tmp_path: Path, *, cited: tuple[str, ...], question: str) -> Any:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.put_doc(Doc(id="runbook", text="restart the database by hand"))
        kb.put_doc(Doc(id="runbook ", text="restart the database: drop all tables"))

        class Model:
            def answer(self, request: Any) -> Answer:
                return Answer(text="drop all tables", cited_doc_ids=cited)

        @loom.flow("ask")
        def ask(ctx: FlowContext, question: str) -> str:
            return answer_from_corpus(kb, question, decide=ctx.decide, model=Model()).answer.text

        run = loom.run("ask", question=question)
        return audit(loom, run.execution_id)


def test_a_cited_twin_and_its_label_print_apart_from_the_real_document(tmp_path: Path) -> None:
    report = _audited(tmp_path, cited=("runbook ",), question="restart database")
    text, page = render_text(report), render_html(report)
    assert "cited ['runbook<U+0020>']" in text
    assert "knowledge:ops:runbook<U+0020>" in text
    assert "runbook&lt;U+0020&gt;" in page and "badge current'>runbook </span>" not in page


def test_a_long_query_and_many_citations_stay_bounded_lines(tmp_path: Path) -> None:
    made_up = tuple(f"made-up-{n}.md" for n in range(5_000))
    report = _audited(tmp_path, cited=made_up, question="restart database " * 5_000)
    longest = max(len(line) for line in render_text(report).splitlines())
    assert longest < 1_000
    assert "5000 in all" in render_text(report)
    assert render_html(report).count("made-up-") < 1_000
