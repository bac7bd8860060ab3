"""Clauses only a similarity backend can fail (:class:`~loom_memory.similarity.SupportsSimilarity`).

An inverted index passes "a query matching nothing returns []" for free: a term is in an entry
or it is not. Cosine similarity is defined against every entry, so a vector store without a
floor returns the whole key for any query; the first clause runs on every searching store and
fails exactly such a store. The others need the similarity verbs (skipped, by name, without):
every hit meets the floor, a raised floor drops the weaker hits, and a store reopened with
another embedding model is refused rather than ranked across two spaces. That last clause
needs to reopen the store's storage, which only its author can do: provide a fixture
``reopen_with_other_model`` (a callable taking no arguments) or the clause skips, saying so.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loom_memory.conformance.helpers import KEY, contents, entry, skip_without
from loom_memory.errors import EmbeddingModelChangedError
from loom_memory.similarity import SupportsSimilarity
from loom_memory.store import MemoryStore, SupportsSearch

_EXACT = "replication lag alert on the primary database"
_PARTIAL = "database backups run nightly"


class SimilarityClauses:
    """The floor of a similarity store, and its refusal of a changed model."""

    @pytest.fixture
    def similar(self, store: MemoryStore) -> SupportsSimilarity:
        """The store, for the similarity clauses; skips when it has no similarity verbs."""
        skip_without(SupportsSimilarity, "search_scored", store)
        assert isinstance(store, SupportsSimilarity)
        return store

    @pytest.fixture
    def reopen_with_other_model(self) -> Callable[[], object]:
        """Override: open this store's storage again with another embedding model."""
        pytest.skip(
            "provide a fixture reopen_with_other_model (open the store's storage with another "
            "embedding model) to check that a changed model is refused"
        )

    def test_search_of_an_unrelated_query_returns_empty(self, store: MemoryStore) -> None:
        """A query sharing nothing with any entry returns [] (a similarity store needs a floor)."""
        skip_without(SupportsSearch, "search", store)
        assert isinstance(store, SupportsSearch)
        store.append(KEY, [entry(_EXACT), entry(_PARTIAL), entry("lunch menu")])
        assert store.search(KEY, "zebra quasar xylophone") == []

    def test_similarity_hits_meet_the_floor_best_first(
        self, store: MemoryStore, similar: SupportsSimilarity
    ) -> None:
        """Every scored hit is at least min_score, best first, and search returns the same."""
        store.append(KEY, [entry(_PARTIAL), entry("lunch menu"), entry(_EXACT)])
        scored = similar.search_scored(KEY, _EXACT)
        scores = [score for _, score in scored]
        assert scored and all(score >= similar.min_score for score in scores)
        assert scores == sorted(scores, reverse=True)
        assert isinstance(similar, SupportsSearch)
        assert similar.search(KEY, _EXACT) == [hit for hit, _ in scored]

    def test_similarity_a_raised_floor_drops_weaker_hits(
        self, store: MemoryStore, similar: SupportsSimilarity
    ) -> None:
        """min_score per call is honoured: a floor between two hits keeps only the better."""
        store.append(KEY, [entry(_PARTIAL), entry(_EXACT)])
        scored = similar.search_scored(KEY, _EXACT, min_score=-1.0)
        assert contents([hit for hit, _ in scored]) == [_EXACT, _PARTIAL]
        between = (scored[0][1] + scored[1][1]) / 2
        kept = similar.search_scored(KEY, _EXACT, min_score=between)
        assert contents([hit for hit, _ in kept]) == [_EXACT]

    def test_similarity_a_changed_model_is_refused(
        self,
        store: MemoryStore,
        similar: SupportsSimilarity,
        reopen_with_other_model: Callable[[], object],
    ) -> None:
        """Opening the same storage with another embedding model raises, never mixes."""
        store.append(KEY, [entry(_EXACT)])
        with pytest.raises(EmbeddingModelChangedError):
            reopen_with_other_model()
