"""KnowledgeBase over a real log: upsert, removal, the passage rules, recorded retrieval, rebuild.

Every test runs on both backends. The corpus is read back RAW wherever a search could hide a
defect (``corpus_tables``): passages straight from the entries table (no manifest join), and the
search index on its own, never joined to the rows, because a search joined back to the rows hides
a stale index row: on SQLite the FTS5 index through ``fts5vocab`` and a rowid-only ``MATCH``, on
PostgreSQL the rows' ``search_vector`` tsvectors through ``unnest`` and ``@@``. Events are counted
with ``loom.log.position``.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from loom_knowledge import (
    Doc,
    DocRecord,
    InvalidPassageIdError,
    KnowledgeBase,
    KnowledgeBaseOptionsError,
    KnowledgeError,
    Passage,
    open_knowledge_base,
    pack_paragraphs,
    parse_passage_id,
)
from loom_knowledge.corpus.keys import corpus_key, retrieve_key
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_memory import MemoryEntry
from loom_runtime import DecisionInputChangedError, FlowContext, Loom
from replay_tests.knowledge.corpus_tables import (
    drop_corpus_tables,
    index_match_count,
    indexed_rows,
    indexed_terms,
    indexed_terms_by_row,
    passage_store,
    read_passages,
    row_terms,
)

SCOPE = "ops"


@pytest.fixture
def kb(loom: Loom) -> KnowledgeBase:
    """A corpus cut into one passage per short paragraph, so documents have several."""
    return open_knowledge_base(loom, SCOPE, chunker=pack_paragraphs(max_chars=40))


def _paragraphs(*words: str) -> str:
    """One ~30-character paragraph per word: each becomes its own passage."""
    return "\n\n".join(f"{word} paragraph filler text" for word in words)


# -- raw reads (corpus_tables reads under the KnowledgeBase, on either backend) ---------------


def _entries(loom: Loom, scope: str = SCOPE) -> list[MemoryEntry]:
    return read_passages(loom.log.engine, scope)


def _entry_ids(loom: Loom, doc_id: str) -> list[str]:
    return [e.id for e in _entries(loom) if isinstance(e.id, str) and e.id.startswith(doc_id)]


def _row_seqs(loom: Loom) -> set[int]:
    with loom.log.engine.connect() as conn:
        return set(conn.scalars(text("SELECT seq FROM loom_kb_entries")))


def _revision_rows(loom: Loom) -> list[tuple[Any, ...]]:
    with loom.log.engine.connect() as conn:
        query = text("SELECT * FROM loom_kb_revisions ORDER BY scope, doc_id, revision")
        return [tuple(row) for row in conn.execute(query)]


def _corpus(loom: Loom, kb: KnowledgeBase) -> tuple[Any, ...]:
    """Everything the corpus holds: manifest, every passage entry, the revision history."""
    return kb.list_docs(), _entries(loom, kb.scope), _revision_rows(loom)


def _write_history(kb: KnowledgeBase) -> None:
    """Revisions, a removal, a re-creation, a '#' id, title and meta: every kind of event."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "volume", "inode"), title="Disk full"))
    kb.put_doc(Doc(id="disk", text=_paragraphs("cleanup"), title="Disk full"))
    kb.put_doc(Doc(id="guide.md#dns", text=_paragraphs("resolver", "ttl"), meta={"team": "net"}))
    kb.put_doc(Doc(id="gone", text=_paragraphs("ephemeral")))
    kb.remove_doc("gone")
    kb.put_doc(Doc(id="gone", text=_paragraphs("returned", "again")))


# -- put_doc ------------------------------------------------------------------------------------


def test_put_doc_returns_the_record_the_manifest_files(kb: KnowledgeBase) -> None:
    """The record put_doc returns (built from its decision) is the manifest's, field for
    field: new, rewritten, unchanged, and re-created after a removal."""
    docs = [
        Doc(id="disk", text=_paragraphs("full", "volume"), title="Disk full"),
        Doc(id="disk", text=_paragraphs("inode")),
        Doc(id="disk", text=_paragraphs("inode")),
    ]
    returned = [kb.put_doc(doc, source="wiki") for doc in docs]
    assert returned[-1] == kb.list_docs()[0]
    kb.remove_doc("disk", source="wiki")
    recreated = kb.put_doc(Doc(id="disk", text=_paragraphs("quota")), source="wiki")
    assert [r.revision for r in [*returned, recreated]] == [1, 2, 2, 3]
    assert recreated == kb.list_docs()[0]
    assert (recreated.passage_count, recreated.source) == (1, "wiki")


def test_reingesting_an_unchanged_document_appends_nothing(loom: Loom, kb: KnowledgeBase) -> None:
    """put_doc of a document identical to the live revision appends no event."""
    doc = Doc(id="disk", text=_paragraphs("full", "volume"), title="Disk full")
    first = kb.put_doc(doc)
    position = loom.log.position
    assert kb.put_doc(doc) == first
    assert loom.log.position == position


def test_reingesting_does_not_duplicate_passages(loom: Loom, kb: KnowledgeBase) -> None:
    """Ingesting the same document twice leaves each passage stored (and found) once."""
    doc = Doc(id="disk", text=_paragraphs("full", "volume"))
    kb.put_doc(doc)
    kb.put_doc(doc)
    assert _entry_ids(loom, "disk") == ["disk#0", "disk#1"]
    assert [(p.doc_id, p.index) for p in kb.search("full")] == [("disk", 0)]


def test_a_revision_s_old_words_stop_retrieving(kb: KnowledgeBase) -> None:
    """After a revision, words only the old revision had match nothing (not merely rank lower)."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("platypus", "volume")))
    kb.put_doc(Doc(id="disk", text=_paragraphs("wombat", "volume")))
    assert kb.search("platypus") == []
    assert [(p.doc_id, p.index, p.revision) for p in kb.search("wombat")] == [("disk", 0, 2)]


def _history_rows_with(loom: Loom, term: str) -> int:
    """Passage rows of ended revisions whose text holds ``term`` (read from the rows)."""
    query = text("SELECT entry FROM loom_kb_entries WHERE valid_to IS NOT NULL")
    with loom.log.engine.connect() as conn:
        return sum(term in entry for entry in conn.scalars(query))


def test_a_superseded_revision_stays_in_the_index_only_as_history(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """Read without the join, the index holds exactly the stored rows; the old revision's rows
    are there as history (ended), never retrieved as current, and found again as of then."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("platypus", "volume", "inode")))
    then = loom.log.position
    kb.put_doc(Doc(id="disk", text=_paragraphs("wombat")))
    assert kb.search("platypus") == []
    assert index_match_count(loom.log.engine, "platypus") == _history_rows_with(loom, "platypus")
    assert _history_rows_with(loom, "platypus") >= 1
    assert index_match_count(loom.log.engine, "wombat") == 1
    assert indexed_rows(loom.log.engine) == _row_seqs(loom) != set()
    assert indexed_terms_by_row(loom.log.engine) == row_terms(loom.log.engine)
    assert [p.revision for p in kb.as_of(then).retrieve("platypus")] == [1]


def test_the_index_probes_see_a_stale_index_row(loom: Loom, kb: KnowledgeBase) -> None:
    """Negative control: an index row for a term no live row has is seen by every index probe."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("wombat")))
    with loom.log.engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # the index is each row's tsvector
            conn.exec_driver_sql(
                "UPDATE loom_kb_entries SET search_vector = search_vector || 'platypus'::tsvector"
            )
        else:  # the external-content FTS5 index is written behind the rows' backs
            conn.exec_driver_sql(
                "INSERT INTO loom_kb_fts(rowid, search_text) VALUES (9999, 'platypus')"
            )
    assert index_match_count(loom.log.engine, "platypus") == 1
    assert "platypus" in indexed_terms(loom.log.engine)
    assert indexed_terms_by_row(loom.log.engine) != row_terms(loom.log.engine)


def test_a_shorter_revision_leaves_no_orphan_passages(loom: Loom, kb: KnowledgeBase) -> None:
    """A revision with fewer passages leaves exactly passage_count entries for the document."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "volume", "inode", "quota")))
    record = kb.put_doc(Doc(id="disk", text=_paragraphs("cleanup")))
    assert record.passage_count == 1
    assert _entry_ids(loom, "disk") == ["disk#0"]
    assert kb.search("inode quota") == []


def test_revision_numbers_keep_counting_after_remove_and_recreate(kb: KnowledgeBase) -> None:
    """Revisions count 1, 2, and a document re-created after removal continues at 3."""
    assert kb.put_doc(Doc(id="disk", text="first")).revision == 1
    assert kb.put_doc(Doc(id="disk", text="second")).revision == 2
    assert kb.remove_doc("disk") is True
    assert kb.put_doc(Doc(id="disk", text="third")).revision == 3
    assert [p.revision for p in kb.search("third")] == [3]


# -- remove_doc ---------------------------------------------------------------------------------


def test_remove_doc_removes_the_record_and_every_passage(loom: Loom, kb: KnowledgeBase) -> None:
    """remove_doc takes the manifest row and every current passage away; the passages remain
    only as history (ended), found as of before the removal."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "volume")))
    then = loom.log.position
    assert kb.remove_doc("disk") is True
    assert (kb.list_docs(), _entries(loom), kb.search("full volume")) == ([], [], [])
    assert index_match_count(loom.log.engine, "full") == _history_rows_with(loom, "full") >= 1
    assert {p.doc_id for p in kb.as_of(then).retrieve("full")} == {"disk"}


def test_remove_doc_is_idempotent(loom: Loom, kb: KnowledgeBase) -> None:
    """A second remove_doc of the same id returns False and appends nothing."""
    kb.put_doc(Doc(id="disk", text="full"))
    assert kb.remove_doc("disk") is True
    position = loom.log.position
    assert kb.remove_doc("disk") is False
    assert loom.log.position == position


# -- open_knowledge_base ------------------------------------------------------------------------


def test_open_returns_one_knowledge_base_per_loom_and_scope(loom: Loom) -> None:
    """Opening a scope twice returns the same object; another scope is another object."""
    runbooks = open_knowledge_base(loom, "runbooks")
    assert open_knowledge_base(loom, "runbooks") is runbooks
    assert open_knowledge_base(loom, "runbooks", chunker=pack_paragraphs()) is runbooks
    assert open_knowledge_base(loom, "wiki") is not runbooks


def test_each_loom_has_its_own_scopes_and_index_closed_with_it(db_url: str) -> None:
    """Two Looms on one database share no open scope or index; closing one forgets its own."""
    with Loom(db_url) as first, Loom(db_url) as second:
        runbooks = open_knowledge_base(first, "runbooks")
        assert open_knowledge_base(second, "runbooks") is not runbooks
        assert corpus_index(first) is not corpus_index(second)
        runbooks.put_doc(Doc(id="disk", text="full"))
        assert [d.id for d in open_knowledge_base(second, "runbooks").list_docs()] == ["disk"]
    assert first.services.peek("loom_knowledge.corpus.corpus_index") is None
    assert first.services.peek("loom_knowledge.open_scopes") is None


@pytest.mark.parametrize(
    "options",
    [{"chunker": pack_paragraphs(max_chars=200)}, {"max_removal_fraction": 0.9}],
    ids=["chunker", "max_removal_fraction"],
)
def test_opening_an_open_scope_with_other_options_is_refused(
    loom: Loom, options: dict[str, Any]
) -> None:
    """Opening an open scope again with different options raises KnowledgeBaseOptionsError."""
    open_knowledge_base(loom, "runbooks")
    with pytest.raises(KnowledgeBaseOptionsError, match="runbooks"):
        open_knowledge_base(loom, "runbooks", **options)


# -- what a passage puts in the index (seed D5) ------------------------------------------------


def test_a_document_id_is_not_searchable_text(loom: Loom, kb: KnowledgeBase) -> None:
    """Searching a document's id matches nothing, and the id is no term of the index."""
    kb.put_doc(Doc(id="zanzibar", text=_paragraphs("full", "volume")))
    assert kb.search("zanzibar") == []
    assert "zanzibar" not in indexed_terms(loom.log.engine)


def test_a_passage_index_is_not_searchable_text(loom: Loom, kb: KnowledgeBase) -> None:
    """Searching "0" matches nothing although every document has a passage 0."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "volume")))
    kb.put_doc(Doc(id="dns", text=_paragraphs("resolver")))
    assert kb.search("0") == []
    assert "0" not in indexed_terms(loom.log.engine)


def test_title_words_are_searchable(kb: KnowledgeBase) -> None:
    """A word only in the title retrieves the document's passages."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "volume"), title="Saturated storage"))
    assert [(p.doc_id, p.index) for p in kb.search("saturated")] == [("disk", 0), ("disk", 1)]


def test_meta_values_are_searchable(kb: KnowledgeBase) -> None:
    """A word only in a meta value retrieves the document's passages."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full"), meta={"team": "payments"}))
    found = kb.search("payments")
    assert [(p.doc_id, p.meta) for p in found] == [("disk", {"team": "payments"})]


def test_a_doc_id_containing_hash_works_end_to_end(loom: Loom, kb: KnowledgeBase) -> None:
    """A doc id with '#' is stored, searched, parsed from the right, revised and removed."""
    doc_id = "guide.md#install"
    kb.put_doc(Doc(id=doc_id, text=_paragraphs("download", "configure")))
    assert [parse_passage_id(e.id) for e in _entries(loom) if isinstance(e.id, str)] == [
        (doc_id, 0),
        (doc_id, 1),
    ]
    assert [(p.doc_id, p.index) for p in kb.search("configure")] == [(doc_id, 1)]
    kb.put_doc(Doc(id=doc_id, text=_paragraphs("upgrade")))
    assert [e.id for e in _entries(loom)] == [f"{doc_id}#0"]
    assert kb.remove_doc(doc_id) is True
    assert _entries(loom) == []


@pytest.mark.parametrize("entry_id", ["no-separator", "disk#01", "disk#x", "#0"])
def test_an_entry_with_an_unparseable_passage_id_is_refused_on_read(
    loom: Loom, kb: KnowledgeBase, entry_id: str
) -> None:
    """A corpus entry whose id is not '<doc_id>#<index>' is refused: InvalidPassageIdError."""
    kb.put_doc(Doc(id="disk", text="full"))
    passage_store(loom.log.engine).append(
        corpus_key(SCOPE), [MemoryEntry(id=entry_id, content={"text": "zebra"})]
    )
    with pytest.raises(InvalidPassageIdError) as raised:
        kb.search("zebra")
    assert raised.value.entry_id == entry_id


def test_an_entry_whose_document_is_not_listed_is_refused_on_read(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """A passage entry no manifest row counts is refused with a KnowledgeError on read."""
    kb.put_doc(Doc(id="disk", text="full"))
    passage_store(loom.log.engine).append(
        corpus_key(SCOPE), [MemoryEntry(id="ghost#0", content={"text": "zebra"})]
    )
    with pytest.raises(KnowledgeError):
        kb.search("zebra")


# -- recorded retrieval -------------------------------------------------------------------------


def _register_ask(loom: Loom, kb: KnowledgeBase, template: list[str]) -> None:
    """A flow retrieving for ``template[0]`` (a list, so a test can change the code's query)."""

    @loom.flow()
    def ask(ctx: FlowContext, topic: str) -> list[Passage]:
        return kb.retrieve(template[0].format(topic), decide=ctx.decide)


def test_retrieval_replays_identically_after_the_corpus_tables_are_dropped(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """A recorded retrieval replays to the same passages with every corpus table gone."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "volume"), title="Disk", meta={"s": 2}))
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "quota"), title="Disk", meta={"s": 2}))
    _register_ask(loom, kb, ["{} quota"])
    run = loom.run("ask", topic="full")
    assert sorted((p.doc_id, p.index, p.text, p.revision) for p in run.output) == [
        ("disk", 0, "full paragraph filler text", 2),
        ("disk", 1, "quota paragraph filler text", 2),
    ]
    drop_corpus_tables(loom.log.engine)
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
    assert replayed.output == run.output
    assert all(isinstance(p, Passage) and p.title == "Disk" for p in replayed.output)


def test_a_changed_query_is_a_changed_input_with_a_diff(loom: Loom, kb: KnowledgeBase) -> None:
    """Replaying a flow whose query changed reports DecisionInputChangedError showing both."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full")))
    template = ["restart {}"]
    _register_ask(loom, kb, template)
    run = loom.run("ask", topic="disk")
    template[0] = "reboot {}"
    replayed = loom.replay(run.execution_id)
    [divergence] = replayed.divergences
    assert isinstance(divergence, DecisionInputChangedError)
    assert divergence.key == retrieve_key(SCOPE)
    assert "restart disk" in divergence.diff
    assert "reboot disk" in divergence.diff


def test_two_retrievals_in_one_flow_replay_in_program_order(loom: Loom, kb: KnowledgeBase) -> None:
    """Two retrievals of one scope in one flow get distinct keys and replay identically."""
    kb.put_doc(Doc(id="disk", text=_paragraphs("full", "quota")))

    @loom.flow("ask twice")
    def ask_twice(ctx: FlowContext) -> list[list[Passage]]:
        return [kb.retrieve(q, decide=ctx.decide, limit=1) for q in ("full", "quota")]

    run = loom.run("ask twice")
    assert [[p.index for p in hits] for hits in run.output] == [[0], [1]]
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()


def test_retrieve_requires_decide(kb: KnowledgeBase) -> None:
    """retrieve without decide is a TypeError: an unrecorded retrieval cannot be replayed."""
    retrieve: Any = kb.retrieve
    with pytest.raises(TypeError, match="decide"):
        retrieve("full")


# -- rebuild ------------------------------------------------------------------------------------


def test_a_fresh_open_rebuilds_dropped_tables_equal_to_the_original(
    loom: Loom, kb: KnowledgeBase, db_url: str
) -> None:
    """With every corpus table and its tracking row dropped, a fresh open rebuilds it exactly."""
    _write_history(kb)
    original = _corpus(loom, kb)
    drop_corpus_tables(loom.log.engine)
    with loom.log.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM loom_tracking WHERE projection = 'knowledge'")
    with Loom(db_url) as fresh:
        rebuilt = open_knowledge_base(fresh, SCOPE, chunker=pack_paragraphs(max_chars=40))
        assert _corpus(fresh, rebuilt) == original


def test_a_fresh_open_rebuilds_when_only_the_corpus_tables_were_dropped(
    loom: Loom, kb: KnowledgeBase, db_url: str
) -> None:
    """With every loom_kb_* table dropped (tracking untouched), a fresh open rebuilds it exactly."""
    _write_history(kb)
    original = _corpus(loom, kb)
    drop_corpus_tables(loom.log.engine)
    with Loom(db_url) as fresh:
        rebuilt = open_knowledge_base(fresh, SCOPE, chunker=pack_paragraphs(max_chars=40))
        assert _corpus(fresh, rebuilt) == original


def test_kb_rebuild_restores_a_wiped_corpus_equal_to_the_original(
    loom: Loom, kb: KnowledgeBase
) -> None:
    """kb.rebuild() after the corpus rows were deleted reproduces manifest, passages, history."""
    _write_history(kb)
    original = _corpus(loom, kb)
    with loom.log.engine.begin() as conn:
        for table in ("loom_kb_entries", "loom_kb_documents", "loom_kb_revisions"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    kb.rebuild()
    assert _corpus(loom, kb) == original
    assert indexed_rows(loom.log.engine) == _row_seqs(loom)
    assert indexed_terms_by_row(loom.log.engine) == row_terms(loom.log.engine)


def test_rebuild_reproduces_the_passages_as_cut_even_if_the_chunker_changed(
    loom: Loom, kb: KnowledgeBase, db_url: str
) -> None:
    """A rebuild under another chunker gives the recorded passages, not a re-cut of the text."""
    _write_history(kb)
    original = _corpus(loom, kb)
    with Loom(db_url) as fresh:
        recut = open_knowledge_base(fresh, SCOPE, chunker=pack_paragraphs(max_chars=10))
        recut.rebuild()
        assert _corpus(fresh, recut) == original


def test_list_docs_reports_each_live_document_once(kb: KnowledgeBase) -> None:
    """After revisions, a removal and a re-creation, list_docs holds each live id once."""
    _write_history(kb)
    listed = kb.list_docs()
    assert [(r.id, r.revision, r.passage_count) for r in listed] == [
        ("disk", 2, 1),
        ("gone", 2, 2),
        ("guide.md#dns", 1, 2),
    ]
    assert all(isinstance(r, DocRecord) and r.source is None for r in listed)
