"""Retention by age for a knowledge scope's documents (ADR 0060, on ADR 0053 and 0055).

The claims: ``retain(older_than=..., scope=S)`` erases every document of S whose last
revision was written before the cutoff (every revision, one forget event), leaves younger
ones (and documents revised recently) searchable, writes nothing on a dry run or when nothing
is old enough, lists documents erased by an earlier run as already erased, names the
executions that retrieved what it erases, refuses an unknown scope and a tenant with a scope,
and runs from ``loom retain --scope``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from loom_knowledge import Doc, Passage, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_runtime import (
    ErasureSubjectError,
    FlowContext,
    Loom,
    MasterKey,
    RetentionPolicyError,
)
from loom_runtime.erasure import forget_events

KEY = MasterKey(b"t" * 32)
SCOPE = "handbook"
NINETY = timedelta(days=90)


def _history(loom: Loom) -> str:
    """Three documents written on 1 January; one revised on 1 April; a retrieval of the
    old one in between. Returns the retrieving execution's id."""
    kb = open_knowledge_base(loom, SCOPE)
    with freeze_time("2026-01-01T12:00:00Z"):
        kb.sync(
            [
                Doc(id="old/visitor", title="Visitor", text="Visitor badge 7781 for Mallory."),
                Doc(id="old/revised", title="Revised", text="First draft of the rota."),
                Doc(id="young/policy", title="Policy", text="Backups run nightly."),
            ]
        )

    @loom.flow("ask")
    def ask(ctx: FlowContext, question: str) -> list[str]:
        found: list[Passage] = kb.retrieve(question, decide=ctx.decide)
        return [p.doc_id for p in found]

    with freeze_time("2026-02-01T12:00:00Z"):
        asked = str(loom.run("ask", question="visitor badge Mallory").execution_id)
    with freeze_time("2026-04-01T12:00:00Z"):
        kb.put_doc(Doc(id="old/revised", title="Revised", text="Second draft of the rota."))
        kb.put_doc(Doc(id="young/policy", title="Policy", text="Backups run nightly, at 3."))
    return asked


def test_documents_last_written_before_the_cutoff_are_erased(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        asked = _history(loom)
        kb = open_knowledge_base(loom, SCOPE)
        with freeze_time("2026-04-15T12:00:00Z"):  # 104 days after January, 14 after April
            at = loom.log.position
            plan = loom.retain(older_than=NINETY, scope=SCOPE, dry_run=True)
            assert loom.log.position == at  # a dry run writes nothing
            assert [s.subject for s in plan.subjects] == [document_subject(SCOPE, "old/visitor")]
            assert plan.subjects[0].held_by == (asked,)
            report = loom.retain(older_than=NINETY, scope=SCOPE)
            assert report.applied and report.reason == "retention: older than 90d"
            assert [e.subjects for _, e in forget_events(loom)] == [(plan.subjects[0].subject,)]
            assert kb.search("visitor badge Mallory") == []
            assert {d.id for d in kb.list_docs()} == {"old/revised", "young/policy"}
            again = loom.retain(older_than=NINETY, scope=SCOPE)  # the next night
            assert again.subjects == () and again.already_erased == (plan.subjects[0].subject,)
            assert loom.log.position == report.position  # nothing written
            assert loom.log.verify().problem is None
        with freeze_time("2026-07-15T12:00:00Z"):  # now the April revisions are old too
            later = loom.retain(older_than=NINETY, scope=SCOPE)
            assert {s.subject for s in later.subjects} == {
                document_subject(SCOPE, "old/revised"),
                document_subject(SCOPE, "young/policy"),
            }
            assert [s.events for s in later.subjects] == [2, 2]  # every revision
            assert kb.list_docs() == []


def test_bad_selections_are_refused_and_write_nothing(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _history(loom)
        at = loom.log.position
        with pytest.raises(ErasureSubjectError, match="no knowledge scope 'handbok'"):
            loom.retain(older_than=NINETY, scope="handbok")
        with pytest.raises(RetentionPolicyError, match="not both"):
            loom.retain(older_than=NINETY, scope=SCOPE, tenant="acme")
        assert loom.log.position == at


def test_loom_retain_scope_runs_from_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _history(loom)
    runner = CliRunner()
    args = ["retain", "--older-than", "90d", "--scope", SCOPE, "--db", url]
    with freeze_time("2026-04-15T12:00:00Z"):
        dry = runner.invoke(app, args)
        assert dry.exit_code == 0, dry.output
        assert "would erase 1 document(s) of scope=handbook" in dry.output
        applied = runner.invoke(app, [*args, "--apply", "--json"])
        assert applied.exit_code == 0, applied.output
        report = json.loads(applied.stdout)
        assert report["applied"] is True
        assert [s["subject"] for s in report["subjects"]] == [
            document_subject(SCOPE, "old/visitor")
        ]
        unknown = runner.invoke(app, ["retain", "--older-than", "90d", "--scope", "x", "--db", url])
        assert unknown.exit_code == 2 and "no knowledge scope" in unknown.output


def test_a_document_a_sync_found_unchanged_is_in_use_and_kept(db_url: str) -> None:
    """A folder synced every night writes no revision for a file that did not change, so its
    last write kept ageing: retention erased documents still current in the folder, and the
    next sync of that folder was refused whole (it held an erased document). A sync that
    found a document unchanged confirms it as of then; one removed from the folder ages from
    its last write as before."""
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        folder = [
            Doc(id="vacation.md", text="Vacation is 25 days a year."),
            Doc(id="rota.md", text="The on-call rota rotates weekly."),
        ]
        with freeze_time("2026-01-01T12:00:00Z"):
            kb.sync([*folder, Doc(id="gone.md", text="Visitor badge 7781.")], source="repo")
        with freeze_time("2026-04-01T12:00:00Z"):  # gone.md left the folder
            nightly = kb.sync(folder, source="repo")
        assert (sorted(nightly.unchanged), nightly.removed) == (
            ["rota.md", "vacation.md"],
            ("gone.md",),
        )
        with freeze_time("2026-04-15T12:00:00Z"):  # 104 days after January, 14 after April
            report = loom.retain(older_than=NINETY, scope=SCOPE)
            assert [s.subject for s in report.subjects] == [document_subject(SCOPE, "gone.md")]
            assert [p.doc_id for p in kb.search("vacation days")] == ["vacation.md"]
            again = kb.sync(folder, source="repo")  # the next night's sync still runs
        assert sorted(again.unchanged) == ["rota.md", "vacation.md"]
