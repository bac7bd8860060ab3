"""Entries built under freezegun encode exactly like entries with a real datetime."""

from __future__ import annotations

from datetime import UTC, datetime

from freezegun import freeze_time

from loom_memory import MemoryEntry
from loom_memory.entry import decode_entry, encode_entries


def test_an_entry_stamped_by_a_frozen_clock_encodes_like_a_real_one() -> None:
    """FakeDatetime timestamps encode to the same bytes as datetime ones (a rebuild re-encodes)."""
    real = MemoryEntry(content="x", timestamp=datetime(2030, 1, 1, tzinfo=UTC))
    with freeze_time("2030-01-01T00:00:00Z"):
        frozen = MemoryEntry(content="x")
        assert type(frozen.timestamp).__name__ == "FakeDatetime"  # the clock really is frozen
        [data] = encode_entries([frozen])
    assert data == encode_entries([real])[0]
    assert encode_entries([decode_entry(data)]) == [data]
