"""A SQLite stream read runs on the connection the recorder holds for one-statement reads, and
returns every row exactly as stored.

The held connection keeps its compiled statements; a read through eventsourcing's pool checks a
connection out and compiles the statement again every time, which cost a short execution's load
half its time (ADR 0043, "Amended 2026-12-02 (replay250)"). A held connection another thread is
using, or a read failing on it, leaves the read to the pool. These pin that what comes back is
each row's stored version, topic and state, whatever a tampered file holds, that a failing read
fails as it always did, and which connection reads.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from loom_runtime.errors import LogCorruptError
from loom_runtime.log import Row
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.sqlite import DECISION_TOPIC
from replay_tests.runtime.test_held_writer import _recorder
from replay_tests.runtime.test_sqlite_position_reader import _counting_checkouts
from replay_tests.runtime.test_stream_rows_topic import _read, _recorded, _stored

_CREATED = "loom.execution.Created"
_UNDECODABLE = (
    "stored rows hold text that is not UTF-8 (column 'CASE WHEN topic = ? THEN 0 ELSE topic "
    "END'): the log's database was changed outside loom"
)
"""The error a stream read gives for such a topic (naming the column as the read names it)."""


def _tamper(path: Path, execution_id: UUID, column: str, value: object, topic: str) -> None:
    """Set ``column`` of the stream's first row of ``topic`` to ``value``."""
    with sqlite3.connect(path) as connection:
        connection.execute(
            f"UPDATE stored_events SET {column} = ? WHERE rowid = (SELECT min(rowid) "
            "FROM stored_events WHERE originator_id = ? AND topic = ?)",
            (value, execution_id.hex, topic),
        )


def test_an_untampered_stream_reads_as_stored(sqlite_url: str, tmp_path: Path) -> None:
    """Start, decisions, a failed decision and the end: each row as the file holds it."""
    execution_id = _recorded(sqlite_url)
    stored = _stored(tmp_path / "loom.db", execution_id)
    assert len({topic for _, topic, _ in stored}) == 4
    assert _read(sqlite_url, execution_id) == stored


@pytest.mark.parametrize("topic", [DECISION_TOPIC, _CREATED])
@pytest.mark.parametrize(
    "version", [None, "seven", 2.5, b"\x07", -3, 0, 9_223_372_036_854_775_807, 1e300, -1e300]
)
def test_a_tampered_version_comes_back_as_stored(
    sqlite_url: str, tmp_path: Path, topic: str, version: object
) -> None:
    """A version rewritten as NULL, text, a fraction, a BLOB, a negative or huge number, of a
    decision's row or another's, is read back as the file holds it."""
    execution_id = _recorded(sqlite_url)
    _tamper(tmp_path / "loom.db", execution_id, "originator_version", version, topic)
    stored = _stored(tmp_path / "loom.db", execution_id)
    assert version in [row_version for row_version, _, _ in stored]
    assert _read(sqlite_url, execution_id) == stored


@pytest.mark.parametrize(
    "new_topic",
    [None, _CREATED.encode(), "a topic with spaces", " ", "", "7", "tópico \u00e9 \x00 end"],
)
def test_a_tampered_plain_topic_comes_back_as_stored(
    sqlite_url: str, tmp_path: Path, new_topic: str | bytes | None
) -> None:
    """A start row's topic rewritten as NULL, BLOB bytes, text with spaces, empty, digits or
    non-ASCII text is read back as the file holds it."""
    execution_id = _recorded(sqlite_url)
    _tamper(tmp_path / "loom.db", execution_id, "topic", new_topic, _CREATED)
    stored = _stored(tmp_path / "loom.db", execution_id)
    assert new_topic in [row_topic for _, row_topic, _ in stored]
    assert _read(sqlite_url, execution_id) == stored


def test_a_topic_that_is_not_utf8_fails_as_damage(sqlite_url: str, tmp_path: Path) -> None:
    """A start row's topic stored as text that is not UTF-8 fails the read (on the held
    connection, then again through the pool) as ``LogCorruptError`` naming the column (it was
    sqlite3's ``OperationalError``, a traceback in every command: ADR 0018, "not UTF-8")."""
    execution_id = _recorded(sqlite_url)
    with sqlite3.connect(tmp_path / "loom.db") as connection:
        connection.execute(
            "UPDATE stored_events SET topic = CAST(x'ff6c6f6f6d' AS TEXT) "
            "WHERE originator_id = ? AND topic = ?",
            (execution_id.hex, _CREATED),
        )
    with pytest.raises(LogCorruptError, match=re.escape(_UNDECODABLE)):
        _read(sqlite_url, execution_id)


def _mixed_rows(stream: UUID) -> list[Row]:
    """A start-like row, two decision rows, and an end-like row."""
    topics = ["test.Started", DECISION_TOPIC, DECISION_TOPIC, "test.Ended"]
    return [
        Row(stream=stream, version=version, topic=topic, state=b'{"n":%d}' % version)
        for version, topic in enumerate(topics, start=1)
    ]


def test_a_stream_read_takes_no_connection_from_the_pool(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the held connection free, a stream's rows are read without a pool checkout (a
    checkout and the statement compiled again each time cost more than a short stream)."""
    recorder = _recorder(sqlite_log)
    stream = uuid4()
    rows = _mixed_rows(stream)
    sqlite_log.insert_rows(rows)
    taken = _counting_checkouts(recorder, monkeypatch)

    assert sqlite_log.rows(stream) == rows

    assert taken == []


def test_a_busy_held_connection_leaves_the_stream_read_to_the_pool(
    sqlite_log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread inside the held connection: this one reads through the pool, the same
    rows."""
    recorder = _recorder(sqlite_log)
    stream = uuid4()
    rows = _mixed_rows(stream)
    sqlite_log.insert_rows(rows)
    taken = _counting_checkouts(recorder, monkeypatch)

    with recorder._reader_lock:
        assert sqlite_log.rows(stream) == rows

    assert len(taken) == 1
