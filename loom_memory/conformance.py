"""The memory-store conformance kit: every clause of the seam as one pytest test.

A backend author subclasses :class:`MemoryStoreContract` and provides ONE fixture, ``store``,
yielding a fresh, empty store::

    import pytest
    from loom_memory.conformance import MemoryStoreContract

    class TestMyStore(MemoryStoreContract):
        @pytest.fixture
        def store(self):
            store = MyStore(...)
            yield store
            store.close()

and adds ``pytest.register_assert_rewrite("loom_memory.conformance")`` to the conftest.py that
precedes it, so a failing clause shows its values. The class has no ``Test`` prefix so that
pytest never collects the kit itself. Each test states one clause in its docstring, so
``-k`` selects clauses and a failure names the clause broken.

Optional verbs are tested when present and SKIPPED, naming the capability, when absent
(presence is the feature flag). The id round trip is tested on every store, because the
``remove`` fallback depends on it precisely where ``remove`` is missing.

What the kit cannot see:

* index maintenance. A backend that joins its index back to its rows passes every clear,
  replace and remove clause even if its index grows stale without bound. Test that in the
  backend's own suite by reading the index without the join.
* ranking. FTS5's BM25, PostgreSQL's BM25 (b = 0) and an IDF sum disagree on order, so no
  clause pins one. The validity clauses pin only the rule that a search ranks as a key
  holding just the entries it admits would: history never sways it.
* a similarity backend must choose a floor: "a query matching nothing returns []" is free for
  an inverted index, but cosine similarity is defined against every entry, so an unthresholded
  vector store returns the whole key, least-unrelated first. Put a minimum score in the
  backend's options (it is a property of the embedding model) and set it for the kit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from msgspec import UNSET

from loom_memory.entry import MemoryEntry
from loom_memory.errors import (
    EntryNotSerialisableError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidLimitError,
)
from loom_memory.store import (
    MAX_SEARCH_LIMIT,
    MemoryStore,
    SupportsClose,
    SupportsRemove,
    SupportsReplace,
    SupportsSearch,
    SupportsValidity,
    remove_entries,
)

KEY = "kit"
OTHER_KEY = "kit-other"
WHEN = datetime(2031, 5, 17, 9, 30, tzinfo=UTC)


def entry(content: Any, **fields: Any) -> MemoryEntry:
    """Build an entry with a fixed timestamp, so clauses compare whole entries."""
    return MemoryEntry(content=content, timestamp=fields.pop("timestamp", WHEN), **fields)


def _ids(entries: list[MemoryEntry]) -> list[object]:
    return [item.id for item in entries]


def _contents(entries: list[MemoryEntry]) -> list[Any]:
    return [item.content for item in entries]


def _skip_without(capability: type, verb: str, store: object) -> None:
    if not isinstance(store, capability):
        pytest.skip(f"optional capability {verb!r} ({capability.__name__}) not provided")


_PRESENT = [entry("restart the worker", id="a"), entry("restart the cache", id="b")]
_HISTORY = [entry("worker worker pool", id=f"old{n}") for n in range(5)]
_RANKED = "worker cache"
"""Two entries that tie for ``_RANKED`` on their own; ``_HISTORY``, counted in, makes "worker"
common and so sinks entry "a" below "b": the ranking clauses of validity fail if it is."""


def _ids_of(entries: list[MemoryEntry]) -> list[str]:
    return [item.id for item in entries if isinstance(item.id, str)]


class MemoryStoreContract:
    """Subclass as ``TestYourStore`` and provide a ``store`` fixture yielding a fresh store."""

    @pytest.fixture
    def replacing(self, store: MemoryStore) -> SupportsReplace:
        """The store, for clauses of the optional ``replace``; skips when it is absent."""
        _skip_without(SupportsReplace, "replace", store)
        assert isinstance(store, SupportsReplace)
        return store

    @pytest.fixture
    def removing(self, store: MemoryStore) -> SupportsRemove:
        """The store, for clauses of the optional ``remove``; skips when it is absent."""
        _skip_without(SupportsRemove, "remove", store)
        assert isinstance(store, SupportsRemove)
        return store

    @pytest.fixture
    def searching(self, store: MemoryStore) -> SupportsSearch:
        """The store, for clauses of the optional ``search``; skips when it is absent."""
        _skip_without(SupportsSearch, "search", store)
        assert isinstance(store, SupportsSearch)
        return store

    @pytest.fixture
    def temporal(self, store: MemoryStore) -> SupportsValidity:
        """The store, for clauses of the optional validity verbs; skips when they are absent."""
        _skip_without(SupportsValidity, "end_validity", store)
        assert isinstance(store, SupportsValidity)
        return store

    # -- append / read: an ordered list ------------------------------------------------------

    def test_unwritten_key_reads_empty(self, store: MemoryStore) -> None:
        """A key never written reads back as an empty list."""
        assert store.read(KEY) == []

    def test_read_returns_append_order(self, store: MemoryStore) -> None:
        """Entries read back in append order, across separate appends."""
        store.append(KEY, [entry("one"), entry("two")])
        store.append(KEY, [entry("three")])
        assert _contents(store.read(KEY)) == ["one", "two", "three"]

    def test_order_is_append_not_timestamp(self, store: MemoryStore) -> None:
        """Order is append order even when timestamps run backwards or tie."""
        later, earlier = WHEN + timedelta(hours=1), WHEN - timedelta(hours=1)
        store.append(KEY, [entry("first", timestamp=later), entry("second", timestamp=later)])
        store.append(KEY, [entry("third", timestamp=earlier)])
        assert _contents(store.read(KEY)) == ["first", "second", "third"]

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
        assert _contents(store.read(KEY)) == ["kept"]

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
        ids = ["doc#0", "None", "null", "", "  spaced  ", "ünï"]
        store.append(KEY, [entry(f"e{n}", id=entry_id) for n, entry_id in enumerate(ids)])
        assert _ids(store.read(KEY)) == ids

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
        assert _contents(store.read(KEY)) == ["mine"]

    def test_similar_keys_are_distinct(self, store: MemoryStore) -> None:
        """Keys differing only in case, wildcards or a suffix are different lists."""
        keys = ["k", "K", "k%", "k_", "k*", "k ", "k/sub"]
        for key in keys:
            store.append(key, [entry(key)])
        assert [_contents(store.read(key)) for key in keys] == [[key] for key in keys]

    def test_empty_key_is_a_key(self, store: MemoryStore) -> None:
        """The empty string is a valid key like any other."""
        store.append("", [entry("root")])
        assert _contents(store.read("")) == ["root"]
        assert store.read(KEY) == []

    @pytest.mark.parametrize("bad_key", [1, None, b"kit", ("kit",)])
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
        assert _contents(store.read(KEY)) == ["before"]

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
        assert _contents(store.read(OTHER_KEY)) == ["b"]

    def test_clear_of_unwritten_key_is_a_no_op(self, store: MemoryStore) -> None:
        """Clearing a key never written succeeds and changes nothing."""
        store.append(OTHER_KEY, [entry("b")])
        store.clear(KEY)
        assert (store.read(KEY), _contents(store.read(OTHER_KEY))) == ([], ["b"])

    def test_append_after_clear_starts_a_new_list(self, store: MemoryStore) -> None:
        """Entries appended after clear are the whole list, in their own order."""
        store.append(KEY, [entry("old")])
        store.clear(KEY)
        store.append(KEY, [entry("new1"), entry("new2")])
        assert _contents(store.read(KEY)) == ["new1", "new2"]

    # -- remove via the helper: works on every store -----------------------------------------

    def test_remove_entries_helper_works_on_this_store(self, store: MemoryStore) -> None:
        """remove_entries removes by id on any store, natively or by read-filter-rewrite."""
        store.append(KEY, [entry("a", id="a"), entry("anon"), entry("b", id="b")])
        remove_entries(store, KEY, ["a", "None", "null", ""])
        assert _contents(store.read(KEY)) == ["anon", "b"]

    # -- replace (optional) ----------------------------------------------------------------

    def test_replace_swaps_the_list(self, store: MemoryStore, replacing: SupportsReplace) -> None:
        """After replace, the key reads back exactly the new entries."""
        store.append(KEY, [entry("old1"), entry("old2")])
        replacing.replace(KEY, [entry("new")])
        assert _contents(store.read(KEY)) == ["new"]

    def test_replace_preserves_ids_and_order(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """Replacing keeps each new entry's id and the given order."""
        store.append(KEY, [entry("old", id="old")])
        replacing.replace(KEY, [entry("z", id="z"), entry("anon"), entry("a", id="a")])
        assert _ids(store.read(KEY)) == ["z", UNSET, "a"]

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
        assert _contents(store.read(OTHER_KEY)) == ["theirs"]

    def test_failed_replace_keeps_the_old_list(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """A replace refused for a bad entry leaves the old list intact."""
        store.append(KEY, [entry("old", id="old")])
        with pytest.raises(EntryNotSerialisableError):
            replacing.replace(KEY, [entry("fine"), entry(float("inf"))])
        assert _ids(store.read(KEY)) == ["old"]

    def test_append_after_replace_goes_to_the_end(
        self, store: MemoryStore, replacing: SupportsReplace
    ) -> None:
        """An append after replace lands after the replaced entries."""
        store.append(KEY, [entry("old")])
        replacing.replace(KEY, [entry("r1"), entry("r2")])
        store.append(KEY, [entry("after")])
        assert _contents(store.read(KEY)) == ["r1", "r2", "after"]

    # -- remove (optional) -----------------------------------------------------------------

    def test_remove_drops_named_entries_in_order(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """remove deletes the named entries and keeps the rest in append order."""
        store.append(KEY, [entry(n, id=n) for n in ("a", "b", "c", "d")])
        removing.remove(KEY, ["b", "d"])
        assert _ids(store.read(KEY)) == ["a", "c"]

    def test_remove_sentinel_ids_match_no_idless_entry(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Ids 'None', 'null' and '' match only entries with those ids, never entries without."""
        store.append(KEY, [entry("a", id="a"), entry("anon1"), entry("anon2")])
        removing.remove(KEY, ["a", "None", "null", ""])
        assert _contents(store.read(KEY)) == ["anon1", "anon2"]

    def test_remove_matches_sentinel_ids_exactly(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """An entry whose id is literally '' or 'null' is removed by that id and no other."""
        store.append(KEY, [entry("e", id=""), entry("n", id="null"), entry("anon")])
        removing.remove(KEY, [""])
        assert _contents(store.read(KEY)) == ["n", "anon"]

    def test_remove_drops_every_entry_sharing_an_id(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Ids are handles, not unique keys: every entry with a removed id goes."""
        store.append(KEY, [entry("1", id="dup"), entry("2", id="keep"), entry("3", id="dup")])
        removing.remove(KEY, ["dup"])
        assert _ids(store.read(KEY)) == ["keep"]

    def test_remove_is_scoped_to_its_key(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Removing an id from one key leaves an entry with that id in another key."""
        store.append(KEY, [entry("mine", id="shared")])
        store.append(OTHER_KEY, [entry("theirs", id="shared")])
        removing.remove(KEY, ["shared"])
        assert (store.read(KEY), _ids(store.read(OTHER_KEY))) == ([], ["shared"])

    def test_remove_of_unknown_ids_changes_nothing(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """Removing ids that are not present, or no ids at all, changes nothing."""
        store.append(KEY, [entry("a", id="a"), entry("anon")])
        removing.remove(KEY, ["zzz"])
        removing.remove(KEY, [])
        removing.remove(OTHER_KEY, ["a"])
        assert _contents(store.read(KEY)) == ["a", "anon"]

    def test_remove_refuses_a_bare_string(
        self, store: MemoryStore, removing: SupportsRemove
    ) -> None:
        """ids given as one str (which would mean its letters) raises InvalidArgumentError."""
        store.append(KEY, [entry("a", id="a")])
        with pytest.raises(InvalidArgumentError):
            removing.remove(KEY, "a")
        assert _ids(store.read(KEY)) == ["a"]

    # -- search (optional) -----------------------------------------------------------------

    def test_search_finds_a_matching_entry(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """An entry containing the query term is returned."""
        store.append(KEY, [entry("the database failover runbook"), entry("lunch menu")])
        assert _contents(searching.search(KEY, "failover")) == ["the database failover runbook"]

    def test_search_ors_the_terms(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """Query terms are OR-ed: an entry matching any one term is returned."""
        store.append(KEY, [entry("alpha only"), entry("beta only"), entry("gamma only")])
        hits = searching.search(KEY, "alpha beta")
        assert sorted(_contents(hits)) == ["alpha only", "beta only"]

    def test_search_more_terms_never_fewer_hits(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Adding a term that matches nothing never removes a hit (no AND semantics)."""
        store.append(KEY, [entry("postgres vacuum"), entry("postgres replication")])
        short = searching.search(KEY, "postgres")
        longer = searching.search(KEY, "postgres unrelatedterm")
        assert sorted(_contents(longer)) == sorted(_contents(short)) != []

    def test_search_no_match_returns_empty(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """A query matching nothing returns [], not the nearest entries."""
        store.append(KEY, [entry("apples and pears")])
        assert searching.search(KEY, "zeppelin") == []

    def test_search_unwritten_key_returns_empty(self, searching: SupportsSearch) -> None:
        """Searching a key never written returns []."""
        assert searching.search(KEY, "anything") == []

    def test_search_is_scoped_to_its_key(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Search sees only the entries of the key searched."""
        store.append(KEY, [entry("shared word here")])
        store.append(OTHER_KEY, [entry("shared word there")])
        assert _contents(searching.search(KEY, "shared")) == ["shared word here"]

    def test_search_returns_each_hit_once(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """An entry matching several terms is returned once."""
        store.append(KEY, [entry("red green blue")])
        assert len(searching.search(KEY, "red green blue")) == 1

    def test_search_returns_whole_entries(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """A hit is the stored entry, id, role, origin and content intact."""
        stored = entry({"text": "needle"}, id="n1", role="user", origin="wiki:x")
        store.append(KEY, [stored])
        assert searching.search(KEY, "needle") == [stored]

    def test_search_keeps_duplicates(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """Two equal entries that match are two hits (a list, not a set)."""
        store.append(KEY, [entry("echo"), entry("echo")])
        assert _contents(searching.search(KEY, "echo")) == ["echo", "echo"]

    def test_search_is_case_insensitive(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Terms match regardless of case."""
        store.append(KEY, [entry("Kubernetes PodDisruptionBudget")])
        assert len(searching.search(KEY, "KUBERNETES poddisruptionbudget")) == 1

    def test_search_ignores_punctuation_and_operators(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Punctuation and query-language operators in a query are not syntax: no error."""
        store.append(KEY, [entry("disk full on node-7")])
        query = '"disk" AND (full) OR NOT: node* ^7 - \' & | ! <-> \\ ;--'
        assert _contents(searching.search(KEY, query)) == ["disk full on node-7"]

    @pytest.mark.parametrize("query", ["", "   ", "?!...", "the of and", "-- ' \" ; *"])
    def test_search_without_terms_returns_empty(
        self, store: MemoryStore, searching: SupportsSearch, query: str
    ) -> None:
        """A query of only punctuation or stop words returns [] (documented, not an error)."""
        store.append(KEY, [entry("the of and ?!... punctuation")])
        assert searching.search(KEY, query) == []

    @pytest.mark.parametrize(
        ("text", "query"),
        [
            ("Münchner Straße", "STRASSE"),
            ("Café crème", "cafe\u0301"),
            ("会議 東京 大阪", "東京"),
            ("\uff26\uff35\uff2c\uff2c letters", "full"),  # fullwidth FULL
            ("emoji 🧵 thread", "thread"),
        ],
    )
    def test_search_handles_unicode(
        self, store: MemoryStore, searching: SupportsSearch, text: str, query: str
    ) -> None:
        """Unicode terms match after case folding and NFKC normalisation."""
        store.append(KEY, [entry(text), entry("unrelated")])
        assert _contents(searching.search(KEY, query)) == [text]

    def test_search_matches_nested_string_and_number_leaves(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """String and number leaves at any depth of content are searchable."""
        store.append(KEY, [entry({"a": [{"b": "deepword"}], "port": 5432})])
        assert len(searching.search(KEY, "deepword")) == 1
        assert len(searching.search(KEY, "5432")) == 1

    def test_search_ignores_object_keys(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Object keys of content are not searchable text."""
        store.append(KEY, [entry({"secretfieldname": "value"})])
        assert searching.search(KEY, "secretfieldname") == []

    def test_search_ignores_booleans_and_nulls(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """true, false and null leaves are not searchable text."""
        store.append(KEY, [entry({"ok": True, "bad": False, "none": None})])
        assert searching.search(KEY, "true false null none") == []

    def test_search_ignores_the_role(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """The role is not searchable text."""
        store.append(KEY, [entry("hello", role="assistant")])
        assert searching.search(KEY, "assistant") == []

    def test_search_ignores_the_id(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """An entry's id is not searchable text."""
        store.append(KEY, [entry("body text", id="runbookdoc")])
        assert searching.search(KEY, "runbookdoc") == []

    def test_search_ignores_the_origin_label(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """A tainted entry's provenance label is not searchable text; its content is."""
        store.append(KEY, [entry("passage body", origin="confluencewiki")])
        assert searching.search(KEY, "confluencewiki") == []
        assert len(searching.search(KEY, "passage")) == 1

    def test_search_ignores_the_timestamp(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """The timestamp is not searchable text."""
        store.append(KEY, [entry("dated", timestamp=datetime(2031, 5, 17, tzinfo=UTC))])
        assert searching.search(KEY, "2031 05 17") == []

    def test_search_respects_the_limit(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """At most limit hits are returned."""
        store.append(KEY, [entry(f"match {n}") for n in range(5)])
        assert len(searching.search(KEY, "match", limit=3)) == 3

    def test_search_limit_is_clamped(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """A limit above MAX_SEARCH_LIMIT returns at most MAX_SEARCH_LIMIT hits."""
        store.append(KEY, [entry(f"match {n}") for n in range(MAX_SEARCH_LIMIT + 5)])
        assert len(searching.search(KEY, "match", limit=MAX_SEARCH_LIMIT * 10)) == (
            MAX_SEARCH_LIMIT
        )

    @pytest.mark.parametrize("limit", [0, -1, 2.5, True])
    def test_search_refuses_a_bad_limit(self, searching: SupportsSearch, limit: Any) -> None:
        """A limit that is not a positive int raises InvalidLimitError."""
        with pytest.raises(InvalidLimitError):
            searching.search(KEY, "anything", limit=limit)

    def test_search_refuses_a_non_string_key(self, searching: SupportsSearch) -> None:
        """A non-str key raises InvalidKeyError from search too."""
        with pytest.raises(InvalidKeyError):
            searching.search(42, "anything")  # type: ignore[arg-type]

    def test_search_after_clear_finds_nothing(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Cleared entries are no longer found."""
        store.append(KEY, [entry("ephemeral")])
        store.clear(KEY)
        assert searching.search(KEY, "ephemeral") == []

    def test_search_after_replace_finds_only_new(
        self, replacing: SupportsReplace, searching: SupportsSearch
    ) -> None:
        """After replace, only the new entries are found."""
        replacing.replace(KEY, [entry("oldterm")])
        replacing.replace(KEY, [entry("newterm")])
        assert (searching.search(KEY, "oldterm"), len(searching.search(KEY, "newterm"))) == (
            [],
            1,
        )

    def test_search_after_remove_skips_removed(
        self, store: MemoryStore, removing: SupportsRemove, searching: SupportsSearch
    ) -> None:
        """A removed entry is no longer found; the others still are."""
        store.append(KEY, [entry("term gone", id="gone"), entry("term kept", id="kept")])
        removing.remove(KEY, ["gone"])
        assert _ids(searching.search(KEY, "term")) == ["kept"]

    # -- validity (optional) ---------------------------------------------------------------

    def test_validity_entries_appended_at_a_position_are_current(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """Entries appended at a position read back as current, in append order."""
        temporal.append_at(KEY, [entry("one", id="a")], 3)
        temporal.append_at(KEY, [entry("two", id="b")], 5)
        assert _ids(store.read(KEY)) == ["a", "b"]

    def test_validity_as_of_sees_entries_from_their_position_on(
        self, temporal: SupportsValidity
    ) -> None:
        """As of a position, only entries appended at or before it are there."""
        temporal.append_at(KEY, [entry("one", id="a")], 3)
        temporal.append_at(KEY, [entry("two", id="b")], 5)
        seen = [_ids(temporal.read_as_of(KEY, position)) for position in (2, 4, 5)]
        assert seen == [[], ["a"], ["a", "b"]]

    def test_validity_plain_append_is_valid_from_position_zero(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """An entry appended without a position is valid as of position 0."""
        store.append(KEY, [entry("always", id="a")])
        assert _ids(temporal.read_as_of(KEY, 0)) == ["a"]

    def test_validity_ended_entries_leave_the_current_list(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """end_validity takes the named entries out of read; the rest keep their order."""
        temporal.append_at(KEY, [entry("a", id="a"), entry("b", id="b"), entry("c", id="c")], 1)
        temporal.end_validity(KEY, ["b"], 4)
        assert _ids(store.read(KEY)) == ["a", "c"]

    def test_validity_ended_entries_stay_visible_before_their_end(
        self, temporal: SupportsValidity
    ) -> None:
        """As of a position before its end an ended entry is there; from its end on it is not."""
        temporal.append_at(KEY, [entry("a", id="a")], 3)
        temporal.end_validity(KEY, ["a"], 7)
        assert [_ids(temporal.read_as_of(KEY, p)) for p in (6, 7)] == [["a"], []]

    def test_validity_an_ended_entry_keeps_its_first_end(self, temporal: SupportsValidity) -> None:
        """Ending an entry already ended does not move its end."""
        temporal.append_at(KEY, [entry("a", id="a")], 1)
        temporal.end_validity(KEY, ["a"], 4)
        temporal.end_validity(KEY, ["a"], 9)
        assert _ids(temporal.read_as_of(KEY, 5)) == []

    def test_validity_a_revision_under_the_same_id_has_its_own_span(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """An id ended and appended again: each entry is seen only between its own positions."""
        temporal.append_at(KEY, [entry("first", id="a")], 1)
        temporal.end_validity(KEY, ["a"], 4)
        temporal.append_at(KEY, [entry("second", id="a")], 4)
        seen = [_contents(temporal.read_as_of(KEY, p)) for p in (3, 4)]
        assert seen == [["first"], ["second"]]
        assert _contents(store.read(KEY)) == ["second"]

    def test_validity_end_is_scoped_to_its_key(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """Ending ids at one key leaves the same ids at another key current."""
        temporal.append_at(KEY, [entry("a", id="a")], 1)
        temporal.append_at(OTHER_KEY, [entry("a", id="a")], 1)
        temporal.end_validity(KEY, ["a"], 2)
        assert _ids(store.read(OTHER_KEY)) == ["a"]

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
        assert _ids(searching.search(KEY, "term")) == ["new"]

    def test_validity_search_as_of_finds_what_was_current(self, temporal: SupportsValidity) -> None:
        """A search as of a position finds the entries valid then, ended or not since."""
        temporal.append_at(KEY, [entry("term old", id="old")], 1)
        temporal.end_validity(KEY, ["old"], 3)
        temporal.append_at(KEY, [entry("term new", id="new")], 3)
        assert [_ids(temporal.search_as_of(KEY, "term", p)) for p in (2, 3)] == [
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
        assert _ids(searching.search(KEY, _RANKED)) == _ids(searching.search(OTHER_KEY, _RANKED))

    def test_validity_search_as_of_ranks_as_the_key_did_then(
        self, store: MemoryStore, temporal: SupportsValidity
    ) -> None:
        """Entries added later do not sway a search as of a position: it ranks as the key was."""
        temporal.append_at(KEY, _PRESENT, 1)
        temporal.append_at(KEY, _HISTORY, 5)
        temporal.append_at(OTHER_KEY, _PRESENT, 1)
        assert _ids(temporal.search_as_of(KEY, _RANKED, 2)) == _ids(
            temporal.search_as_of(OTHER_KEY, _RANKED, 2)
        )

    # -- close (optional) ------------------------------------------------------------------

    def test_close_can_be_called_twice(self, store: MemoryStore) -> None:
        """close is safe to call more than once."""
        _skip_without(SupportsClose, "close", store)
        assert isinstance(store, SupportsClose)
        store.close()
        store.close()
