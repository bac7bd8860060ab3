"""Clauses of the optional ``search`` (:class:`~loom_memory.store.SupportsSearch`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from loom_memory.conformance.helpers import (
    BAD_KEYS,
    BAD_LIMITS,
    KEY,
    OTHER_KEY,
    contents,
    entry,
    ids,
    skip_without,
)
from loom_memory.errors import (
    InvalidKeyError,
    InvalidLimitError,
)
from loom_memory.store import (
    DEFAULT_SEARCH_LIMIT,
    MAX_SEARCH_LIMIT,
    MemoryStore,
    SupportsRemove,
    SupportsReplace,
    SupportsSearch,
)


class SearchClauses:
    """The optional ``search``: skipped, by name, on a store without it."""

    @pytest.fixture
    def searching(self, store: MemoryStore) -> SupportsSearch:
        """The store, for clauses of the optional ``search``; skips when it is absent."""
        skip_without(SupportsSearch, "search", store)
        assert isinstance(store, SupportsSearch)
        return store

    def test_search_finds_a_matching_entry(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """An entry containing the query term is returned."""
        store.append(KEY, [entry("the database failover runbook"), entry("lunch menu")])
        assert contents(searching.search(KEY, "failover")) == ["the database failover runbook"]

    def test_search_ors_the_terms(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """Query terms are OR-ed: an entry matching any one term is returned."""
        store.append(KEY, [entry("alpha only"), entry("beta only"), entry("gamma only")])
        hits = searching.search(KEY, "alpha beta")
        assert sorted(contents(hits)) == ["alpha only", "beta only"]

    def test_search_more_terms_never_fewer_hits(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Adding a term that matches nothing never removes a hit (no AND semantics)."""
        store.append(KEY, [entry("postgres vacuum"), entry("postgres replication")])
        short = searching.search(KEY, "postgres")
        longer = searching.search(KEY, "postgres unrelatedterm")
        assert sorted(contents(longer)) == sorted(contents(short)) != []

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
        assert contents(searching.search(KEY, "shared")) == ["shared word here"]

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
        assert contents(searching.search(KEY, "echo")) == ["echo", "echo"]

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
        assert contents(searching.search(KEY, query)) == ["disk full on node-7"]

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
        assert contents(searching.search(KEY, query)) == [text]

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
        """At most limit hits are returned, chosen among every match: entries that match
        nothing, appended first, take none of the limit (no limit before the match)."""
        store.append(KEY, [entry("lunch menu") for _ in range(12)])
        store.append(KEY, [entry(f"match {n}") for n in range(5)])
        hits = contents(searching.search(KEY, "match", limit=3))
        assert len(hits) == 3 and all(str(hit).startswith("match") for hit in hits)

    def test_search_default_limit_is_the_documented_one(
        self, store: MemoryStore, searching: SupportsSearch
    ) -> None:
        """Without a limit, search returns at most DEFAULT_SEARCH_LIMIT hits."""
        store.append(KEY, [entry(f"match {n}") for n in range(DEFAULT_SEARCH_LIMIT + 5)])
        assert len(searching.search(KEY, "match")) == DEFAULT_SEARCH_LIMIT

    def test_search_limit_is_clamped(self, store: MemoryStore, searching: SupportsSearch) -> None:
        """A limit above MAX_SEARCH_LIMIT returns at most MAX_SEARCH_LIMIT hits."""
        store.append(KEY, [entry(f"match {n}") for n in range(MAX_SEARCH_LIMIT + 5)])
        assert len(searching.search(KEY, "match", limit=MAX_SEARCH_LIMIT * 10)) == (
            MAX_SEARCH_LIMIT
        )

    @pytest.mark.parametrize("limit", BAD_LIMITS)
    def test_search_refuses_a_bad_limit(self, searching: SupportsSearch, limit: Any) -> None:
        """A limit that is not a positive int raises InvalidLimitError."""
        with pytest.raises(InvalidLimitError):
            searching.search(KEY, "anything", limit=limit)

    def test_search_refuses_a_non_string_key(self, searching: SupportsSearch) -> None:
        """A non-str key raises InvalidKeyError from search too."""
        for bad_key in BAD_KEYS:
            with pytest.raises(InvalidKeyError):
                searching.search(bad_key, "anything")

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
        assert ids(searching.search(KEY, "term")) == ["kept"]
