"""Clauses every store must pass: an ordered list per key, refused bad input, clear."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from msgspec import UNSET

from loom_memory.conformance.helpers import (
    BAD_KEYS,
    KEY,
    OTHER_KEY,
    SIMILAR_KEYS,
    WHEN,
    contents,
    entry,
    ids,
)
from loom_memory.errors import (
    EntryNotSerialisableError,
    InvalidKeyError,
)
from loom_memory.store import (
    MemoryStore,
    remove_entries,
)


class RequiredClauses:
    """The required verbs: append, read, clear, and the remove helper over them."""

    # -- append / read: an ordered list ------------------------------------------------------

    def test_unwritten_key_reads_empty(self, store: MemoryStore) -> None:
        """A key never written reads back as an empty list."""
        assert store.read(KEY) == []

    def test_read_returns_append_order(self, store: MemoryStore) -> None:
        """Entries read back in append order, across separate appends."""
        store.append(KEY, [entry("one"), entry("two")])
        store.append(KEY, [entry("three")])
        assert contents(store.read(KEY)) == ["one", "two", "three"]

    def test_order_is_append_not_timestamp(self, store: MemoryStore) -> None:
        """Order is append order even when timestamps run backwards or tie."""
        later, earlier = WHEN + timedelta(hours=1), WHEN - timedelta(hours=1)
        store.append(KEY, [entry("first", timestamp=later), entry("second", timestamp=later)])
        store.append(KEY, [entry("third", timestamp=earlier)])
        assert contents(store.read(KEY)) == ["first", "second", "third"]

    def test_list_not_set(self, store: MemoryStore) -> None:
        """Appending an equal entry twice keeps both: a key names a list, not a set."""
        twin = entry("same", id="x", role="user")
        store.append(KEY, [twin, twin])
        store.append(KEY, [twin])
        assert store.read(KEY) == [twin, twin, twin]

    def test_append_empty_list_changes_nothing(self, store: MemoryStore) -> None:
        """Appending no entries leaves the list as it was."""
        store.append(KEY, [entry("kept")])
        store.append(KEY, [])
        assert contents(store.read(KEY)) == ["kept"]

    def test_a_callers_edits_do_not_change_what_is_remembered(self, store: MemoryStore) -> None:
        """Changing a content dict after appending it, or the entries and list a read
        returned, changes nothing a later read returns: a store keeps values, not the
        caller's objects."""
        content: dict[str, Any] = {"note": "original", "tags": ["a"]}
        store.append(KEY, [entry(content)])
        content["note"] = "changed by the caller"
        content["tags"].append("b")
        read = store.read(KEY)
        read_content = read[0].content
        assert isinstance(read_content, dict)
        read_content["note"] = "changed by a reader"
        read.append(entry("appended to a read"))
        assert store.read(KEY) == [entry({"note": "original", "tags": ["a"]})]

    def test_absent_role_reads_back_absent(self, store: MemoryStore) -> None:
        """An entry without a role reads back with the role UNSET, not None."""
        store.append(KEY, [entry("no role")])
        assert store.read(KEY)[0].role is UNSET

    def test_role_round_trips(self, store: MemoryStore) -> None:
        """A role reads back exactly as written."""
        store.append(KEY, [entry("hi", role="assistant")])
        assert store.read(KEY)[0].role == "assistant"

    def test_id_round_trips(self, store: MemoryStore) -> None:
        """An id reads back exactly, including ids that look like sentinels."""
        given = ["doc#0", "None", "null", "", "  spaced  ", "ünï"]
        store.append(KEY, [entry(f"e{n}", id=entry_id) for n, entry_id in enumerate(given)])
        assert ids(store.read(KEY)) == given

    def test_absent_id_reads_back_absent(self, store: MemoryStore) -> None:
        """An entry without an id reads back with the id UNSET, not None or ''."""
        store.append(KEY, [entry("anonymous")])
        assert store.read(KEY)[0].id is UNSET

    def test_json_content_round_trips(self, store: MemoryStore) -> None:
        """Nested JSON-like content reads back equal, with ints, floats, bools and nulls intact."""
        content = {"a": [1, 2.5, True, None, {"b": "c"}], "n": -7, "empty": {}, "list": []}
        store.append(KEY, [entry(content)])
        [stored] = store.read(KEY)
        assert stored.content == content
        assert [type(value) for value in stored.content["a"][:3]] == [int, float, bool]

    def test_unicode_content_round_trips(self, store: MemoryStore) -> None:
        """Non-ASCII text, emoji and quotes in content read back unchanged."""
        text = "Straße 東京 café 🧵 \"quoted\" 'single' back\\slash"
        store.append(KEY, [entry(text)])
        assert store.read(KEY)[0].content == text

    def test_timestamp_round_trips(self, store: MemoryStore) -> None:
        """A timestamp reads back as the same instant, microseconds included."""
        when = datetime(2030, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)
        store.append(KEY, [entry("t", timestamp=when)])
        assert store.read(KEY)[0].timestamp == when

    def test_origin_round_trips(self, store: MemoryStore) -> None:
        """A tainted entry reads back tainted, with its provenance label."""
        store.append(KEY, [entry("passage", origin="wiki:runbooks/db.md")])
        [stored] = store.read(KEY)
        assert (stored.tainted, stored.origin) == (True, "wiki:runbooks/db.md")

    # -- keys ------------------------------------------------------------------------------

    def test_keys_are_isolated(self, store: MemoryStore) -> None:
        """Appending to one key does not change another."""
        store.append(KEY, [entry("mine")])
        store.append(OTHER_KEY, [entry("theirs")])
        assert contents(store.read(KEY)) == ["mine"]

    def test_similar_keys_are_distinct(self, store: MemoryStore) -> None:
        """Keys differing only in case, wildcards or a suffix are different lists."""
        keys = list(SIMILAR_KEYS)
        for key in keys:
            store.append(key, [entry(key)])
        assert [contents(store.read(key)) for key in keys] == [[key] for key in keys]

    def test_empty_key_is_a_key(self, store: MemoryStore) -> None:
        """The empty string is a valid key like any other."""
        store.append("", [entry("root")])
        assert contents(store.read("")) == ["root"]
        assert store.read(KEY) == []

    @pytest.mark.parametrize("bad_key", BAD_KEYS)
    def test_non_string_key_is_refused(self, store: MemoryStore, bad_key: Any) -> None:
        """A key that is not a str raises InvalidKeyError from every required verb."""
        for verb in (
            lambda: store.append(bad_key, [entry("x")]),
            lambda: store.read(bad_key),
            lambda: store.clear(bad_key),
        ):
            with pytest.raises(InvalidKeyError):
                verb()

    # -- bad entries -----------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("content", "field"),
        [
            ({1, 2}, "content"),
            (float("nan"), "content"),
            ({"meta": [1, object()]}, "content['meta'][1]"),
            ({3: "int key"}, "content key 3"),
            (("a", "tuple"), "content"),
        ],
    )
    def test_unserialisable_entry_writes_nothing(
        self, store: MemoryStore, content: Any, field: str
    ) -> None:
        """An unserialisable entry raises naming the field, and nothing of the batch is written."""
        store.append(KEY, [entry("before")])
        with pytest.raises(EntryNotSerialisableError) as raised:
            store.append(KEY, [entry("good"), entry(content)])
        assert raised.value.path == f"entries[1].{field}"
        assert contents(store.read(KEY)) == ["before"]

    def test_naive_timestamp_is_refused(self, store: MemoryStore) -> None:
        """A timestamp without a timezone is refused: it cannot be compared with aware ones."""
        with pytest.raises(EntryNotSerialisableError) as raised:
            store.append(KEY, [entry("x", timestamp=datetime(2030, 1, 1))])
        assert raised.value.path == "entries[0].timestamp"
        assert store.read(KEY) == []

    def test_non_entry_is_refused(self, store: MemoryStore) -> None:
        """A plain dict in place of a MemoryEntry is refused, naming its position."""
        with pytest.raises(EntryNotSerialisableError) as raised:
            store.append(KEY, [{"content": "looks like an entry"}])  # type: ignore[list-item]
        assert raised.value.path == "entries[0]"

    # -- clear -----------------------------------------------------------------------------

    def test_clear_empties_the_key(self, store: MemoryStore) -> None:
        """After clear, the key reads back empty."""
        store.append(KEY, [entry("a"), entry("b")])
        store.clear(KEY)
        assert store.read(KEY) == []

    def test_clear_leaves_other_keys(self, store: MemoryStore) -> None:
        """Clearing one key leaves every other key intact."""
        store.append(KEY, [entry("a")])
        store.append(OTHER_KEY, [entry("b")])
        store.clear(KEY)
        assert contents(store.read(OTHER_KEY)) == ["b"]

    def test_clear_empties_only_its_own_key_among_similar_ones(self, store: MemoryStore) -> None:
        """Clearing each of keys that differ only in case, a wildcard or a suffix, one at a
        time, empties that key alone (a clear by LIKE or by prefix empties its neighbours)."""
        for key in SIMILAR_KEYS:
            store.append(key, [entry(key)])
        for n, cleared in enumerate(SIMILAR_KEYS):
            store.clear(cleared)
            seen = [contents(store.read(key)) for key in SIMILAR_KEYS]
            assert seen == [[] if m <= n else [key] for m, key in enumerate(SIMILAR_KEYS)], cleared

    def test_clear_of_unwritten_key_is_a_no_op(self, store: MemoryStore) -> None:
        """Clearing a key never written succeeds and changes nothing."""
        store.append(OTHER_KEY, [entry("b")])
        store.clear(KEY)
        assert (store.read(KEY), contents(store.read(OTHER_KEY))) == ([], ["b"])

    def test_append_after_clear_starts_a_new_list(self, store: MemoryStore) -> None:
        """Entries appended after clear are the whole list, in their own order."""
        store.append(KEY, [entry("old")])
        store.clear(KEY)
        store.append(KEY, [entry("new1"), entry("new2")])
        assert contents(store.read(KEY)) == ["new1", "new2"]

    # -- remove via the helper: works on every store -----------------------------------------

    def test_remove_entries_helper_works_on_this_store(self, store: MemoryStore) -> None:
        """remove_entries removes by id on any store, natively or by read-filter-rewrite."""
        store.append(KEY, [entry("a", id="a"), entry("anon"), entry("b", id="b")])
        remove_entries(store, KEY, ["a", "None", "null", ""])
        assert contents(store.read(KEY)) == ["anon", "b"]
