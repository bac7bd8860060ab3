"""MemoryEntry's wire format and the memory error hierarchy."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime

import msgspec
import pytest

import loom_memory.errors
from loom_memory import EntryNotSerialisableError, MemoryEntry, MemoryStoreError
from loom_memory.entry import decode_entry, encode_entries
from loom_runtime.errors import LoomError, NotSerialisableError

WHEN = datetime(2031, 1, 1, tzinfo=UTC)


def test_absent_fields_are_omitted_not_null() -> None:
    """An entry without id, role or origin encodes none of them, so none can read back null."""
    [data] = encode_entries([MemoryEntry(content="x", timestamp=WHEN)])
    assert msgspec.json.decode(data) == {"content": "x", "timestamp": "2031-01-01T00:00:00Z"}


def test_encode_decode_round_trips() -> None:
    """decode_entry inverts encode_entries for a fully populated entry."""
    entry = MemoryEntry(content={"a": [1, 2.0]}, id="i", role="tool", timestamp=WHEN, origin="o")
    [data] = encode_entries([entry])
    assert decode_entry(data) == entry


def test_a_single_entry_is_not_a_batch() -> None:
    """Passing one MemoryEntry where a list is expected is refused, not iterated."""
    with pytest.raises(EntryNotSerialisableError) as raised:
        encode_entries(MemoryEntry(content="x"))  # type: ignore[arg-type]
    assert raised.value.path == "entries"


def test_entry_errors_are_runtime_serialisation_errors() -> None:
    """A caller catching loom_runtime's NotSerialisableError also catches a memory entry error."""
    with pytest.raises(NotSerialisableError):
        encode_entries([MemoryEntry(content=float("nan"))])


def test_every_memory_error_is_a_loom_error() -> None:
    """Every error class of loom_memory.errors derives from MemoryStoreError and LoomError."""
    classes = [
        cls
        for _, cls in inspect.getmembers(loom_memory.errors, inspect.isclass)
        if cls.__module__ == "loom_memory.errors"
    ]
    assert len(classes) >= 6
    assert all(issubclass(cls, MemoryStoreError) and issubclass(cls, LoomError) for cls in classes)
