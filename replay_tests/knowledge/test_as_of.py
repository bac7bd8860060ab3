"""As of: the corpus as it was, as a filter over the same index and scorer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from loom_knowledge import Doc, InvalidOptionError, KnowledgeBase, open_knowledge_base
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_runtime import FlowContext, Loom
from loom_runtime.projection import rebuild
from loom_runtime.tools.cli import app


@pytest.fixture
def kb(loom: Loom) -> KnowledgeBase:
    return open_knowledge_base(loom, "ops")


@pytest.fixture
def history(loom: Loom, kb: KnowledgeBase) -> dict[str, int]:
    """Three moments: v1 of two runbooks; disk.md revised; dns.md removed, tls.md added."""
    marks = {}
    with freeze_time("2026-01-01T09:00:00Z"):
        kb.sync(
            [
                Doc(id="disk.md", text="Disk full: rotate the logs."),
                Doc(id="dns.md", text="DNS down: check the resolver."),
            ],
            source="repo",
        )
    marks["v1"] = loom.log.position
    with freeze_time("2026-01-02T09:00:00Z"):
        kb.put_doc(
            Doc(id="disk.md", text="Disk full: check inodes, then rotate logs."), source="repo"
        )
    marks["v2"] = loom.log.position
    with freeze_time("2026-01-03T09:00:00Z"):
        kb.sync(
            [
                Doc(id="disk.md", text="Disk full: check inodes, then rotate logs."),
                Doc(id="tls.md", text="Certificates expire: renew them."),
            ],
            source="repo",
        )
    marks["v3"] = loom.log.position
    return marks


def test_list_docs_gives_the_documents_and_revisions_of_each_moment(
    kb: KnowledgeBase, history: dict[str, int]
) -> None:
    """Which documents existed, at which revision, at each position."""

    def listing(position: int) -> list[tuple[str, int]]:
        return [(r.id, r.revision) for r in kb.as_of(position).list_docs()]

    assert listing(0) == []
    assert listing(history["v1"]) == [("disk.md", 1), ("dns.md", 1)]
    assert listing(history["v2"]) == [("disk.md", 2), ("dns.md", 1)]
    assert listing(history["v3"]) == [("disk.md", 2), ("tls.md", 1)]


def test_retrieve_as_of_finds_what_was_current_then_and_nothing_else(
    kb: KnowledgeBase, history: dict[str, int]
) -> None:
    """A superseded text retrieves as of v1 only; a removed document as of v1/v2 only."""
    then = kb.as_of(history["v1"])
    best = then.retrieve("rotate the logs")[0]
    assert (best.doc_id, best.revision) == ("disk.md", 1)
    assert [p.doc_id for p in kb.as_of(history["v2"]).retrieve("resolver")] == ["dns.md"]
    assert kb.as_of(history["v3"]).retrieve("resolver") == []
    assert kb.search("resolver") == []


def test_as_of_now_ranks_exactly_like_a_current_search(
    kb: KnowledgeBase, history: dict[str, int]
) -> None:
    """Same index, same scorer: as of the head equals a current search, order included."""
    for query in ("disk full", "rotate logs inodes", "certificates", "check"):
        assert kb.as_of(history["v3"]).retrieve(query, limit=10) == kb.search(query, limit=10)


def test_as_of_equals_a_corpus_rebuilt_up_to_that_position(
    loom: Loom, kb: KnowledgeBase, history: dict[str, int]
) -> None:
    """The filter and a rebuild stopped at P agree, document for document, passage for passage."""
    index = corpus_index(loom)
    for mark in ("v1", "v2"):
        as_of = kb.as_of(history[mark])
        documents, passages = as_of.list_docs(), as_of.passages()
        rebuild(loom.log, index, upto=history[mark])
        assert list(index.manifest("ops").values()) == documents
        assert index.read_passages("ops") == passages
    rebuild(loom.log, index)


def test_as_of_a_moment_in_wall_time(kb: KnowledgeBase, history: dict[str, int]) -> None:
    """A datetime resolves to the last position recorded at or before it."""
    noon_jan_2 = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    assert kb.as_of(noon_jan_2).position == history["v2"]
    assert kb.as_of(datetime(2025, 1, 1, tzinfo=UTC)).position == 0
    with pytest.raises(Exception, match="timezone"):
        kb.as_of(datetime(2026, 1, 2, 12, 0))


def test_the_corpus_as_an_execution_saw_it_is_one_call(
    loom: Loom, kb: KnowledgeBase, history: dict[str, int]
) -> None:
    """seen_by(execution) is the view at the position the execution recorded at its start."""

    @loom.flow("ask")
    def ask(ctx: FlowContext) -> int:
        return len(kb.retrieve("disk", decide=ctx.decide))

    run = loom.run("ask")
    kb.remove_doc("disk.md", source="repo")
    assert [r.id for r in kb.seen_by(run.execution_id).list_docs()] == ["disk.md", "tls.md"]


@pytest.mark.parametrize("bad", [-1, 10_000, True, "3"])
def test_a_position_outside_the_log_is_refused(kb: KnowledgeBase, bad: object) -> None:
    """Only 0..head (or an aware datetime) names a moment of this log."""
    with pytest.raises(InvalidOptionError):
        kb.as_of(bad)  # type: ignore[arg-type]


def test_cli_as_of(db_url: str, history: dict[str, int]) -> None:
    """`loom knowledge as-of WHEN --scope S [--query Q]` lists or searches the corpus then."""
    result = CliRunner().invoke(
        app, ["knowledge", "as-of", str(history["v1"]), "--scope", "ops", "--db", db_url]
    )
    assert result.exit_code == 0, result.output
    assert "dns.md" in result.output and "tls.md" not in result.output
    result = CliRunner().invoke(
        app,
        [
            "knowledge",
            "as-of",
            "2026-01-02T12:00:00+00:00",
            "--scope",
            "ops",
            "--query",
            "rotate logs",
            "--db",
            db_url,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "disk.md#0 r2" in result.output and "not recorded" in result.output


def test_cli_as_of_says_when_there_was_nothing(db_url: str, history: dict[str, int]) -> None:
    """Before the first document, and for a query nothing matched, as-of printed only its
    header: the reader could not tell an empty answer from a truncated one."""
    before = CliRunner().invoke(app, ["knowledge", "as-of", "0", "--scope", "ops", "--db", db_url])
    assert before.exit_code == 0, before.output
    assert before.stdout.splitlines() == [
        "scope ops as of log position 0",
        "  no documents at that point",
    ]
    search = ["knowledge", "as-of", str(history["v1"]), "--scope", "ops", "--query", "zebra"]
    nothing = CliRunner().invoke(app, [*search, "--db", db_url])
    assert nothing.exit_code == 0, nothing.output
    assert nothing.stdout.splitlines()[-1] == "no passage matches the query"
