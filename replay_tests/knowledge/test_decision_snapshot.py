"""A write checks that the index has caught up in the snapshot it decides on.

A write must decide on an index at least as far as the log it read. It used to bring the index
up to date first (a read transaction for the tracked position, then the decision's own); the
position is now read in the decision's transaction, and only an index found behind is caught
up before deciding again (ADR 0044, amended 2026-12-02).
"""

from __future__ import annotations

import pytest

from loom_knowledge import Doc, SourceConflictError, open_knowledge_base
from loom_knowledge.corpus.knowledge_base import drop_corpus
from loom_runtime import Loom
from replay_tests.knowledge.test_decision_reads import BEGIN, _second_put_doc


def test_a_write_into_a_caught_up_index_begins_with_its_decision(
    loom: Loom, trace: list[str]
) -> None:
    """The position check and the manifest read of a put_doc share its first transaction."""
    manifest, _ = _second_put_doc(loom, trace)
    assert trace[:manifest].count(BEGIN) == 1
    assert "loom_tracking" in " ".join(trace[:manifest])  # the position is checked before it


def test_a_write_into_an_index_behind_the_log_decides_on_it_caught_up(loom: Loom) -> None:
    """An index behind the log (here rebuilt from nothing) is caught up before the decision:
    the unchanged document writes nothing, another source is refused."""
    kb = open_knowledge_base(loom, "ops")
    kb.put_doc(Doc(id="a", text="one"), source="s1")
    drop_corpus(loom)
    head = loom.log.position

    record = kb.put_doc(Doc(id="a", text="one"), source="s1")

    assert (record.revision, loom.log.position) == (1, head)
    with pytest.raises(SourceConflictError):
        kb.put_doc(Doc(id="a", text="two"), source="s2")
    assert loom.log.position == head
