"""A document revision's end and append are counted by position together (ADR 0059, amended).

The corpus projection holds a revision's end with the page's inserts and writes them in one
``append_at_batch``, so on SQLite the terms the old and new passages share cancel before any
upsert: a revision that changes one word writes that word's counts at its position alone.
Counted apart (the end by the per-row trigger), every shared term left a zero bucket there.
The as-of answers stay those of a search over the rows.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.keys import corpus_key
from loom_runtime import Loom
from replay_tests.knowledge.corpus_tables import passage_store
from replay_tests.memory.test_position_counts import _refilled, _tables

TEXT = "Rotate the disk logs weekly.\n\nThe worker pool stalls when the volume fills."


def test_a_revision_writes_only_the_terms_it_changes(tmp_path: Path) -> None:
    """After revisions changing one word, through put_doc and through sync, the positions
    of the revisions hold the changed words' counts alone (no zero bucket for the shared
    ones), the kept tables equal a refill, and as-of searches see each revision."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.put_doc(Doc(id="a", text=TEXT), source="s")
        first = loom.log.position
        kb.put_doc(Doc(id="a", text=TEXT.replace("weekly", "daily")), source="s")
        kb.sync([Doc(id="a", text=TEXT.replace("weekly", "hourly"))], source="s")
        assert [p.doc_id for p in kb.as_of(first).search("weekly")] == ["a"]
        assert not kb.search("weekly") and not kb.search("daily")
        assert [p.doc_id for p in kb.search("hourly")] == ["a"]
    engine = create_engine(url)
    try:
        store = passage_store(engine)
        assert _tables(store) == _refilled(store)
        _, terms = _tables(store, zeros=True)
        key = corpus_key("ops")
        revised = [row for row in terms if row[0] == key and row[1] == 0 and row[3] > first]
        assert sorted((term, df) for _, _, term, _, df in revised) == [
            ("daily", -1),
            ("daily", 1),
            ("hourly", 1),
            ("weekly", -1),
        ]
    finally:
        engine.dispose()
