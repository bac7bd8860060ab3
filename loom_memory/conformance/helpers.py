"""What the kit's clauses share: the keys and instant they write at, and small readers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from loom_memory.entry import MemoryEntry

KEY = "kit"
OTHER_KEY = "kit-other"
WHEN = datetime(2031, 5, 17, 9, 30, tzinfo=UTC)


def entry(content: Any, **fields: Any) -> MemoryEntry:
    """Build an entry with a fixed timestamp, so clauses compare whole entries."""
    return MemoryEntry(content=content, timestamp=fields.pop("timestamp", WHEN), **fields)


def ids(entries: list[MemoryEntry]) -> list[object]:
    return [item.id for item in entries]


def contents(entries: list[MemoryEntry]) -> list[Any]:
    return [item.content for item in entries]


def skip_without(capability: type, verb: str, store: object) -> None:
    if not isinstance(store, capability):
        pytest.skip(f"optional capability {verb!r} ({capability.__name__}) not provided")
