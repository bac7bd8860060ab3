"""A replay appends nothing (ADR 0002), memory writes of the replayed flow's body included.

A memory review found a flow that remembers and then recalls (the chat-agent pattern: the
recall recorded with ``decide=``, the write made in the body) writing its memory again on
every ``loom.replay``: each replay added the entry once more, and still said identical; a
recall replayed live (``live={"memory"}``) appended its tier's eviction too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from loom_memory import EventSourcedMemory, MemoryEntry, TieredMemory
from loom_memory.tiers import Tier
from loom_runtime import FlowContext, Loom


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
