"""Clauses of the optional validity verbs (:class:`~loom_memory.store.SupportsValidity`)."""

from __future__ import annotations

import pytest

from loom_memory.conformance.helpers import (
    KEY,
    OTHER_KEY,
    contents,
    entry,
    ids,
    skip_without,
)
from loom_memory.entry import MemoryEntry
from loom_memory.errors import (
    InvalidArgumentError,
)
from loom_memory.store import (
    MemoryStore,
    SupportsSearch,
    SupportsValidity,
)

_PRESENT = [entry("restart the worker", id="a"), entry("restart the cache", id="b")]
_HISTORY = [entry("worker worker pool", id=f"old{n}") for n in range(5)]
_RANKED = "worker cache"
"""Two entries that tie for ``_RANKED`` on their own; ``_HISTORY``, counted in, makes "worker"
common and so sinks entry "a" below "b": the ranking clauses of validity fail if it is."""


def _ids_of(entries: list[MemoryEntry]) -> list[str]:
    return [item.id for item in entries if isinstance(item.id, str)]


class ValidityClauses:
    """The optional validity verbs: skipped, by name, on a store without them."""

    @pytest.fixture
    def temporal(self, store: MemoryStore) -> SupportsValidity:
        """The store, for clauses of the optional validity verbs; skips when it is absent."""
        skip_without(SupportsValidity, "end_validity", store)
        assert isinstance(store, SupportsValidity)
        return store

    def test_validity_entries_appended_at_a_position_are_current(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """Entries appended at a position read back as current, in append order."""
        temporal.append_at(KEY, [entry("one", id="a")], 3)
        temporal.append_at(KEY, [entry("two", id="b")], 5)
        assert ids(store.read(KEY)) == ["a", "b"]

    def test_validity_as_of_sees_entries_from_their_position_on(
        self, temporal: SupportsValidity
    ) -> None:
        """As of a position, only entries appended at or before it are there."""
        temporal.append_at(KEY, [entry("one", id="a")], 3)
        temporal.append_at(KEY, [entry("two", id="b")], 5)
        seen = [ids(temporal.read_as_of(KEY, position)) for position in (2, 4, 5)]
        assert seen == [[], ["a"], ["a", "b"]]

    def test_validity_plain_append_is_valid_from_position_zero(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """An entry appended without a position is valid as of position 0."""
        store.append(KEY, [entry("always", id="a")])
        assert ids(temporal.read_as_of(KEY, 0)) == ["a"]

    def test_validity_ended_entries_leave_the_current_list(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """end_validity takes the named entries out of read; the rest keep their order."""
        temporal.append_at(KEY, [entry("a", id="a"), entry("b", id="b"), entry("c", id="c")], 1)
        temporal.end_validity(KEY, ["b"], 4)
        assert ids(store.read(KEY)) == ["a", "c"]

    def test_validity_ended_entries_stay_visible_before_their_end(
        self, temporal: SupportsValidity
    ) -> None:
        """As of a position before its end an ended entry is there; from its end on it is not."""
        temporal.append_at(KEY, [entry("a", id="a")], 3)
        temporal.end_validity(KEY, ["a"], 7)
        assert [ids(temporal.read_as_of(KEY, p)) for p in (6, 7)] == [["a"], []]

    def test_validity_an_ended_entry_keeps_its_first_end(self, temporal: SupportsValidity) -> None:
        """Ending an entry already ended does not move its end."""
        temporal.append_at(KEY, [entry("a", id="a")], 1)
        temporal.end_validity(KEY, ["a"], 4)
        temporal.end_validity(KEY, ["a"], 9)
        assert ids(temporal.read_as_of(KEY, 5)) == []

    def test_validity_a_revision_under_the_same_id_has_its_own_span(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """An id ended and appended again: each entry is seen only between its own positions."""
        temporal.append_at(KEY, [entry("first", id="a")], 1)
        temporal.end_validity(KEY, ["a"], 4)
        temporal.append_at(KEY, [entry("second", id="a")], 4)
        seen = [contents(temporal.read_as_of(KEY, p)) for p in (3, 4)]
        assert seen == [["first"], ["second"]]
        assert contents(store.read(KEY)) == ["second"]

    def test_validity_end_is_scoped_to_its_key(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """Ending ids at one key leaves the same ids at another key current."""
        temporal.append_at(KEY, [entry("a", id="a")], 1)
        temporal.append_at(OTHER_KEY, [entry("a", id="a")], 1)
        temporal.end_validity(KEY, ["a"], 2)
        assert ids(store.read(OTHER_KEY)) == ["a"]

    def test_validity_refuses_a_position_that_is_not_one(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """A negative, bool or non-int position raises InvalidArgumentError; nothing is written."""
        for position in (-1, True, 1.5):
            with pytest.raises(InvalidArgumentError):
                temporal.append_at(KEY, [entry("x")], position)  # type: ignore[arg-type]
        assert store.read(KEY) == []

    def test_validity_search_skips_ended_entries(
        self, temporal: SupportsValidity, searching: SupportsSearch
    ) -> None:
        """A current search never returns an ended entry."""
        temporal.append_at(KEY, [entry("term old", id="old"), entry("term new", id="new")], 1)
        temporal.end_validity(KEY, ["old"], 2)
        assert ids(searching.search(KEY, "term")) == ["new"]

    def test_validity_search_as_of_finds_what_was_current(self, temporal: SupportsValidity) -> None:
        """A search as of a position finds the entries valid then, ended or not since."""
        temporal.append_at(KEY, [entry("term old", id="old")], 1)
        temporal.end_validity(KEY, ["old"], 3)
        temporal.append_at(KEY, [entry("term new", id="new")], 3)
        assert [ids(temporal.search_as_of(KEY, "term", p)) for p in (2, 3)] == [
            ["old"],
            ["new"],
        ]

    def test_validity_current_search_ranks_as_a_key_without_history(
        self, store: MemoryStore, temporal: SupportsValidity, searching: SupportsSearch
    ) -> None:
        """Ended entries do not sway a current search's ranking: it ranks as a fresh key would."""
        temporal.append_at(KEY, _HISTORY, 1)
        temporal.append_at(KEY, _PRESENT, 2)
        temporal.end_validity(KEY, _ids_of(_HISTORY), 3)
        store.append(OTHER_KEY, _PRESENT)
        assert ids(searching.search(KEY, _RANKED)) == ids(searching.search(OTHER_KEY, _RANKED))

    def test_validity_search_as_of_ranks_as_the_key_did_then(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """Entries added later do not sway a search as of a position: it ranks as the key was."""
        temporal.append_at(KEY, _PRESENT, 1)
        temporal.append_at(KEY, _HISTORY, 5)
        temporal.append_at(OTHER_KEY, _PRESENT, 1)
        assert ids(temporal.search_as_of(KEY, _RANKED, 2)) == ids(
            temporal.search_as_of(OTHER_KEY, _RANKED, 2)
        )
