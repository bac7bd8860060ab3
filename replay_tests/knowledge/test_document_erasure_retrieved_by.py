"""An erasure of a document names the executions that retrieved it (ADR 0055, amended).

Their retrieval decisions are their own records, sealed under their own keys, so erasing the
document does not reach them; the report (dry run and applied, Python and CLI) names each live
one so that the operator can erase it too, and leaves out executions that retrieved only other
documents, other scopes, or are already erased.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge import Doc, Passage, open_knowledge_base
from loom_knowledge.corpus.erasure import executions_that_retrieved
from loom_runtime import FlowContext, Labels, Loom, MasterKey

KEY = MasterKey(b"r" * 32)


def _setup(loom: Loom) -> dict[str, str]:
    """Runs that retrieved Alice's page (two users), one that did not, one in another
    scope; returns their execution ids by name."""
    handbook = open_knowledge_base(loom, "handbook")
    wiki = open_knowledge_base(loom, "wiki")
    page = Doc(id="people/alice", title="Alice", text="Alice lives at 9 Elm Road.")
    handbook.sync([page, Doc(id="ops/backups", title="Backups", text="Backups run nightly.")])
    wiki.sync([page])

    @loom.flow("ask")
    def ask(ctx: FlowContext, scope: str, question: str) -> list[str]:
        kb = handbook if scope == "handbook" else wiki
        found: list[Passage] = kb.retrieve(question, decide=ctx.decide)
        return [p.doc_id for p in found]

    def run(scope: str, question: str, user: str) -> str:
        done = loom.run("ask", scope=scope, question=question, labels=Labels(user=user))
        return str(done.execution_id)

    return {
        "carol": run("handbook", "Alice Elm Road", "carol"),
        "dave": run("handbook", "where does Alice live", "dave"),
        "backups": run("handbook", "backups nightly", "erin"),
        "wiki": run("wiki", "Alice Elm Road", "frank"),
    }


def test_the_report_names_the_executions_that_retrieved_the_document(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        runs = _setup(loom)
        expected = {runs["carol"], runs["dave"]}
        dry = loom.erase(document="handbook:people/alice", reason="r", by="dpo", dry_run=True)
        assert set(dry.subjects[0].held_by) == expected
        loom.erase(user="dave", reason="r", by="dpo")  # an erased execution holds nothing
        report = loom.erase(document="handbook:people/alice", reason="r", by="dpo")
        assert report.subjects[0].held_by == (runs["carol"],)
        found = executions_that_retrieved(loom, "wiki", "people/alice")
        assert [str(e) for e in found] == [runs["wiki"]]


def test_the_cli_dry_run_names_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        runs = _setup(loom)
    dry = CliRunner().invoke(
        app, ["erase", "--document", "handbook:people/alice", "--reason", "r", "--db", url]
    )
    assert dry.exit_code == 0, dry.output
    for name in ("carol", "dave"):
        assert f"retrieved by execution {runs[name]}" in dry.output
        assert f"--execution {runs[name]}" in dry.output
    assert runs["backups"] not in dry.output and runs["wiki"] not in dry.output
