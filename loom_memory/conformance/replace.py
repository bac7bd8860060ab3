"""Clauses of the optional ``replace`` (:class:`~loom_memory.store.SupportsReplace`)."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from loom_memory.conformance.helpers import (
    BAD_KEYS,
    KEY,
    OTHER_KEY,
    contents,
    entry,
    ids,
    skip_without,
)
from loom_memory.errors import (
    EntryNotSerialisableError,
    InvalidKeyError,
)
from loom_memory.store import (
    MemoryStore,
    SupportsReplace,
)


class ReplaceClauses:
    """The optional ``replace``: skipped, by name, on a store without it."""

    @pytest.fixture
    def replacing(self, store: MemoryStore) -> SupportsReplace:
        """The store, for clauses of the optional ``replace``; skips when it is absent."""
        skip_without(SupportsReplace, "replace", store)
        assert isinstance(store, SupportsReplace)
        return store

    def test_replace_swaps_the_list(self, store: MemoryStore, replacing: SupportsReplace) -> None:
        """After replace, the key reads back exactly the new entries."""
        store.append(KEY, [entry("old1"), entry("old2")])
        replacing.replace(KEY, [entry("new")])
        assert contents(store.read(KEY)) == ["new"]

    def test_replace_preserves_ids_and_order(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """Replacing keeps each new entry's id and the given order."""
        store.append(KEY, [entry("old", id="old")])
        replacing.replace(KEY, [entry("z", id="z"), entry("anon"), entry("a", id="a")])
        assert ids(store.read(KEY)) == ["z", UNSET, "a"]

    def test_replace_keeps_duplicates(self, store: MemoryStore, replacing: SupportsReplace) -> None:
        """Replacing with an equal entry three times keeps three: a list, not a set."""
        twin = entry("same", id="x", role="user")
        replacing.replace(KEY, [twin, twin, twin])
        assert store.read(KEY) == [twin, twin, twin]

    def test_replace_refuses_a_non_string_key(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """A key that is not a str raises InvalidKeyError; nothing is written."""
        for bad_key in BAD_KEYS:
            with pytest.raises(InvalidKeyError):
                replacing.replace(bad_key, [entry("x")])
        assert [store.read(str(bad_key)) for bad_key in BAD_KEYS] == [[] for _ in BAD_KEYS]

    def test_replace_with_nothing_empties_the_key(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """Replacing with an empty list leaves the key empty."""
        store.append(KEY, [entry("old")])
        replacing.replace(KEY, [])
        assert store.read(KEY) == []

    def test_replace_leaves_other_keys(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """Replacing one key leaves every other key intact."""
        store.append(OTHER_KEY, [entry("theirs")])
        replacing.replace(KEY, [entry("mine")])
        assert contents(store.read(OTHER_KEY)) == ["theirs"]

    def test_failed_replace_keeps_the_old_list(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """A replace refused for a bad entry leaves the old list intact."""
        store.append(KEY, [entry("old", id="old")])
        with pytest.raises(EntryNotSerialisableError):
            replacing.replace(KEY, [entry("fine"), entry(float("inf"))])
        assert ids(store.read(KEY)) == ["old"]

    def test_append_after_replace_goes_to_the_end(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """An append after replace lands after the replaced entries."""
        store.append(KEY, [entry("old")])
        replacing.replace(KEY, [entry("r1"), entry("r2")])
        store.append(KEY, [entry("after")])
        assert contents(store.read(KEY)) == ["r1", "r2", "after"]
