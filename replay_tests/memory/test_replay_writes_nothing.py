"""A replay appends nothing (ADR 0002), memory writes of the replayed flow's body included.

A memory review found a flow that remembers and then recalls (the chat-agent pattern: the
recall recorded with ``decide=``, the write made in the body) writing its memory again on
every ``loom.replay``: each replay added the entry once more, and still said identical; a
recall replayed live (``live={"memory"}``) appended its tier's eviction too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from loom_memory import (
    EventSourcedMemory,
    EventSourcedVectorMemory,
    MemoryEntry,
    PostgresVectorStore,
    SqliteVectorStore,
    TieredMemory,
)
from loom_memory.tiers import Tier
from loom_runtime import FlowContext, Loom
from replay_tests.embedders import CountingEmbedder


def test_a_replay_does_not_write_the_flow_s_memory_again(loom: Loom) -> None:
    tiers = TieredMemory(EventSourcedMemory(loom))

    @loom.flow("chat")
    def chat(ctx: FlowContext, user: str, msg: str) -> list[str]:
        tiers.remember("episodic", user, [MemoryEntry(content=msg, id=ctx.uuid().hex)])
        hits = tiers.recall_relevant("episodic", user, msg, decide=ctx.decide)
        return [str(hit.content) for hit in hits]

    run = loom.run("chat", user="u1", msg="deploy with the blue button")
    assert run.output == ["deploy with the blue button"]
    position = loom.log.position
    for _ in range(2):
        assert loom.replay(run.execution_id).identical
    assert loom.log.position == position
    assert len(tiers.read("episodic", "u1")) == 1


def test_a_recall_replayed_live_evicts_nothing_into_the_log(loom: Loom) -> None:
    """``live={"memory"}`` computes a recorded recall again; the tier's expiry it runs is a
    write, and a replay appends nothing."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    tiers = TieredMemory(
        EventSourcedMemory(loom),
        tiers=[Tier(name="working", ttl=timedelta(hours=1))],
        clock=lambda: now[0],
    )
    tiers.remember("working", "u1", [MemoryEntry(content="old note", timestamp=now[0])])

    @loom.flow("chat")
    def chat(ctx: FlowContext) -> list[str]:
        return [str(entry.content) for entry in tiers.recall("working", "u1", 5, decide=ctx.decide)]

    run = loom.run("chat")
    assert run.output == ["old note"]
    now[0] += timedelta(hours=2)  # expired now: a live recall drops it
    position = loom.log.position
    loom.replay(run.execution_id, live={"memory"})
    assert loom.log.position == position


def test_a_bundle_or_an_imported_execution_still_makes_its_memory_writes(
    loom: Loom, tmp_path: Path
) -> None:
    """Left out only where the log holds them: a bundle replayed on another log (a CI run),
    or an execution imported from one, never wrote its memory there, and a flow reading back
    what it wrote (unrecorded) diverged once its write was left out (a regression review)."""

    def note_app(url: str) -> Loom:
        other = Loom(url)
        memory = EventSourcedMemory(other)

        @other.flow("note")
        def note(ctx: FlowContext, text: str) -> list[str]:
            memory.append("u1", [MemoryEntry(content=text, id=ctx.uuid().hex)])
            return [str(entry.content) for entry in memory.read("u1")]

        return other

    with note_app(f"sqlite:///{tmp_path / 'recorded.db'}") as recording:
        run = recording.run("note", text="deploy with the blue button")
        bundle = recording.export(run.execution_id, tmp_path / "note.json")
        assert recording.replay(run.execution_id).identical  # its own log: left out
    with note_app(f"sqlite:///{tmp_path / 'ci.db'}") as ci:
        assert ci.replay_bundle(bundle).identical
    with note_app(f"sqlite:///{tmp_path / 'imported.db'}") as other:
        other.import_bundle(bundle)
        assert other.replay(run.execution_id).identical


def test_a_vector_memory_s_replayed_write_records_no_vector(loom: Loom) -> None:
    """A vector memory records a text's vector before it appends the entry: a replayed write
    whose text the current code changed still called the model and appended the vector (a
    regression review), the entry itself left out."""
    embedder = CountingEmbedder()
    cls = PostgresVectorStore if loom.log.engine.dialect.name == "postgresql" else SqliteVectorStore
    store = cls(loom.log.engine, embedder=embedder, min_score=0.0)
    memory = EventSourcedVectorMemory(loom, store=store)
    said = ["rotate the logs"]

    @loom.flow("note")
    def note(ctx: FlowContext) -> None:
        memory.append("u1", [MemoryEntry(content=said[0], id=ctx.uuid().hex)])

    run = loom.run("note")
    said[0] = "rotate the logs nightly"  # the code changed since the recording
    calls, position = len(embedder.texts), loom.log.position
    loom.replay(run.execution_id)
    assert loom.log.position == position and len(embedder.texts) == calls
    memory.close()
