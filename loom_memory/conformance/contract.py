"""`MemoryStoreContract`: every clause module of the kit in one class to subclass."""

from __future__ import annotations

from loom_memory.conformance.close import CloseClauses
from loom_memory.conformance.remove import RemoveClauses
from loom_memory.conformance.replace import ReplaceClauses
from loom_memory.conformance.required import RequiredClauses
from loom_memory.conformance.search import SearchClauses
from loom_memory.conformance.similarity import SimilarityClauses
from loom_memory.conformance.stemming import StemmingClauses
from loom_memory.conformance.validity import ValidityClauses


class MemoryStoreContract(
    RequiredClauses,
    ReplaceClauses,
    RemoveClauses,
    SearchClauses,
    ValidityClauses,
    CloseClauses,
    SimilarityClauses,
    StemmingClauses,
):
    """Subclass as ``TestYourStore`` and provide a ``store`` fixture yielding a fresh store."""
