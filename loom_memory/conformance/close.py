"""Clauses of the optional ``close`` (:class:`~loom_memory.store.SupportsClose`)."""

from __future__ import annotations

from loom_memory.conformance.helpers import (
    skip_without,
)
from loom_memory.store import (
    MemoryStore,
    SupportsClose,
)


class CloseClauses:
    """The optional ``close``: skipped, by name, on a store without it.

    One clause only: what ``close`` releases is not visible through the seam (a disposed
    SQLAlchemy engine opens a new pool on its next use), so a store whose ``close`` does
    nothing passes. That a store keeps values, not the caller's objects, is a clause of every
    store (``RequiredClauses``), not of this one."""

    def test_close_can_be_called_twice(self, store: MemoryStore) -> None:
        """close is safe to call more than once."""
        skip_without(SupportsClose, "close", store)
        assert isinstance(store, SupportsClose)
        store.close()
        store.close()
