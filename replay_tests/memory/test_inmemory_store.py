"""The reference backend against the kit, plus what only the reference promises."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loom_memory import InMemoryMemoryStore, MemoryEntry
from loom_memory.conformance import MemoryStoreContract


class TestInMemoryMemoryStore(MemoryStoreContract):
    @pytest.fixture
    def store(self) -> Iterator[InMemoryMemoryStore]:
        yield InMemoryMemoryStore()


def test_reference_store_copies_what_it_is_given() -> None:
    """Mutating content after append does not change what the store remembers."""
    store = InMemoryMemoryStore()
    content = {"items": ["original"]}
    store.append("k", [MemoryEntry(content=content)])
    content["items"].append("mutated")
    assert store.read("k")[0].content == {"items": ["original"]}


def test_reference_ranks_rarer_terms_higher() -> None:
    """The IDF scorer puts an entry matching a rare term above one matching a common term."""
    store = InMemoryMemoryStore()
    store.append("k", [MemoryEntry(content=f"common filler {n}") for n in range(5)])
    store.append("k", [MemoryEntry(content="common rare")])
    hits = store.search("k", "rare common", limit=2)
    assert hits[0].content == "common rare"


@pytest.mark.parametrize("position", [2**63, 2**70])
def test_a_position_past_a_sql_bigint_is_refused_alike_on_every_backend(
    tmp_path: Path, position: int
) -> None:
    """The reference took it, SQLite raised a bare OverflowError and PostgreSQL a
    BackendError: positions are stored as 64-bit integers, so past them is no position."""
    from loom_memory import InvalidArgumentError, SqliteTemporalStore

    for store in (InMemoryMemoryStore(), SqliteTemporalStore(f"sqlite:///{tmp_path / 't.db'}")):
        with pytest.raises(InvalidArgumentError, match="position"):
            store.append_at("k", [MemoryEntry(content="x")], position)
        store.append_at("k", [MemoryEntry(content="x")], 2**63 - 1)  # the control: the last
