"""Clauses of the optional validity verbs (:class:`~loom_memory.store.SupportsValidity`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loom_memory.conformance.helpers import (
    BAD_KEYS,
    BAD_LIMITS,
    BAD_POSITIONS,
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
    InvalidKeyError,
    InvalidLimitError,
)
from loom_memory.store import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
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
        """As of a position, only entries appended at or before it are there, in append
        order (the ids run against the alphabet, so an order by id shows)."""
        temporal.append_at(KEY, [entry("one", id="z"), entry("two", id="m")], 3)
        temporal.append_at(KEY, [entry("three", id="a")], 5)
        seen = [ids(temporal.read_as_of(KEY, position)) for position in (2, 4, 5)]
        assert seen == [[], ["z", "m"], ["z", "m", "a"]]

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
        """A negative, bool or non-int position raises InvalidArgumentError from every
        validity verb; nothing is written or ended."""
        temporal.append_at(OTHER_KEY, [entry("kept", id="a")], 1)
        verbs: list[Callable[[Any], object]] = [
            lambda p: temporal.append_at(KEY, [entry("x")], p),
            lambda p: temporal.end_validity(OTHER_KEY, ["a"], p),
            lambda p: temporal.read_as_of(OTHER_KEY, p),
            lambda p: temporal.search_as_of(OTHER_KEY, "kept", p),
        ]
        for verb in verbs:
            for position in BAD_POSITIONS:
                with pytest.raises(InvalidArgumentError):
                    verb(position)
        assert (store.read(KEY), ids(store.read(OTHER_KEY))) == ([], ["a"])

    def test_validity_refuses_a_non_string_key(self, temporal: SupportsValidity) -> None:
        """A key that is not a str raises InvalidKeyError from every validity verb."""
        verbs: list[Callable[[Any], object]] = [
            lambda k: temporal.append_at(k, [entry("x")], 1),
            lambda k: temporal.end_validity(k, ["a"], 1),
            lambda k: temporal.read_as_of(k, 1),
            lambda k: temporal.search_as_of(k, "x", 1),
        ]
        for verb in verbs:
            for bad_key in BAD_KEYS:
                with pytest.raises(InvalidKeyError):
                    verb(bad_key)

    def test_validity_end_refuses_a_bare_string(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """ids given to end_validity as one str (which would mean its letters) raises
        InvalidArgumentError; nothing is ended."""
        temporal.append_at(KEY, [entry("a", id="a"), entry("b", id="b")], 1)
        with pytest.raises(InvalidArgumentError):
            temporal.end_validity(KEY, "ab", 2)
        assert ids(store.read(KEY)) == ["a", "b"]

    def test_validity_search_as_of_limits_as_search_does(self, temporal: SupportsValidity) -> None:
        """search_as_of returns at most limit hits (DEFAULT_SEARCH_LIMIT without one, at
        most MAX_SEARCH_LIMIT), and refuses a limit that is not a positive int."""
        temporal.append_at(KEY, [entry(f"match {n}") for n in range(MAX_SEARCH_LIMIT + 5)], 1)
        counts = [
            len(temporal.search_as_of(KEY, "match", 1, limit=3)),
            len(temporal.search_as_of(KEY, "match", 1)),
            len(temporal.search_as_of(KEY, "match", 1, limit=MAX_SEARCH_LIMIT * 10)),
        ]
        assert counts == [3, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT]
        for limit in BAD_LIMITS:
            with pytest.raises(InvalidLimitError):
                temporal.search_as_of(KEY, "match", 1, limit=limit)

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
