"""The headline: delete the entire corpus, replay in a fresh process to the identical request
and citations, then rebuild the corpus from the log alone, equal passage for passage."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect

from loom_knowledge import ExtractiveModel, encode_request
from loom_knowledge.corpus.knowledge_base import drop_corpus, open_knowledge_base
from loom_knowledge.domain.grounding import GroundedRequest
from loom_knowledge.models.answering import answer_from_corpus
from loom_knowledge.tools.demo import (
    FLOW,
    QUESTION,
    corpus_state,
    register_incident_flow,
    replay_in_fresh_process,
    write_source_folder,
)
from loom_runtime import DecisionInputChangedError, FlowContext, Loom, codec

pytestmark = pytest.mark.slow


def _corpus_tables(loom: Loom) -> list[str]:
    """The corpus read models' tables that exist in the log's database (either backend)."""
    with loom.log.engine.connect() as conn:
        return [name for name in inspect(conn).get_table_names() if name.startswith("loom_kb_")]


def test_replay_with_the_corpus_deleted_gives_the_identical_request_and_citations(
    loom: Loom, db_url: str, tmp_path: Path
) -> None:
    """Source folder and every corpus table gone; a fresh process replays identically."""
    register_incident_flow(loom)
    kb = open_knowledge_base(loom, "runbooks")
    folder = tmp_path / "runbooks"
    kb.sync(write_source_folder(folder), source="repo")
    run = loom.run(FLOW, question=QUESTION)
    recorded_request = codec.decode(
        loom.execution(run.execution_id).decisions["model"].input or b"null",
        type=GroundedRequest,
    )
    assert run.output["cited"] and not run.output["ungrounded"]
    assert (
        run.output["request_sha256"] == hashlib.sha256(encode_request(recorded_request)).hexdigest()
    )
    before = corpus_state(loom)

    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    drop_corpus(loom)
    assert _corpus_tables(loom) == []

    replayed = replay_in_fresh_process(db_url, run.execution_id)
    assert replayed["identical"], replayed["divergences"]
    assert replayed["output"] == run.output  # same request bytes (sha256), citations, passages
    assert _corpus_tables(loom) == []  # the replay did not even re-create the corpus tables

    assert corpus_state(loom) == before  # rebuilt from the log alone


def test_a_changed_prompt_is_caught_byte_for_byte(loom: Loom, db_url: str, tmp_path: Path) -> None:
    """Negative control: new instructions change the model request, and the replay says so."""
    register_incident_flow(loom)
    kb = open_knowledge_base(loom, "runbooks")
    kb.sync(write_source_folder(tmp_path / "runbooks"), source="repo")
    run = loom.run(FLOW, question=QUESTION)
    drop_corpus(loom)

    with Loom(db_url) as new_code:
        corpus = open_knowledge_base(new_code, "runbooks")

        @new_code.flow(FLOW)
        def incident_answer(ctx: FlowContext, question: str) -> dict[str, Any]:
            grounded = answer_from_corpus(
                corpus,
                question,
                decide=ctx.decide,
                model=ExtractiveModel(),
                instructions="Answer in French.",
            )
            return {"cited": list(grounded.answer.cited_doc_ids)}

        result = new_code.replay(run.execution_id)
    kinds = {type(d) for d in result.divergences}
    assert DecisionInputChangedError in kinds
    [changed] = [d for d in result.divergences if isinstance(d, DecisionInputChangedError)]
    assert "Answer in French." in changed.diff
