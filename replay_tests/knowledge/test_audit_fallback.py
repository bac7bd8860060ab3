"""The audit of a model call whose request is of the flow's own making.

Such a request carries no provenance, so its citations are checked against the documents the
execution retrieved before the call: the only record of what it could have shown. A review of
grounding (6 December) found that fallback refused, skipped and overshot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loom_knowledge import Answer, Doc, ExtractiveModel, open_knowledge_base
from loom_knowledge.models.answering import answer_from_corpus
from loom_knowledge.tools.audit import audit
from loom_runtime import FlowContext, Loom
from loom_runtime.tools.cli import app

CITED = {"text": "rotate the logs", "cited_doc_ids": ["wiki.md", "made-up.md"]}
"""What the model answers: a document the flow retrieved, and one nobody retrieved."""


def _audit_cli(db_url: str, execution_id: str, *extra: str) -> Any:
    return CliRunner().invoke(app, ["audit", execution_id, "--db", db_url, *extra])


@pytest.mark.parametrize(
    "system",
    [
        {"role": "system", "content": "Context: Disk full: rotate the logs."},
        {"role": "system", "content": 'Prompts look like <passage doc_id="x">.'},
        {"role": "system", "content": "Context: Disk full.", "tool_call_id": "call-1"},
    ],
    ids=["control", "fence-in-system-text", "tool-result-as-system"],
)
def test_a_request_with_tainted_system_content_is_audited_not_refused(
    loom: Loom, db_url: str, tmp_path: Path, system: dict[str, str]
) -> None:
    """Decoding such a request as a GroundedRequest raised TaintedSystemContentError, which
    the audit let through: `loom audit` (text, --json, --html) printed the error and no
    report. It is no grounded request, so it takes the fallback; made-up.md is still flagged
    and the exit code still 1."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="wiki.md", text="Disk full: rotate the logs."))

    @loom.flow("own-prompt")
    def own_prompt(ctx: FlowContext, question: str) -> Any:
        kb.retrieve(question, decide=ctx.decide)
        request = {"messages": [system, {"role": "user", "content": question}]}
        return ctx.decide("model", lambda: CITED, input=request, kind="model")

    execution_id = str(loom.run("own-prompt", question="disk full").execution_id)
    [call] = audit(loom, execution_id).model_calls
    tainted = system["content"] != "Context: Disk full: rotate the logs."
    assert (call.request is None) == tainted  # then shown as recorded only (raw_input)
    assert json.dumps(system["content"]) in call.raw_input
    assert call.citations is not None
    assert "made-up.md" in call.citations.ungrounded

    text = _audit_cli(db_url, execution_id)
    assert text.exit_code == 1 and "'made-up.md']" in text.output, text.output
    as_json = _audit_cli(db_url, execution_id, "--json")
    assert as_json.exit_code == 1, as_json.output
    assert "made-up.md" in json.loads(as_json.output)["model_calls"][0]["citations"]["ungrounded"]
    page = tmp_path / "audit.html"
    assert _audit_cli(db_url, execution_id, "--html", str(page)).exit_code == 1
    assert "UNGROUNDED made-up.md" in page.read_text()


@pytest.mark.parametrize("shape", ["chat", "prompt"])
def test_a_chat_shaped_request_of_the_flows_making_takes_the_fallback(
    loom: Loom, db_url: str, shape: str
) -> None:
    """A ``{"messages": [{role, content}]}`` request decodes as a GroundedRequest with no
    provenance: it was checked against nothing, so citing the page the flow retrieved and
    pasted was UNGROUNDED (exit 1), where the same call with a ``{"prompt"}`` input (the
    control) was grounded. Holding no fenced passage, it takes the fallback too."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="wiki.md", text="Disk full: rotate the logs."))

    @loom.flow("own-prompt")
    def own_prompt(ctx: FlowContext, question: str) -> Any:
        context = "\n".join(p.text for p in kb.retrieve(question, decide=ctx.decide))
        prompt = f"Context: {context}\nQuestion: {question}"
        request = (
            {"messages": [{"role": "user", "content": prompt}]}
            if shape == "chat"
            else {"prompt": prompt}
        )
        answer = {"text": "rotate the logs", "cited_doc_ids": ["wiki.md"]}
        return ctx.decide("model", lambda: answer, input=request, kind="model")

    execution_id = str(loom.run("own-prompt", question="disk full").execution_id)
    [call] = audit(loom, execution_id).model_calls
    assert (call.request is not None) == (shape == "chat")
    assert call.citations is not None
    assert call.citations.grounded == ("wiki.md",) and call.citations.ok
    assert _audit_cli(db_url, execution_id).exit_code == 0


class _CitesWiki:
    """Cites wiki.md whatever it was shown."""

    def answer(self, request: Any) -> Answer:
        return Answer(text="rotate the logs", cited_doc_ids=("wiki.md",))


def test_a_grounded_request_without_passages_showed_nothing(loom: Loom, db_url: str) -> None:
    """The other side of the fallback: a request grounded_request built when the retrieval
    found nothing is no request of the flow's own making. It showed no document, so citing
    one an earlier call was shown is ungrounded, in the audit as in the live check."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="wiki.md", text="Disk full: rotate the logs."))

    @loom.flow("two-questions")
    def two_questions(ctx: FlowContext) -> list[str]:
        answer_from_corpus(kb, "disk full", decide=ctx.decide, model=ExtractiveModel())
        live = answer_from_corpus(kb, "zebra crossing", decide=ctx.decide, model=_CitesWiki())
        assert not live.passages
        return list(live.citations.ungrounded)

    run = loom.run("two-questions")
    assert run.output == ["wiki.md"]  # the live check flagged it
    first, second = audit(loom, run.execution_id).model_calls
    assert first.citations is not None and first.citations.ok
    assert second.citations is not None
    assert second.citations.ungrounded == ("wiki.md",) and second.citations.shown == ()
    assert _audit_cli(db_url, str(run.execution_id)).exit_code == 1


@pytest.mark.parametrize("retrieved_first", [True, False], ids=["control", "retrieved-after"])
def test_a_model_call_is_shown_only_what_was_retrieved_before_it(
    loom: Loom, db_url: str, retrieved_first: bool
) -> None:
    """The fallback counted every retrieval of the execution: a model citing policy.md
    before anything was retrieved was "all grounded", exit 0, because a later retrieval
    returned policy.md. A call is checked against the retrievals recorded before it."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="policy.md", text="Never drop the production database."))

    @loom.flow("cite")
    def cite(ctx: FlowContext, question: str) -> Any:
        if retrieved_first:
            kb.retrieve("production database", decide=ctx.decide)
        answer = {"text": "drop it", "cited_doc_ids": ["policy.md"]}
        made = ctx.decide("model", lambda: answer, input={"prompt": question}, kind="model")
        if not retrieved_first:
            kb.retrieve("production database", decide=ctx.decide)
        return made

    execution_id = str(loom.run("cite", question="may I drop the db?").execution_id)
    report = audit(loom, execution_id)
    assert [p.doc_id for r in report.retrievals for p in r.passages] == ["policy.md"]
    [call] = report.model_calls
    assert call.citations is not None
    assert call.citations.ok == retrieved_first
    assert call.citations.shown == (("policy.md",) if retrieved_first else ())
    assert _audit_cli(db_url, execution_id).exit_code == (0 if retrieved_first else 1)
