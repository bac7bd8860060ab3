"""The reference backend against the kit, plus what only the reference promises."""

from __future__ import annotations

from collections.abc import Iterator

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
