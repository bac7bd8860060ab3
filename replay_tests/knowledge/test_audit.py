"""Audit: what the agent knew (and what became of it), what it sent, answered and cited."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from loom_knowledge import Answer, Doc, ExtractiveModel, open_knowledge_base
from loom_knowledge.models.answering import answer_from_corpus
from loom_knowledge.tools.audit import Audit, audit
from loom_knowledge.tools.audit_render import render_html, render_text
from loom_runtime import FlowContext, Loom, current_context
from loom_runtime.tools.cli import app


class LyingModel:
    """Answers from the passages but also cites a document it was never shown."""

    def answer(self, request: Any) -> Answer:
        real = ExtractiveModel().answer(request)
        return Answer(text=real.text, cited_doc_ids=(*real.cited_doc_ids, "made-up.md"))


@pytest.fixture
def audited(loom: Loom) -> tuple[Loom, Any]:
    """An execution that saw two documents; one is later revised, one removed."""
    kb = open_knowledge_base(loom, "ops")
    with freeze_time("2026-01-01T09:00:00Z"):
        kb.put_doc(Doc(id="disk.md", text="When the disk is full, rotate the logs."))
        kb.put_doc(Doc(id="dns.md", text="When DNS fails the disk looks full to no one."))
        kb.put_doc(Doc(id="tls.md", text="Renew certificates before they expire."))

    @loom.flow("answer")
    def answer(ctx: FlowContext, question: str) -> dict[str, Any]:
        grounded = answer_from_corpus(kb, question, decide=ctx.decide, model=LyingModel())
        return {"cited": list(grounded.answer.cited_doc_ids)}

    with freeze_time("2026-01-01T10:00:00Z"):
        run = loom.run("answer", question="the disk is full")
    with freeze_time("2026-01-02T08:00:00Z"):
        kb.put_doc(Doc(id="disk.md", text="When the disk is full, first check inodes."))
    with freeze_time("2026-01-03T08:00:00Z"):
        kb.remove_doc("dns.md")
    return loom, run


def test_each_passage_says_what_became_of_its_revision(audited: tuple[Loom, Any]) -> None:
    """disk.md r1 was superseded on Jan 2, dns.md r1 removed on Jan 3, with positions."""
    loom, run = audited
    report = audit(loom, run.execution_id)
    [retrieval] = report.retrievals
    assert retrieval.query == "the disk is full" and retrieval.scope == "ops"
    by_doc = {p.doc_id: p for p in retrieval.passages}
    assert set(by_doc) == {"disk.md", "dns.md"}
    assert by_doc["disk.md"].status == "superseded" and by_doc["disk.md"].revision == 1
    assert by_doc["disk.md"].ended_at is not None
    assert by_doc["disk.md"].ended_at.isoformat().startswith("2026-01-02T08:00")
    assert by_doc["dns.md"].status == "removed"
    assert by_doc["dns.md"].ended_at is not None
    assert by_doc["dns.md"].ended_at.isoformat().startswith("2026-01-03T08:00")
    assert by_doc["dns.md"].ended_position is not None
    assert by_doc["dns.md"].ended_position > by_doc["disk.md"].ended_position  # type: ignore[operator]


def test_the_request_answer_and_ungrounded_citation_are_reported(
    audited: tuple[Loom, Any],
) -> None:
    """The exact recorded request, the answer, and made-up.md flagged as never shown."""
    loom, run = audited
    [call] = audit(loom, run.execution_id).model_calls
    assert call.request is not None
    labels = [m.provenance.label for m in call.request.messages if m.provenance]
    assert sorted(labels) == ["knowledge:ops:disk.md", "knowledge:ops:dns.md"]
    assert call.answer is not None and "rotate the logs" in call.answer.text
    assert call.citations is not None
    assert call.citations.ungrounded == ("made-up.md",)


def test_the_audit_does_not_change_when_the_corpus_does(audited: tuple[Loom, Any]) -> None:
    """Recorded content, not today's corpus: the passages' text is what the agent saw."""
    loom, run = audited
    [retrieval] = audit(loom, run.execution_id).retrievals
    texts = {p.doc_id: p.text for p in retrieval.passages}
    assert texts["disk.md"] == "When the disk is full, rotate the logs."


def test_text_json_and_html_renderings(audited: tuple[Loom, Any]) -> None:
    """All three carry the same facts; JSON decodes back into an Audit."""
    loom, run = audited
    report = audit(loom, run.execution_id)
    text = render_text(report)
    assert "superseded" in text and "UNGROUNDED ['made-up.md']" in text
    assert msgspec.json.decode(msgspec.json.encode(report), type=Audit) == report
    page = render_html(report)
    assert page.startswith("<!doctype html>") and "http" not in page.split("<body>")[1]
    assert "UNGROUNDED made-up.md" in page and "badge superseded" in page


def test_cli_audit_exit_code_flags_ungrounded_citations(
    audited: tuple[Loom, Any], db_url: str, tmp_path: Path
) -> None:
    """`loom audit ID` prints the account; exit 1 because a citation is ungrounded."""
    _, run = audited
    result = CliRunner().invoke(app, ["audit", str(run.execution_id), "--db", db_url])
    assert result.exit_code == 1 and "UNGROUNDED" in result.output
    result = CliRunner().invoke(app, ["audit", str(run.execution_id), "--json", "--db", db_url])
    assert json.loads(result.output)["flow"] == "answer"
    page = tmp_path / "audit.html"
    CliRunner().invoke(app, ["audit", str(run.execution_id), "--html", str(page), "--db", db_url])
    assert "<ol>" in page.read_text()


@pytest.mark.parametrize(
    ("value", "request_input"),
    [
        ({"hits": ["a", "b"]}, None),  # not a list of passages
        ([{"doc_id": "a.md", "index": 0, "text": "x", "revision": 1}], {"limit": "many"}),
        ("just text", {"scope": "ops", "query": "q", "limit": 4}),
    ],
    ids=["dict-value", "bad-limit", "string-value"],
)
def test_a_users_own_retrieval_decision_is_audited_as_a_generic_decision(
    loom: Loom, db_url: str, value: Any, request_input: Any
) -> None:
    """kind="retrieval" is the user's label too: a value not in loom's shape is shown as it is
    recorded, not decoded as passages (which crashed the audit)."""

    @loom.flow("own-search")
    def own_search(ctx: FlowContext) -> Any:
        return ctx.decide("my-search", lambda: value, input=request_input, kind="retrieval")

    run = loom.run("own-search")
    report = audit(loom, run.execution_id)
    assert report.retrievals == ()
    [decision] = report.decisions
    assert (decision.key, decision.kind) == ("my-search", "retrieval")
    assert decision.value == value
    assert "my-search" in render_text(report) and "my-search" in render_html(report)
    result = CliRunner().invoke(app, ["audit", str(run.execution_id), "--db", db_url])
    assert result.exit_code == 0 and "my-search" in result.output


def test_the_audit_shows_lineage_reopenings_and_what_was_measured(
    audited: tuple[Loom, Any], db_url: str
) -> None:
    """A model call's meta (model, latency, usage, retries), a reopened failure and a fork's
    parent and overridden retrieval appear in the Audit and its text, JSON and HTML; the meta
    is untrusted text like the rest (a planted escape sequence or tag stays inert)."""
    loom, run = audited
    down = [True]

    @loom.flow("measured")
    def measured(ctx: FlowContext) -> str:
        context = current_context()
        assert context is not None
        call = context.open_decision("llm", kind="model", input={"q": "disk"})
        meta = {
            "model": "gpt-\x1b[2J<script>",
            "latency_ms": 12.5,
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
            "attempts": [{"error": "http 429", "message": "slow down", "paused": 0.5}],
        }
        answer = call.value if call.recorded else call.record("rotate the logs", meta=meta)

        def tool() -> str:
            if down[0]:
                raise ConnectionError("tool down")
            return "ok"

        return f"{answer}/{ctx.decide('tool', tool, kind='tool')}"

    with pytest.raises(ConnectionError):
        loom.run("measured")
    failed_id = next(s.execution_id for s in loom.executions() if s.flow == "measured")
    down[0] = False
    loom.resume(failed_id, retry_failed=True)
    fork = loom.fork(failed_id, at="tool", override={"tool": "mocked"})
    tls = {"doc_id": "tls.md", "index": 0, "text": "Renew certificates.", "revision": 1}
    what_if = loom.fork(run.execution_id, at=0, override={"knowledge:ops:retrieve": [tls]})

    reopened = audit(loom, failed_id)
    (call,) = reopened.model_calls
    assert call.meta["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}
    (reopening,) = reopened.reopenings
    assert reopening.dropped == ("tool",) and "tool down" in reopening.error
    forked = audit(loom, fork.execution_id)
    assert (forked.parent_id, forked.forked_at) == (failed_id, 1)
    assert forked.model_calls[0].origin == "inherited"
    assert [(d.key, d.origin) for d in forked.decisions] == [("tool", "override")]
    what_if_audit = audit(loom, what_if.execution_id)
    assert what_if_audit.parent_id == run.execution_id
    (retrieval,) = what_if_audit.retrievals
    assert retrieval.origin == "override" and retrieval.passages[0].status == "current"
    assert "[override]" in render_text(what_if_audit)
    assert "badge origin" in render_html(what_if_audit)

    text = render_text(reopened)
    assert "measured: model gpt-<U+001B>[2J<script>; 12.5 ms" in text
    assert "usage prompt_tokens=3 completion_tokens=4" in text
    assert "1 retry: http 429: slow down (paused 0.5 s)" in text
    assert "reopened by" in text and "computed again: 'tool'" in text
    fork_text = render_text(forked)
    assert f"forked from execution {failed_id}, taking its first 1 decision(s)" in fork_text
    assert "model call llm [inherited]" in fork_text and "tool (kind tool) [override]" in fork_text
    page = render_html(reopened)
    assert "<script>" not in page and "&lt;script&gt;" in page and "\x1b" not in page
    assert "reopened by" in page and "1 retry: http 429" in page
    assert msgspec.json.decode(msgspec.json.encode(forked), type=Audit) == forked
    result = CliRunner().invoke(app, ["audit", str(fork.execution_id), "--json", "--db", db_url])
    assert json.loads(result.output)["parent_id"] == str(failed_id)


def test_a_plain_decision_shows_what_it_was_asked_and_a_flow_without_a_corpus_says_so(
    loom: Loom,
) -> None:
    """What the agent was given is half of what an audit is for: a decision the audit does not
    interpret shows its input beside its value (the prompt of a hand-written model call), in
    text and HTML; a decision without a kind does not print ``kind None``; an execution that
    read no corpus does not claim to have seen one."""

    @loom.flow("triage")
    def triage(ctx: FlowContext, ticket: str) -> Any:
        prompt = {"prompt": "Route this ticket.", "ticket": ticket}
        return ctx.decide("model", lambda: {"queue": "billing"}, input=prompt)

    report = audit(loom, loom.run("triage", ticket="charged twice").execution_id)
    text = render_text(report)
    assert 'decision model: {"queue":"billing"}' in text
    assert '  input: {"prompt":"Route this ticket.","ticket":"charged twice"}' in text
    assert "kind None" not in text
    assert "corpus" not in text and "started after log position" in text
    page = render_html(report)
    assert "Route this ticket." in page and "kind None" not in page and "corpus" not in page


class _CitesX:
    """A model that cites document ``x`` whatever it is shown."""

    def answer(self, request: Any) -> Answer:
        return Answer(text="rotate the logs", cited_doc_ids=("x",))


@pytest.mark.parametrize("second_scope", ["runbooks", "wiki"])
def test_a_citation_is_grounded_only_by_its_own_call_s_passages(
    db_url: str, second_scope: str
) -> None:
    """The audit checked every model call's citations against every passage retrieved in the
    execution: a second call, shown only ``y``, citing ``x`` (shown to the first call, or
    found in another scope) was "all grounded", exit 0, where the live check had flagged it.
    Each call is checked against the passages its own recorded request carries."""
    with Loom(db_url) as loom:
        first = open_knowledge_base(loom, "runbooks")
        first.sync([Doc(id="x", text="Disk full: rotate the logs.")])
        second = open_knowledge_base(loom, second_scope)
        second.sync(
            [
                *([Doc(id="x", text="Disk full: rotate the logs.")] * (second_scope == "runbooks")),
                Doc(id="y", text="DNS down: check the resolver."),
            ]
        )

        @loom.flow("two-questions")
        def two_questions(ctx: FlowContext) -> list[str]:
            answer_from_corpus(
                first, "disk full", decide=ctx.decide, model=ExtractiveModel(), limit=1
            )
            live = answer_from_corpus(
                second, "dns resolver", decide=ctx.decide, model=_CitesX(), limit=1
            )
            return list(live.citations.ungrounded)

        run = loom.run("two-questions")
        assert run.output == ["x"]  # the live check flagged it
        report = audit(loom, run.execution_id)
        first_call, second_call = report.model_calls
        assert first_call.citations is not None and first_call.citations.ok
        assert second_call.citations is not None
        assert second_call.citations.ungrounded == ("x",)
        assert second_call.citations.shown == ("y",)
        result = CliRunner().invoke(app, ["audit", str(run.execution_id), "--db", db_url])
    assert result.exit_code == 1, result.output
    assert "UNGROUNDED" in result.output


class _PointsTo:
    """Answers by pointing at the documents shown, without quoting them."""

    def answer(self, request: Any) -> Answer:
        cited = tuple(m.provenance.doc_id for m in request.messages if m.provenance is not None)
        return Answer(text="see the cited documents", cited_doc_ids=cited)


def test_an_erased_document_s_text_is_not_in_the_audit_s_model_calls(tmp_path: Path) -> None:
    """The retrieval rows said "erased" with no text; the model call beside them printed the
    same passage in full from its recorded request, in text, JSON and HTML. Its message shows
    no text, and the position of the forget event, in every rendering."""
    from loom_runtime import MasterKey

    secret = "SECRET-STREET-42"
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    key = MasterKey(b"a" * 32)
    with Loom(url, encryption=key) as loom:
        kb = open_knowledge_base(loom, "hb")
        kb.sync(
            [
                Doc(id="people/alice", text=f"Alice lives at {secret}."),
                Doc(id="ops/backups", text="Backups of Alice's team run nightly."),
            ]
        )

        @loom.flow("ask")
        def ask(ctx: FlowContext) -> str:
            return answer_from_corpus(kb, "Alice", decide=ctx.decide, model=_PointsTo()).answer.text

        run = loom.run("ask")
        erased_at = loom.erase(document="hb:people/alice", reason="request", by="dpo").position
        report = audit(loom, run.execution_id)
        [call] = report.model_calls
        renderings = {
            "text": render_text(report),
            "json": msgspec.json.encode(report).decode(),
            "html": render_html(report),
        }
    for name, rendered in renderings.items():
        assert secret not in rendered, name
    for name in ("text", "html"):
        assert f"erased (position {erased_at})" in renderings[name], name
    [(number, position)] = call.erased.items()
    assert call.request is not None and position == erased_at
    assert call.request.messages[number].content == ""
    assert "Backups of Alice's team" in renderings["json"]  # the control: kept text stays
    assert call.citations is not None and call.citations.ok


def test_knowledge_as_of_says_which_documents_were_erased(tmp_path: Path) -> None:
    """`loom knowledge as-of` before an erasure listed the document like any other, and a
    search of it said "no passage matches": an auditor read that the corpus held nothing
    relevant. The listing, the search and both JSON forms say "erased at P" (ADR 0055)."""
    from loom_runtime import MasterKey

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    key = b"b" * 32
    encoded = base64.urlsafe_b64encode(key).decode()
    with Loom(url, encryption=MasterKey(key)) as loom:
        kb = open_knowledge_base(loom, "hb")
        kb.sync([Doc(id="people/alice", text="Alice lives far."), Doc(id="ops/b", text="Backups.")])
        before = loom.log.position
        erased_at = loom.erase(document="hb:people/alice", reason="request", by="dpo").position
    runner = CliRunner(env={"LOOM_MASTER_KEY": encoded})
    common = ["knowledge", "as-of", str(before), "--scope", "hb", "--db", url]
    listing = runner.invoke(app, common)
    search = runner.invoke(app, [*common, "--query", "alice"])
    listing_json = runner.invoke(app, [*common, "--json"])
    search_json = runner.invoke(app, [*common, "--query", "alice", "--json"])
    for result in (listing, search, listing_json, search_json):
        assert result.exit_code == 0, result.output
    assert f"people/alice r1  erased at {erased_at}" in listing.stdout
    assert f"people/alice (at {erased_at})" in search.output
    for result in (listing_json, search_json):
        assert json.loads(result.stdout)["erased"] == {"people/alice": erased_at}


def test_a_fork_s_audit_says_its_inherited_retrievals_saw_its_parent_s_corpus(
    loom: Loom,
) -> None:
    """The header gave the fork's own start as "the corpus as it saw it", where its inherited
    retrieval was made by the parent, against an earlier corpus."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="disk.md", text="Disk full: rotate the logs."))

    @loom.flow("ask")
    def ask(ctx: FlowContext) -> str:
        return answer_from_corpus(
            kb, "disk full", decide=ctx.decide, model=ExtractiveModel()
        ).answer.text

    parent = loom.run("ask")
    kb.put_doc(Doc(id="disk.md", text="Disk full: check inodes first."))
    fork = loom.fork(parent.execution_id, at=1)
    text = render_text(audit(loom, fork.execution_id))
    assert f"(inherited retrievals: as execution {parent.execution_id} saw it)" in text
    own = render_text(audit(loom, parent.execution_id))
    assert "inherited retrievals" not in own  # the control


def test_the_header_does_not_call_the_start_s_corpus_what_a_later_retrieval_saw(
    loom: Loom,
) -> None:
    """A document revised while the flow ran (here by a step before its retrieval) is
    retrieved in its new revision: the header named the start's position "the corpus as it
    saw it", where ``as-of`` shows the old revision. It says where the execution started and
    that the retrieval rows are what each retrieval returned; those rows show the new text."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="disk.md", text="When the disk is full, rotate the logs."))

    @loom.flow("ask-after-a-step")
    def ask(ctx: FlowContext) -> str:
        revised = Doc(id="disk.md", text="Disk full: delete /var.")
        ctx.decide("approval", lambda: kb.put_doc(revised) or 1)  # a sync while it waited
        return answer_from_corpus(
            kb, "disk full", decide=ctx.decide, model=ExtractiveModel()
        ).answer.text

    run = loom.run("ask-after-a-step")
    text = render_text(audit(loom, run.execution_id))
    assert "as it saw it" not in text
    assert f"started at log position {loom.execution(run.execution_id).log_position}" in text
    assert "Disk full: delete /var." in text
