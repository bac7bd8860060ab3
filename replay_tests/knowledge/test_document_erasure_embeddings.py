"""Erasing a document erases its recorded embeddings (ADR 0061), on SQLite and PostgreSQL.

The claims: with encryption on, a sealed document's passage vectors are recorded under the
document (digest keyed, vector sealed under its data key), so after the document is erased
(1) neither a vector nor the plain digest of its texts is left in the raw database files,
(2) vector and hybrid retrieval never return it, (3) a rebuild of the vectors from position 0
agrees with the live store, (4) other documents' vectors and retrieval are untouched, and
(5) an execution that retrieved it through vectors before the erasure replays as recorded, as
a lexical one does (its decision is its own, sealed under its own key). Without encryption the
log and the table hold what they held before, and one text is embedded once across documents.
Each check is shown able to fail: the same checks find what a clear log or a projection that
does not forget leaves behind.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import msgspec
import pytest
from sqlalchemy import inspect, select

from loom_knowledge import Doc, KnowledgeBase, Passage, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_knowledge.corpus.hybrid import passage_text
from loom_knowledge.corpus.knowledge_base import drop_corpus
from loom_memory import (
    EmbeddingProjection,
    EmbeddingTable,
    HashingEmbedder,
    embedding_projections,
    text_digest,
)
from loom_memory.embedding_events import (
    EmbeddingsRecorded,
    SubjectEmbeddingsRecorded,
    embeddings_stream,
    seal_vector,
)
from loom_memory.embedding_table import pack_vector, unpack_vector
from loom_runtime import FlowContext, Loom, catch_up, keyring_for, rebuild
from replay_tests.knowledge.test_document_erasure import KEY, SCOPE, _raw

EMBEDDER = HashingEmbedder(dimension=64)
FLOOR = 0.1
ALICE = "people/alice"


def _docs(secret: str) -> list[Doc]:
    return [
        Doc(id=ALICE, title="Alice", text=f"Alice's address is {secret} near the harbour."),
        Doc(id="ops/backups", title="Backups", text="Backups run nightly at two."),
        Doc(id="ops/oncall", title="On-call", text="The on-call rota changes on Mondays."),
    ]


def _open(loom: Loom) -> KnowledgeBase:
    return open_knowledge_base(loom, SCOPE, embedder=EMBEDDER, min_score=FLOOR)


def _projection(loom: Loom) -> EmbeddingProjection:
    [projection] = [p for p in embedding_projections(loom.log) if p.table.model == EMBEDDER.model]
    return projection


def table_rows(table: EmbeddingTable) -> list[tuple[object, ...]]:
    """Every stored vector row of the model, in both tables, sorted."""
    rows: list[tuple[object, ...]] = []
    with table.engine.connect() as conn:
        for stored in (table.table, table.subject_table):
            if stored is not None:
                found = conn.execute(select(stored).where(stored.c.model == table.model))
                rows += [(stored.name, *row) for row in found]
    return sorted(rows, key=repr)


def _traces(passages: list[Passage], *, dumped: bool = True) -> list[bytes]:
    """What would betray the passages' texts in raw bytes (see :func:`text_traces`)."""
    texts = (passage_text(passage) for passage in passages)
    return text_traces([(text_digest(text), text) for text in texts], dumped=dumped)


def text_traces(texts: list[tuple[str, str]], *, dumped: bool = True) -> list[bytes]:
    """What would betray each ``(digest, text)`` in raw bytes: its plain digest, its vector
    as the table stores it (packed; with ``dumped``, also as hex, the form ``pg_dump``
    prints) and as a clear event holds it (float32-exact JSON numbers). Shared with the
    memory-key twin."""
    traces = []
    for digest, text in texts:
        packed = pack_vector(EMBEDDER.embed([text])[0])
        as_json = msgspec.json.encode(unpack_vector(packed))[1:200]
        traces += [digest.encode(), packed, as_json]
        traces += [packed.hex().encode()] if dumped else []
    return traces


def _answers(kb: KnowledgeBase) -> list[list[tuple[str, int]]]:
    queries = ["backups nightly", "on-call rota Mondays", "harbour address"]
    return [
        [(p.doc_id, p.index) for p in kb.search(query, mode=mode, limit=5)]
        for query in queries
        for mode in ("vector", "hybrid")
    ]


def test_an_erased_documents_vectors_leave_the_database_and_a_rebuild_agrees(
    db_url: str,
) -> None:
    secret = f"SECRET-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom:
        kb = _open(loom)
        kb.sync(_docs(secret))
        at = loom.log.position
        found = kb.search(f"Alice harbour {secret}", mode="vector")
        assert ALICE in {p.doc_id for p in found}
        alice = [p for p in kb.passages() if p.doc_id == ALICE]
        assert alice
        table = _projection(loom).table
        subject = document_subject(SCOPE, ALICE)
        kept_rows = [row for row in table_rows(table) if subject not in row]
        assert len(kept_rows) < len(table_rows(table))  # the document's vectors were stored
        recorded = loom.log.notifications(topics=[SubjectEmbeddingsRecorded.TOPIC])
        assert {loom.log.decode(r).subject for r in recorded} == {
            document_subject(SCOPE, doc.id) for doc in _docs(secret)
        }
        assert not list(loom.log.notifications(topics=[EmbeddingsRecorded.TOPIC]))
        before = _answers(kb)

        loom.erase(document=f"{SCOPE}:{ALICE}", reason="request", by="dpo")

        # (2) Never returned, now or as of a position before the erasure. The query holds no
        # random secret: hashed into 64 coordinates, one pushed the other documents below
        # the floor about once in a hundred runs, and an empty answer proves nothing.
        query = "Alice harbour address"
        for mode in ("vector", "hybrid"):
            now = kb.search(query, mode=mode, limit=10)
            then = kb.as_of(at).search(query, mode=mode, limit=10)
            assert now and all(p.doc_id != ALICE for p in now)
            assert then and all(p.doc_id != ALICE for p in then)
        # (4) Other documents' vectors and answers are untouched.
        live = table_rows(table)
        assert live == kept_rows
        assert [[hit for hit in answer if hit[0] != ALICE] for answer in before] == _answers(kb)
        # (3) A rebuild from position 0 (the key is gone, the forget event stays) agrees.
        rebuild(loom.log, _projection(loom))
        assert table_rows(table) == live
        drop_corpus(loom)  # the corpus and its vectors rebuilt on the next read
        assert _answers(kb) == _answers(_open(loom))
        catch_up(loom.log, _projection(loom))
        assert table_rows(table) == live

    # (1) Neither a vector nor a plain digest of its texts is left in the raw files.
    raw = _raw(db_url)
    assert [trace for trace in _traces(alice) if trace in raw] == []
    assert raw.count(secret.encode()) == 0


def test_an_execution_that_retrieved_through_vectors_replays_after_the_erasure(
    db_url: str,
) -> None:
    """As a lexical retrieval does: the decision (the query's vector and the passages) is
    the execution's own, sealed under its key; a new run no longer finds the document."""
    with Loom(db_url, encryption=KEY) as loom:
        kb = _open(loom)
        kb.sync(_docs("private-detail"))

        @loom.flow("ask")
        def ask(ctx: FlowContext, question: str) -> list[str]:
            found: list[Passage] = kb.retrieve(question, decide=ctx.decide, mode="hybrid")
            return [p.doc_id for p in found]

        run = loom.run("ask", question="Alice harbour address")
        assert ALICE in run.output
        loom.erase(document=f"{SCOPE}:{ALICE}", reason="r", by="dpo")
        assert loom.replay(run.execution_id).identical
        assert ALICE not in loom.run("ask", question="Alice harbour address").output


def test_a_vector_sealed_with_a_key_destroyed_elsewhere_is_never_projected(
    sqlite_url: str,
) -> None:
    """A write racing the erasure (sealed under a key this process cached, appended after
    another process destroyed it) is skipped live and by a rebuild."""
    with Loom(sqlite_url, encryption=KEY) as loom:
        kb = _open(loom)
        kb.sync(_docs("raced"))
        kb.search("harbour", mode="vector")
        subject = document_subject(SCOPE, ALICE)
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        cached = keyring.key(subject)
        with Loom(sqlite_url, encryption=KEY) as other:
            other.erase(document=f"{SCOPE}:{ALICE}", reason="r", by="dpo")
        projection = _projection(loom)
        catch_up(loom.log, projection)
        rows_after_erasure = table_rows(projection.table)
        assert rows_after_erasure and all(subject not in row for row in rows_after_erasure)
        text = "a late passage of Alice"
        digest = EmbeddingTable.address(text, key=cached)
        packed = pack_vector(EMBEDDER.embed([text])[0])
        late = seal_vector(cached, subject, EMBEDDER.model, digest, packed)
        fields = {"model": EMBEDDER.model, "subject": subject, "digests": [digest]}
        loom.log.append_replanned(
            embeddings_stream(EMBEDDER.model),
            lambda _version: ([(SubjectEmbeddingsRecorded, {**fields, "vectors": [late]})], None),
            what="a raced vector",
        )
        catch_up(loom.log, projection)
        assert table_rows(projection.table) == rows_after_erasure
        rebuild(loom.log, projection)
        assert table_rows(projection.table) == rows_after_erasure


def test_without_encryption_vectors_are_recorded_in_clear_once_per_text(tmp_path: Path) -> None:
    """Encryption off: plain digests and vectors, one table, one embedding per distinct text
    across documents. The raw checks above find all of it here: they can fail."""
    url = f"sqlite:///{tmp_path / 'clear.db'}"
    twin = Doc(id="people/bob", title="Alice", text=_docs("CLEAR")[0].text)
    with Loom(url) as loom:
        kb = _open(loom)
        kb.sync([*_docs("CLEAR"), twin])
        passages = kb.passages()
        distinct = {passage_text(p) for p in passages}
        kb.search("harbour", mode="vector")
        table = _projection(loom).table
        assert table.subject_table is None
        assert not inspect(loom.log.engine).has_table("loom_kb_subject_embeddings")
        assert len(table_rows(table)) == len(distinct) < len(passages)  # the twin embedded once
        events = [
            loom.log.decode(r) for r in loom.log.notifications(topics=[EmbeddingsRecorded.TOPIC])
        ]
        digests = {d for event in events for d in event.digests}
        assert digests == {text_digest(text) for text in distinct}
        alice = [p for p in passages if p.doc_id == ALICE]
    raw = _raw(url)
    assert all(trace in raw for trace in _traces(alice, dumped=False))


def test_with_encryption_the_same_text_is_embedded_once_per_document(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    twin = Doc(id="people/bob", title="Alice", text=_docs("SEALED")[0].text)
    with Loom(url, encryption=KEY) as loom:
        kb = _open(loom)
        kb.sync([*_docs("SEALED"), twin])
        kb.search("harbour", mode="vector")
        passages = kb.passages()
        assert len(table_rows(_projection(loom).table)) == len(passages)


def test_a_projection_that_does_not_forget_fails_the_checks(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: with the forget event's delete switched off, the raw file still
    holds the erased document's vectors, and a rebuild (which skips what it cannot open)
    disagrees with the live store."""
    monkeypatch.setattr(EmbeddingTable, "forget", lambda self, subjects, *, conn: None)
    with Loom(sqlite_url, encryption=KEY) as loom:
        kb = _open(loom)
        kb.sync(_docs("kept-by-a-bug"))
        kb.search("harbour", mode="vector")
        alice = [p for p in kb.passages() if p.doc_id == ALICE]
        loom.erase(document=f"{SCOPE}:{ALICE}", reason="r", by="dpo")
        projection = _projection(loom)
        catch_up(loom.log, projection)
        live = table_rows(projection.table)
        raw = _raw(sqlite_url)
        assert [trace for trace in _traces(alice) if trace in raw] != []
        rebuild(loom.log, projection)
        assert table_rows(projection.table) != live
