"""A SQLite stream read returns every row exactly as stored, its topic included.

The read has SQLite send a marker (the integer 0) for the decision topic and stands one str
in for it (ADR 0048, "The replay path"); these pin that what comes back is still each row's
stored topic, for the decision topic, every other topic, and a topic a tampered file holds
as a BLOB or as NULL.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from loom_runtime import FlowContext, Loom
from loom_runtime.execution import Execution
from loom_runtime.storage.sqlite import DECISION_TOPIC


def _flow(ctx: FlowContext) -> str:
    ctx.decide("first", lambda: {"a": 1})

    def fails() -> None:
        raise ValueError("no")

    with contextlib.suppress(ValueError):  # recorded as the decision's failure
        ctx.decide("second", fails, input={"q": "x"})
    return "done"


def _recorded(url: str) -> UUID:
    with Loom(url) as loom:
        loom.flow("f")(_flow)
        return loom.run("f").execution_id


def _stored(path: Path, execution_id: UUID) -> list[tuple[int, Any, bytes]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(
            "SELECT originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version",
            (execution_id.hex,),
        ).fetchall()


def _read(url: str, execution_id: UUID) -> list[tuple[int, Any, bytes]]:
    with Loom(url) as loom:
        return [(row.version, row.topic, row.state) for row in loom.log.rows(execution_id)]


def test_the_elided_topic_is_the_decision_topic() -> None:
    """The topic the read elides is the one a recorded decision's class declares."""
    assert DECISION_TOPIC == Execution.DecisionRecorded.TOPIC


def test_every_row_comes_back_with_its_stored_topic(sqlite_url: str, tmp_path: Path) -> None:
    """Start, decision, failed decision and end rows: versions, topics and states as stored."""
    execution_id = _recorded(sqlite_url)
    stored = _stored(tmp_path / "loom.db", execution_id)
    assert {topic for _, topic, _ in stored} >= {DECISION_TOPIC, Execution.DecisionFailed.TOPIC}
    assert _read(sqlite_url, execution_id) == stored


@pytest.mark.parametrize(
    "topic",
    [DECISION_TOPIC.encode(), "loom.execution.DecisionRecordeD", DECISION_TOPIC + " ", None],
)
def test_a_tampered_topic_comes_back_as_stored(
    sqlite_url: str, tmp_path: Path, topic: bytes | str | None
) -> None:
    """A decision row whose topic was rewritten (as BLOB bytes, as other text, or as NULL,
    which eventsourcing's nullable column accepts) is read back as the file holds it, never
    as the decision topic."""
    execution_id = _recorded(sqlite_url)
    with sqlite3.connect(tmp_path / "loom.db") as connection:
        connection.execute(
            "UPDATE stored_events SET topic = ? WHERE originator_id = ? AND topic = ?",
            (topic, execution_id.hex, DECISION_TOPIC),
        )
    stored = _stored(tmp_path / "loom.db", execution_id)
    assert topic in [row_topic for _, row_topic, _ in stored]
    assert _read(sqlite_url, execution_id) == stored
