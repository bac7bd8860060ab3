"""The entry points installed packages declare to loom are read once per process.

``importlib.metadata.entry_points`` reads the metadata files of every installed distribution on
each call (10-20 ms with the test extra's ~190). An erasure asked it once per memory key it
named, and every walk of the read models once more. Counted here as calls of
``Distribution.discover``, which every such read starts with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import Distribution
from pathlib import Path

import pytest

from loom_memory import EventSourcedMemory, MemoryEntry, SqliteMemoryStore
from loom_runtime import FlowContext, Labels, Loom, MasterKey
from loom_runtime.projection import registered_projections

KEYS = 20


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[None]]:
    """One item per read of the installed distributions' metadata from now on."""
    counted: list[None] = []
    discover: Callable[..., Iterator[Distribution]] = Distribution.discover

    def counting(cls: type[Distribution], **kwargs: object) -> Iterator[Distribution]:
        counted.append(None)
        return discover(**kwargs)

    monkeypatch.setattr(Distribution, "discover", classmethod(counting))
    yield counted


def test_an_erasure_naming_many_memory_keys_reads_the_installed_packages_once(
    tmp_path: Path, reads: list[None]
) -> None:
    """Each of a person's memory keys is resolved by the ``loom.erasure`` entry point of the
    memory package: found once, not once per key (97% of a 100-key dry run, profiled)."""
    url = f"sqlite:///{tmp_path}/loom.db"
    with Loom(url, encryption=MasterKey(b"k" * 32)) as loom:

        @loom.flow("chat")
        def chat(ctx: FlowContext, message: str) -> str:
            return ctx.decide("reply", lambda: f"noted: {message}")

        loom.run("chat", message="hello", labels=Labels(user="u-42"))
        memory = EventSourcedMemory(
            loom, store=SqliteMemoryStore(loom.log.engine, table_prefix="chat_"), name="chat"
        )
        for number in range(KEYS):
            memory.append(f"u-42/{number}", [MemoryEntry(content="a note", id=str(number))])
        keys = [f"chat:u-42/{number}" for number in range(KEYS)]
        reads.clear()
        plan = loom.erase(user="u-42", memory_keys=keys, reason="r", by="dpo", dry_run=True)
    assert len(plan.subjects) == 1 + KEYS  # the control: every key was resolved
    assert len(reads) <= 1


def test_walking_the_read_models_again_reads_the_installed_packages_at_most_once(
    loom: Loom, reads: list[None]
) -> None:
    """``loom rebuild``, ``loom doctor`` and every applied erasure walk the read models the
    installed packages declare (``loom.projections``)."""
    walks = [registered_projections(loom.log) for _ in range(3)]
    assert walks[0]  # the control: the installed packages declare read models
    assert [[p.name for p in walk] for walk in walks[1:]] == [[p.name for p in walks[0]]] * 2
    assert len(reads) <= 1
