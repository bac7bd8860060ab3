"""What the kit's clauses share: the keys and instant they write at, and small readers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from loom_memory.entry import MemoryEntry

KEY = "kit"
OTHER_KEY = "kit-other"
WHEN = datetime(2031, 5, 17, 9, 30, tzinfo=UTC)

BAD_KEYS: tuple[Any, ...] = (1, None, b"kit", ("kit",))
"""Keys that are not a ``str``: every verb that takes a key raises InvalidKeyError for each,
optional verbs included (a backend that formats a key into SQL would take ``1`` as ``"1"``)."""
BAD_POSITIONS: tuple[Any, ...] = (-1, True, 1.5)
"""Not log positions: every verb that takes one raises InvalidArgumentError for each."""
BAD_LIMITS: tuple[Any, ...] = (0, -1, 2.5, True)
"""Not positive ints: every verb that takes a limit raises InvalidLimitError for each."""
SIMILAR_KEYS = ("k", "K", "k%", "k_", "k*", "k ", "k/sub")
"""Keys differing only in case, a SQL wildcard or a suffix: a backend that compares keys with
``LIKE``, folds case or matches a prefix mixes them up."""
EXACT_IDS = ("doc", "Doc", "DOC", " doc ", "doc ", "  spaced  ", "spaced", "ünï", "ÜNÏ", "uni")
"""Ids differing only in case, surrounding spaces or accents: an id matches only itself."""


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
