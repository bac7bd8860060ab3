"""Counterfactual replay: today's corpus, yesterday's execution, nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from loom_knowledge import Doc, ExtractiveModel, open_knowledge_base
from loom_knowledge.corpus.counterfactual import PassageRef, counterfactual, render_counterfactual
from loom_knowledge.models.answering import answer_from_corpus
from loom_memory import HashingEmbedder
from loom_runtime import FlowContext, Loom


@pytest.fixture
def incident(loom: Loom) -> tuple[Loom, Any]:
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="disk.md", text="When the disk is full, rotate the logs."))
    kb.put_doc(Doc(id="tls.md", text="Renew certificates before they expire."))

    @loom.flow("answer")
    def answer(ctx: FlowContext, question: str) -> list[str]:
        grounded = answer_from_corpus(kb, question, decide=ctx.decide, model=ExtractiveModel())
        return list(grounded.answer.cited_doc_ids)

    return loom, loom.run("answer", question="the disk is full")


def test_an_unchanged_corpus_changes_nothing(incident: tuple[Loom, Any]) -> None:
    """Same corpus: same passages, same request, every citation still grounded."""
    loom, run = incident
    report = counterfactual(loom, run.execution_id)
    assert report.unchanged and not report.request_diffs and not report.now_ungrounded
    assert report.retrievals[0].kept == (PassageRef("disk.md", 0, 1),)


def test_a_removed_runbook_would_change_the_incident(incident: tuple[Loom, Any]) -> None:
    """Removing the cited runbook: the passage is gone, the request differs, the citation
    would be ungrounded; and the replay wrote nothing."""
    loom, run = incident
    kb = open_knowledge_base(loom, "ops")
    kb.remove_doc("disk.md")
    kb.put_doc(Doc(id="inodes.md", text="A full disk can mean inodes ran out."))
    before = loom.log.position
    report = counterfactual(loom, run.execution_id)
    assert loom.log.position == before
    assert not report.unchanged
    [change] = report.retrievals
    assert change.removed == (PassageRef("disk.md", 0, 1),)
    assert change.added == (PassageRef("inodes.md", 0, 1),)
    [diff] = report.request_diffs
    assert "rotate the logs" in diff and "inodes ran out" in diff
    assert report.now_ungrounded == ("disk.md",)
    text = render_counterfactual(report)
    assert "would NOT go the same way" in text and "- disk.md#0 r1" in text


class Flaky(HashingEmbedder):
    """The hashing embedder, down (raising) once ``down`` is set."""

    down = False

    def embed(self, texts: Any) -> Any:
        if self.down:
            raise ConnectionError("embedding endpoint unreachable")
        return super().embed(texts)


def hybrid_incident(loom: Loom, embedder: Flaky) -> Any:
    """A hybrid-mode answer recorded over one runbook, then a second runbook added (today's
    passage, with no vector yet): the run."""
    kb = open_knowledge_base(loom, "ops", embedder=embedder, min_score=0.1)
    kb.put_doc(Doc(id="disk.md", text="When the disk is full, rotate the logs."))

    @loom.flow("answer")
    def answer(ctx: FlowContext, question: str) -> list[str]:
        grounded = answer_from_corpus(
            kb, question, decide=ctx.decide, model=ExtractiveModel(), mode="hybrid"
        )
        return list(grounded.answer.cited_doc_ids)

    run = loom.run("answer", question="the disk is full")
    kb.put_doc(Doc(id="inodes.md", text="A full disk can mean inodes ran out."))
    return run


def test_a_live_retrieval_that_fails_is_reported_not_a_crash(loom: Loom) -> None:
    """Review of 6 December: a retrieval raising when run live (its embedder down, today)
    was kept by the replay as its exception, which the report then iterated as passages: a
    TypeError instead of a report. Now the retrieval is reported failed, with what it
    raised, every recorded passage removed, and the execution not unchanged."""
    embedder = Flaky()
    run = hybrid_incident(loom, embedder)
    embedder.down = True  # and today's new passage must be embedded to be ranked
    report = counterfactual(loom, run.execution_id)
    assert not report.unchanged
    [change] = report.retrievals
    assert change.failed is not None and "embedding endpoint unreachable" in change.failed
    assert change.removed == (PassageRef("disk.md", 0, 1),) and not change.added
    assert "failed live: ConnectionError" in render_counterfactual(report)


def test_a_hybrid_counterfactual_records_only_the_vectors_it_embeds(loom: Loom) -> None:
    """What "nothing is written" means for a vector or hybrid scope (review of 6 December):
    today's passages without vectors are embedded to be ranked, and their vectors recorded
    as any live retrieval records them; no execution or corpus event is written."""
    run = hybrid_incident(loom, Flaky())
    before = loom.log.position
    counterfactual(loom, run.execution_id)
    written = [record.topic for record in loom.log.notifications(after=before)]
    assert written and all(topic.endswith("EmbeddingsRecorded") for topic in written), written
    counterfactual(loom, run.execution_id)  # embedded once: the second writes nothing
    assert loom.log.position == before + len(written)


def test_a_retrieval_of_the_applications_own_shape_is_named_not_compared(loom: Loom) -> None:
    """A flow's own search labelled ``kind="retrieval"`` (the docs allow a retrieval of your
    own shape) made the counterfactual decode its value as loom's passages: an untyped
    ``msgspec.ValidationError`` traceback, where ``loom audit`` of the same execution worked
    (an attack review). It is run live as every retrieval is, and named as not compared; the
    report goes on (the control: a change of its live value still reaches the verdict)."""
    hits = {"hits": ["a", "b"]}

    @loom.flow("lookup")
    def lookup(ctx: FlowContext, q: str) -> int:
        found = ctx.decide("search", lambda: dict(hits), input={"q": q}, kind="retrieval")
        return len(found["hits"])

    run = loom.run("lookup", q="disk")
    report = counterfactual(loom, run.execution_id)
    assert report.retrievals == () and report.uncompared == ("search",)
    assert report.unchanged
    assert "retrieval search: not loom's passages, not compared" in render_counterfactual(report)
    hits["hits"] = ["a"]  # today's search returns less: the flow's output changes
    assert not counterfactual(loom, run.execution_id).unchanged


def test_a_citation_gone_from_its_scope_is_ungrounded_whatever_another_scope_returns(
    loom: Loom,
) -> None:
    """A citation is checked against the scope its passage was shown from: ``ops`` losing
    README.md makes the answer's citation ungrounded even though ``hr``, retrieved in the
    same flow, still returns a README.md of its own (a different document)."""
    ops = open_knowledge_base(loom, "ops")
    hr = open_knowledge_base(loom, "hr")
    ops.put_doc(Doc(id="README.md", text="When the disk is full, rotate the logs."))
    hr.put_doc(Doc(id="README.md", text="When the disk is full, file a ticket with HR."))

    @loom.flow("answer-with-footer")
    def answer(ctx: FlowContext, question: str) -> list[str]:
        grounded = answer_from_corpus(ops, question, decide=ctx.decide, model=ExtractiveModel())
        hr.retrieve(question, decide=ctx.decide)  # a lookup in another scope, for a footer
        return list(grounded.answer.cited_doc_ids)

    run = loom.run("answer-with-footer", question="the disk is full")
    assert run.output == ["README.md"]
    assert counterfactual(loom, run.execution_id).now_ungrounded == ()
    ops.remove_doc("README.md")
    report = counterfactual(loom, run.execution_id)
    assert report.now_ungrounded == ("README.md",)


def test_a_query_past_today_s_term_bound_is_named_not_blamed_on_the_corpus(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retrieval recorded while a search read 1,000 distinct terms, asked again today when
    it reads 64 (ADR 0016, "terms"): the corpus did not change, the search did. The report
    says so beside the retrieval, instead of only blaming today's corpus (a regression
    review's finding)."""
    import loom_memory.text

    kb = open_knowledge_base(loom, "ops")
    kb.sync([Doc(id="early.md", text="w0"), Doc(id="late.md", text="w70")], source="s")

    @loom.flow("ask")
    def ask(ctx: FlowContext, q: str) -> list[str]:
        return [p.doc_id for p in kb.retrieve(q, decide=ctx.decide)]

    query = " ".join(f"w{n}" for n in range(100))
    with monkeypatch.context() as before:
        before.setattr(loom_memory.text, "MAX_QUERY_TERMS", 1000)
        run = loom.run("ask", q=query)
    assert sorted(run.output) == ["early.md", "late.md"]
    report = counterfactual(loom, run.execution_id)
    [change] = report.retrievals
    assert change.removed == (PassageRef("late.md", 0, 1),) and change.query_terms == 100
    assert "its query has 100 distinct terms" in render_counterfactual(report)
    short = counterfactual(loom, loom.run("ask", q="w0 w70").execution_id)
    assert short.retrievals[0].query_terms is None  # a query within the bound: no note
