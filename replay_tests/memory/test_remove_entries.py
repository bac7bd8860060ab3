"""remove_entries: native remove when present, else read-filter-replace, else clear+append.

The three paths produce identical lists, so the tests pin which verbs each one called: a
"fallback" that silently took the slow path, or rewrote a key it did not change, would
otherwise look green.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pytest

from loom_memory import (
    InMemoryMemoryStore,
    InvalidArgumentError,
    MemoryEntry,
    SupportsRemove,
    SupportsReplace,
    remove_entries,
)
from loom_memory.conformance import MemoryStoreContract


class RequiredOnlyStore:
    """A store with exactly the three required verbs, logging each call by name."""

    def __init__(self) -> None:
        self.inner = InMemoryMemoryStore()
        self.calls: list[str] = []

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        self.calls.append("append")
        self.inner.append(key, entries)

    def read(self, key: str) -> list[MemoryEntry]:
        self.calls.append("read")
        return self.inner.read(key)

    def clear(self, key: str) -> None:
        self.calls.append("clear")
        self.inner.clear(key)


class ReplacingStore(RequiredOnlyStore):
    """Adds the optional ``replace``."""

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        self.calls.append("replace")
        self.inner.replace(key, entries)


class RemovingStore(ReplacingStore):
    """Adds the optional ``remove`` as well."""

    def remove(self, key: str, ids: Iterable[str]) -> None:
        self.calls.append("remove")
        self.inner.remove(key, ids)


class TestRequiredOnlyStore(MemoryStoreContract):
    """The kit on a store without optional verbs: their clauses skip, the fallback runs."""

    @pytest.fixture
    def store(self) -> Iterator[RequiredOnlyStore]:
        yield RequiredOnlyStore()


def _seeded(store: RequiredOnlyStore) -> RequiredOnlyStore:
    store.append(
        "k",
        [MemoryEntry(content="a", id="a"), MemoryEntry(content="anon"), MemoryEntry(content="b")],
    )
    store.calls.clear()
    return store


def test_capabilities_are_detected_by_presence() -> None:
    """The recording stores advertise exactly the optional verbs they define."""
    assert [
        (isinstance(store, SupportsReplace), isinstance(store, SupportsRemove))
        for store in (RequiredOnlyStore(), ReplacingStore(), RemovingStore())
    ] == [(False, False), (True, False), (True, True)]


def test_native_remove_is_preferred() -> None:
    """A store with remove gets one remove call and nothing else."""
    store = _seeded(RemovingStore())
    remove_entries(store, "k", ["a"])
    assert store.calls == ["remove"]
    assert [e.content for e in store.inner.read("k")] == ["anon", "b"]


def test_fallback_prefers_replace() -> None:
    """Without remove, the fallback reads, filters and rewrites with the atomic replace."""
    store = _seeded(ReplacingStore())
    remove_entries(store, "k", ["a", "None", "null", ""])
    assert store.calls == ["read", "replace"]
    assert [e.content for e in store.inner.read("k")] == ["anon", "b"]


def test_fallback_without_replace_clears_and_appends() -> None:
    """With neither remove nor replace, the fallback rewrites by clear then append."""
    store = _seeded(RequiredOnlyStore())
    remove_entries(store, "k", ["a"])
    assert store.calls == ["read", "clear", "append"]
    assert [e.content for e in store.inner.read("k")] == ["anon", "b"]


def test_fallback_writes_nothing_when_nothing_matches() -> None:
    """A removal that matches no entry reads once and rewrites nothing."""
    store = _seeded(ReplacingStore())
    remove_entries(store, "k", ["zzz", "None"])
    assert store.calls == ["read"]


def test_remove_entries_refuses_a_bare_string() -> None:
    """ids as one str is refused before any store call."""
    store = _seeded(ReplacingStore())
    with pytest.raises(InvalidArgumentError):
        remove_entries(store, "k", "a")
    assert store.calls == []
