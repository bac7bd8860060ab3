"""Clauses of a store whose tokenizer stems (:class:`~loom_memory.text.Tokenizer`).

A store declares the capability by its ``tokenizer`` attribute: one whose ``stemmer`` is set.
The clauses pin what stemming must not change between backends: WHICH entries a query
matches is decided by the tokenizer alone (an entry matches when it shares a stemmed term with
the query), so SQLite, PostgreSQL and the in-memory reference, ranking differently, still
match the same entries.
"""

from __future__ import annotations

import random

import pytest

from loom_memory.conformance.helpers import KEY, entry, ids
from loom_memory.store import MAX_SEARCH_LIMIT, MemoryStore, SupportsSearch
from loom_memory.text import PLAIN, Tokenizer

_FORMS = (
    ("run", "runs", "running"),
    ("search", "searches", "searched", "searching"),
    ("index", "indexes", "indexed", "indexing"),
    ("connect", "connection", "connected", "connecting"),
    ("table", "tables"),
    ("quick", "quickly"),
)
"""Inflections of a few words: each group shares one Snowball English stem."""


class StemmingClauses:
    """A stemming store's search: skipped, by name, on a store whose tokenizer does not stem."""

    @pytest.fixture
    def stemming(self, store: MemoryStore) -> SupportsSearch:
        tokenizer: Tokenizer = getattr(store, "tokenizer", PLAIN)
        if tokenizer.stemmer is None or not isinstance(store, SupportsSearch):
            pytest.skip(f"{type(store).__name__} does not stem (capability: a stemming tokenizer)")
        return store

    def test_a_stemming_store_finds_another_inflection(
        self, stemming: SupportsSearch, store: MemoryStore
    ) -> None:
        """A query word finds an entry holding only another inflection of it."""
        store.append(KEY, [entry("the runner runs daily", id="a"), entry("walk", id="b")])
        assert ids(stemming.search(KEY, "running")) == ["a"]

    def test_a_stemming_store_matches_exactly_the_entries_sharing_a_stem(
        self, stemming: SupportsSearch, store: MemoryStore
    ) -> None:
        """Every query matches exactly the entries sharing a tokenizer term with it."""
        tokenizer: Tokenizer = getattr(store, "tokenizer", PLAIN)
        words = [word for forms in _FORMS for word in forms]
        rng = random.Random(3)
        texts = {f"e{n}": " ".join(rng.sample(words, rng.randint(1, 4))) for n in range(60)}
        store.append(KEY, [entry(body, id=name) for name, body in texts.items()])
        for _ in range(40):
            query = " ".join(rng.sample(words, rng.randint(1, 3)))
            wanted = set(tokenizer.query_terms(query))
            expected = {
                name for name, body in texts.items() if wanted & set(tokenizer.tokenize(body))
            }
            found = stemming.search(KEY, query, limit=MAX_SEARCH_LIMIT)
            assert set(ids(found)) == expected, query
