"""`SupportsSimilarity`: the optional verbs of a store that ranks by similarity of embeddings.

A similarity store answers ``search`` like any other (its entries, best first, at most
``limit``), but "matches" has no meaning of its own there: cosine similarity is defined
between a query and EVERY entry, so an unthresholded store returns the whole key, least
unrelated first, and "a query matching nothing returns []" never holds. The store therefore
has a floor, :attr:`min_score`: a hit is an entry whose similarity is at least the floor. The
right floor is a property of the embedding model, not of the store (ADR 0039), so it is an
option of the store, and :meth:`search_scored` can raise it per call.

:attr:`model` names the embedding space. A store refuses to be opened with another model
than the one it was indexed with (:class:`~loom_memory.errors.EmbeddingModelChangedError`):
a changed model is a new index, never a silent mix.

Presence is the feature flag, as for every optional verb (:mod:`loom_memory.store`); the
conformance kit runs the similarity clauses on stores that have these verbs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from loom_memory.entry import MemoryEntry
from loom_memory.store import DEFAULT_SEARCH_LIMIT


@runtime_checkable
class SupportsSimilarity(Protocol):
    """Optional: search by cosine similarity of embeddings, with a floor."""

    @property
    def model(self) -> str:
        """The identity of the embedding model the store's vectors come from."""
        ...

    @property
    def min_score(self) -> float:
        """The floor: the least similarity a hit may have."""
        ...

    def search_scored(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        min_score: float | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """As ``search``, each hit with its similarity; ``min_score`` replaces the floor."""
        ...

    def search_by_vector(
        self,
        key: str,
        vector: Sequence[float],
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        min_score: float | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """As :meth:`search_scored` for a query already embedded (by the store's model): how
        a caller that records the query's embedding searches without the model."""
        ...
