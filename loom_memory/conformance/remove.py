"""Clauses of the optional ``remove`` (:class:`~loom_memory.store.SupportsRemove`)."""

from __future__ import annotations

import pytest

from loom_memory.conformance.helpers import (
    BAD_KEYS,
    EXACT_IDS,
    KEY,
    OTHER_KEY,
    contents,
    entry,
    ids,
    skip_without,
)
from loom_memory.errors import (
    InvalidArgumentError,
    InvalidKeyError,
)
from loom_memory.store import (
    MemoryStore,
    SupportsRemove,
)


class RemoveClauses:
    """The optional ``remove``: skipped, by name, on a store without it."""

    @pytest.fixture
    def removing(self, store: MemoryStore) -> SupportsRemove:
        """The store, for clauses of the optional ``remove``; skips when it is absent."""
        skip_without(SupportsRemove, "remove", store)
        assert isinstance(store, SupportsRemove)
        return store

    def test_remove_drops_named_entries_in_order(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """remove deletes the named entries and keeps the rest in append order."""
        store.append(KEY, [entry(n, id=n) for n in ("a", "b", "c", "d")])
        removing.remove(KEY, ["b", "d"])
        assert ids(store.read(KEY)) == ["a", "c"]

    def test_remove_sentinel_ids_match_no_idless_entry(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Ids 'None', 'null' and '' match only entries with those ids, never entries without."""
        store.append(KEY, [entry("a", id="a"), entry("anon1"), entry("anon2")])
        removing.remove(KEY, ["a", "None", "null", ""])
        assert contents(store.read(KEY)) == ["anon1", "anon2"]

    def test_remove_matches_sentinel_ids_exactly(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """An entry whose id is literally '' or 'null' is removed by that id and no other."""
        store.append(KEY, [entry("e", id=""), entry("n", id="null"), entry("anon")])
        removing.remove(KEY, [""])
        assert contents(store.read(KEY)) == ["n", "anon"]

    def test_remove_matches_each_id_exactly(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Ids differing only in case, surrounding spaces or accents are removed one by one,
        each by its own id only (no folding, trimming or skipped characters)."""
        store.append(KEY, [entry(n, id=entry_id) for n, entry_id in enumerate(EXACT_IDS)])
        for n, entry_id in enumerate(EXACT_IDS):
            removing.remove(KEY, [entry_id])
            assert ids(store.read(KEY)) == list(EXACT_IDS[n + 1 :]), entry_id

    def test_remove_drops_every_entry_sharing_an_id(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Ids are handles, not unique keys: every entry with a removed id goes."""
        store.append(KEY, [entry("1", id="dup"), entry("2", id="keep"), entry("3", id="dup")])
        removing.remove(KEY, ["dup"])
        assert ids(store.read(KEY)) == ["keep"]

    def test_remove_is_scoped_to_its_key(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Removing an id from one key leaves an entry with that id in another key."""
        store.append(KEY, [entry("mine", id="shared")])
        store.append(OTHER_KEY, [entry("theirs", id="shared")])
        removing.remove(KEY, ["shared"])
        assert (store.read(KEY), ids(store.read(OTHER_KEY))) == ([], ["shared"])

    def test_remove_of_unknown_ids_changes_nothing(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Removing ids that are not present, or no ids at all, changes nothing."""
        store.append(KEY, [entry("a", id="a"), entry("anon")])
        removing.remove(KEY, ["zzz"])
        removing.remove(KEY, [])
        removing.remove(OTHER_KEY, ["a"])
        assert contents(store.read(KEY)) == ["a", "anon"]

    def test_remove_refuses_a_non_string_key(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """A key that is not a str raises InvalidKeyError; nothing is removed."""
        store.append("1", [entry("a", id="a")])
        for bad_key in BAD_KEYS:
            with pytest.raises(InvalidKeyError):
                removing.remove(bad_key, ["a"])
        assert ids(store.read("1")) == ["a"]

    def test_remove_refuses_a_bare_string(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """ids given as one str (which would mean its letters) raises InvalidArgumentError."""
        store.append(KEY, [entry("a", id="a")])
        with pytest.raises(InvalidArgumentError):
            removing.remove(KEY, "a")
        assert ids(store.read(KEY)) == ["a"]
