"""Erasing a memory key erases its entries' recorded embeddings (ADR 0061), SQLite and PostgreSQL.

The claims: with encryption on, an event-sourced vector memory records a key's vectors under
the key (digest keyed, vector sealed under its data key, ``SubjectEmbeddingsRecorded``), so
after the key is erased (1) neither a vector nor the plain digest of its texts is left in the
raw database files, (2) vector search never returns its entries, (3) a rebuild from position 0
agrees with the live store, and (4) other keys' vectors and search are untouched. A key
written in clear before encryption was switched on keeps finding its old entries. Each check
is shown able to fail: the same raw check finds what a clear log, or a projection that does
not forget, leaves behind.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from loom_memory import (
    EmbeddingTable,
    EventSourcedVectorMemory,
    HashingEmbedder,
    MemoryEntry,
    PostgresVectorStore,
    SqliteVectorStore,
)
from loom_memory.conformance import entry
from loom_memory.embedding_events import EmbeddingsRecorded, SubjectEmbeddingsRecorded
from loom_memory.embedding_table import embedding_texts
from loom_memory.erasure import memory_subject
from loom_runtime import Loom
from replay_tests.knowledge.test_document_erasure import KEY, _raw
from replay_tests.knowledge.test_document_erasure_embeddings import table_rows, text_traces

EMBEDDER = HashingEmbedder(dimension=64)
FLOOR = 0.1
ALICE = memory_subject("memory", "alice")


def _open(loom: Loom) -> EventSourcedVectorMemory:
    engine = loom.log.engine
    store_class = PostgresVectorStore if engine.dialect.name == "postgresql" else SqliteVectorStore
    return EventSourcedVectorMemory(
        loom, store=store_class(engine, embedder=EMBEDDER, min_score=FLOOR)
    )


def _alice(secret: str) -> list[MemoryEntry]:
    return [
        entry(f"Alice's address is {secret} near the harbour."),
        entry("Alice prefers tea in the afternoon."),
    ]


def _bob() -> list[MemoryEntry]:
    return [entry("Bob runs the backups nightly."), entry("Bob is on call on Mondays.")]


def _rows(memory: EventSourcedVectorMemory) -> list[tuple[object, ...]]:
    """Every stored vector row of the model, in both tables, sorted."""
    return table_rows(memory._vector_store.vectors)


def _traces(entries: list[MemoryEntry], *, dumped: bool = True) -> list[bytes]:
    """What would betray the entries' texts in raw bytes (the document twin's traces)."""
    return text_traces(list(embedding_texts(entries).items()), dumped=dumped)


def _answers(memory: EventSourcedVectorMemory) -> list[list[tuple[object, float]]]:
    queries = [("bob", "backups nightly"), ("bob", "Mondays call"), ("alice", "harbour tea")]
    found = []
    for key, query in queries:
        hits = memory.search_scored(key, query, limit=5)
        found.append([(hit.content, round(score, 6)) for hit, score in hits])
    return found


def test_an_erased_keys_vectors_leave_the_database_and_a_rebuild_agrees(db_url: str) -> None:
    secret = f"SECRET-{uuid4().hex}"
    alice = _alice(secret)
    with Loom(db_url, encryption=KEY) as loom:
        memory = _open(loom)
        memory.append("alice", alice)
        memory.append("bob", _bob())
        assert memory.search_scored("alice", f"Alice harbour address {secret}")
        events = [
            loom.log.decode(r)
            for r in loom.log.notifications(topics=[SubjectEmbeddingsRecorded.TOPIC])
        ]
        assert {event.subject for event in events} == {ALICE, memory_subject("memory", "bob")}
        assert not list(loom.log.notifications(topics=[EmbeddingsRecorded.TOPIC]))
        kept_rows = [row for row in _rows(memory) if ALICE not in row]
        assert len(kept_rows) < len(_rows(memory))  # the key's vectors were stored
        before = _answers(memory)

        loom.erase(memory_key="memory:alice", reason="request", by="dpo")
        memory.catch_up()

        # (2) Never returned, by a query text or by its own vector.
        query = f"Alice's address is {secret} near the harbour."
        assert memory.search_scored("alice", query, min_score=-1.0) == []
        vector = EMBEDDER.embed([query])[0]
        assert memory.search_by_vector("alice", vector, min_score=-1.0) == []
        # (4) Other keys' vectors and answers are untouched.
        live = _rows(memory)
        assert live == kept_rows
        assert _answers(memory)[:2] == before[:2]
        assert _answers(memory)[2] == []
        # (3) A rebuild from position 0 (the key is gone, the forget event stays) agrees.
        memory.rebuild()
        assert _rows(memory) == live
        assert _answers(memory)[:2] == before[:2]
        assert memory.search_scored("alice", query, min_score=-1.0) == []

    # (1) Neither a vector nor a plain digest of its texts is left in the raw files.
    raw = _raw(db_url)
    assert [trace for trace in _traces(alice) if trace in raw] == []
    assert raw.count(secret.encode()) == 0


def test_a_key_written_in_clear_before_encryption_keeps_its_old_vectors(tmp_path: Path) -> None:
    """Entries stored before encryption was switched on keep their plain vectors; the key's
    later writes are recorded under its data key; search and a rebuild find both."""
    url = f"sqlite:///{tmp_path / 'switched.db'}"
    old, new = entry("Alice planted roses in spring."), entry("Alice sealed tulips in autumn.")
    with Loom(url) as loom:
        _open(loom).append("alice", [old])
    with Loom(url, encryption=KEY) as loom:
        memory = _open(loom)
        memory.append("alice", [new])
        sealed = [
            loom.log.decode(r)
            for r in loom.log.notifications(topics=[SubjectEmbeddingsRecorded.TOPIC])
        ]
        assert [event.subject for event in sealed] == [ALICE]
        found = [hit.content for hit, _ in memory.search_scored("alice", "Alice", min_score=-1.0)]
        assert sorted(found) == sorted([old.content, new.content])
        rows = _rows(memory)
        memory.rebuild()
        assert _rows(memory) == rows
        again = [hit.content for hit, _ in memory.search_scored("alice", "Alice", min_score=-1.0)]
        assert again == found


def test_without_encryption_the_raw_check_finds_the_vectors(tmp_path: Path) -> None:
    """Negative control: encryption off, the log and table hold plain digests and clear
    vectors as before (one table), and the raw check above finds them: it can fail."""
    url = f"sqlite:///{tmp_path / 'clear.db'}"
    alice = _alice("CLEAR")
    with Loom(url) as loom:
        memory = _open(loom)
        memory.append("alice", alice)
        assert memory._vector_store.vectors.subject_table is None
        assert not list(loom.log.notifications(topics=[SubjectEmbeddingsRecorded.TOPIC]))
        events = [
            loom.log.decode(r) for r in loom.log.notifications(topics=[EmbeddingsRecorded.TOPIC])
        ]
        assert {d for event in events for d in event.digests} == set(embedding_texts(alice))
    raw = _raw(url)
    assert all(trace in raw for trace in _traces(alice, dumped=False))


def test_a_projection_that_does_not_forget_fails_the_checks(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: with the forget event's delete switched off, the raw file still holds
    the erased key's vectors, and a rebuild (which skips what it cannot open) disagrees."""
    monkeypatch.setattr(EmbeddingTable, "forget", lambda self, subjects, *, conn: None)
    alice = _alice("kept-by-a-bug")
    with Loom(sqlite_url, encryption=KEY) as loom:
        memory = _open(loom)
        memory.append("alice", alice)
        memory.append("bob", _bob())
        loom.erase(memory_key="memory:alice", reason="r", by="dpo")
        memory.catch_up()
        live = _rows(memory)
        raw = _raw(sqlite_url)
        assert [trace for trace in _traces(alice) if trace in raw] != []
        memory.rebuild()
        assert _rows(memory) != live
