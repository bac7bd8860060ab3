"""The chain's exact bytes, pinned: a stored chain verifies only if its links never change.

The hashes below were computed by the link functions before they were rewritten to hash one
buffer (ADR 0048, recording2); any change to how a link is encoded fails here first.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent

from loom_runtime.integrity import GENESIS, global_link, stream_link
from loom_runtime.storage.chain import ChainTable

_STREAM = UUID("12345678-1234-5678-1234-567812345678")
_PREVIOUS = bytes(range(32))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {
                "topic": "loom_runtime.events:Decided",
                "originator_id": _STREAM,
                "version": 7,
                "state": b'{"key":"k","value":"\xc3\xa9"}',
            },
            "6bd1ab05d801490888bdee893a586234d5f67a951e9f93c236a3a60d759f4a44",
        ),
        (
            {"topic": "t", "originator_id": _STREAM.hex, "version": 1, "state": b"{}"},
            "172bd1d3c3744ff62966d4b0577038c96982459dc26932def70792fe2c038ce2",
        ),
        (
            {
                "topic": "t",
                "originator_id": _STREAM.bytes,
                "version": 1,
                "state": memoryview(b"{}"),
            },
            "172bd1d3c3744ff62966d4b0577038c96982459dc26932def70792fe2c038ce2",
        ),
        (
            {"topic": None, "originator_id": "not-a-uuid", "version": 1.5, "state": "text \ud800"},
            "5ddc96925e39620d8beeabcb12f6a06cd3222868f5ecaf9adc240c515c40c7c9",
        ),
        (
            {"topic": b"t", "originator_id": 12, "version": True, "state": bytearray(b"x")},
            "2d97509bfd2d7d5aef1b1c0a396cf951043b9fbed69f9f693a67f3939b609e01",
        ),
    ],
    ids=["as-written", "hex-stream", "bytes-stream", "garbage", "odd-types"],
)
def test_stream_link_bytes_are_pinned(fields: dict[str, Any], expected: str) -> None:
    """A stream link of a fixed row is the same hash it always was, whatever the row holds."""
    assert stream_link(_PREVIOUS, **fields).hex() == expected


def test_global_link_bytes_are_pinned() -> None:
    """A global link of a fixed position and stream hash is the same hash it always was."""
    assert (
        global_link(_PREVIOUS, 42, bytes(32)).hex()
        == "d116d2a2695b6334468ca61537128a9421e30ff03821c3f38dfcda49b6c9478a"
    )
    assert (
        global_link(GENESIS, -1, b"\x01" * 32).hex()
        == "fdcdb4d284ce956d52d5791741d018bca7c59f3f684184b5ebcb39366a94d40f"
    )


class _Cursor:
    """Answers the heads query with empty heads and keeps the chain rows inserted."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def execute(self, statement: str, parameters: Any) -> None:
        if statement.startswith("INSERT"):
            self.rows.append(tuple(parameters))

    def executemany(self, statement: str, rows: Any) -> None:
        self.rows.extend(tuple(row) for row in rows)

    def fetchone(self) -> tuple[None, ...]:
        return (None, None, None)


def test_appended_chain_rows_are_pinned() -> None:
    """The rows a recorder stores for two streams' events are the rows it always stored."""
    other = UUID("87654321-4321-8765-4321-876543218765")
    events = [
        StoredEvent(originator_id=_STREAM, originator_version=1, topic="a", state=b'{"x":1}'),
        StoredEvent(originator_id=other, originator_version=1, topic="b", state=b"{}"),
        StoredEvent(originator_id=_STREAM, originator_version=2, topic="a", state=b'{"x":2}'),
    ]
    cursor = _Cursor()
    ChainTable.for_sqlite("stored_events").append(cursor, events, [5, 6, 7])
    stored = [(row[0], row[1], row[2], row[3].hex(), row[4].hex()) for row in cursor.rows]
    assert stored == [
        (
            5,
            "12345678123456781234567812345678",
            1,
            "3e3a4f80fb65d65182920fef39ee2bf6bd0ea4ac752526385f16ad41fc6860d4",
            "912a50132acca613263ce57a04cb4dd1a9cea2a9a14aa46267d6ed5f626be17f",
        ),
        (
            6,
            "87654321432187654321876543218765",
            1,
            "d5cd66223d8b20de74c25298e9b4182833a4b949ff8005da41df289db15d7c98",
            "200a794a81b6b1d1cd79ddebf4f83c8eb4d46648329302cc7a79e90143ed40ae",
        ),
        (
            7,
            "12345678123456781234567812345678",
            2,
            "be41139848a37978b827f5eacc39d762def9fff8aea2e156427e69774c566d11",
            "bf68dcc86ddaf9a0427c3f6377d75a565c366445acbde8c8b73debeadcb0cb8a",
        ),
    ]
