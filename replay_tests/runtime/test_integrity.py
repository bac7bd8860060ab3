"""ADR 0011: the hash chain over stored events, and ``verify_log`` finding the first bad row.

Every alteration is made the way an attacker with database access would make it: raw SQL on
the stored rows (sqlite3 on the file; psycopg on PostgreSQL, where ``db_url`` gives each test a
fresh database of its own).
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from loom_runtime import FlowContext, IntegrityUnsupportedError, LogEvent, Loom
from loom_runtime.integrity import (
    GENESIS,
    Anchor,
    Tampering,
    global_link,
    stream_link,
    verify_log,
)
from loom_runtime.stream import stream_id


class Noted(LogEvent):
    TOPIC = "test.integrity.Noted"
    text: str


class Database:
    """Raw SQL on the log's own tables, bypassing loom (``?`` placeholders on both backends)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.events = "stored_events" if self.is_sqlite else "loom_events"
        self.id = "rowid" if self.is_sqlite else "notification_id"

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        statement = statement.format(events=self.events, id=self.id)
        if self.is_sqlite:
            with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn, conn:
                return conn.execute(statement, params).fetchall()
        libpq = make_url(self.url).set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(libpq, autocommit=True) as conn:
            cursor = conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    def swap(self, column: str, a: int, b: int) -> None:
        """Exchange ``column`` between the events at positions ``a`` and ``b``."""
        [(value_a,)] = self.sql(f"SELECT {column} FROM {{events}} WHERE {{id}} = ?", a)
        [(value_b,)] = self.sql(f"SELECT {column} FROM {{events}} WHERE {{id}} = ?", b)
        if column == self.id:
            self.sql("UPDATE {events} SET {id} = -1 WHERE {id} = ?", a)
            self.sql("UPDATE {events} SET {id} = ? WHERE {id} = ?", a, b)
            self.sql("UPDATE {events} SET {id} = ? WHERE {id} = -1", b)
        else:
            self.sql(f"UPDATE {{events}} SET {column} = ? WHERE {{id}} = ?", value_b, a)
            self.sql(f"UPDATE {{events}} SET {column} = ? WHERE {{id}} = ?", value_a, b)


@pytest.fixture
def loom(db_url: str) -> Iterator[Loom]:
    with Loom(db_url) as instance:

        @instance.flow("steps")
        def steps(ctx: FlowContext, n: int) -> int:
            return sum(ctx.decide(f"step{i}", lambda i=i: i * n) for i in range(3))

        yield instance


def _record(loom: Loom, executions: int) -> int:
    """Run ``executions`` flows of 5 events each; the log's position afterwards."""
    for n in range(executions):
        loom.run("steps", n=n)
    return loom.log.position


def test_an_untouched_log_verifies_after_many_executions(loom: Loom) -> None:
    """Every event is chained: an untouched log is ok, all events checked, head at the end."""
    position = _record(loom, 40)
    report = verify_log(loom.log)
    assert report.ok, report
    assert report.checked == position == 200
    assert report.head is not None and report.head.notification_id == position


def test_an_empty_log_verifies(loom: Loom) -> None:
    """Nothing stored, nothing wrong."""
    report = verify_log(loom.log)
    assert report.ok and report.checked == 0 and report.head is None


def test_concurrent_appends_from_two_looms_keep_one_chain(db_url: str, loom: Loom) -> None:
    """Two Loom instances writing at once still produce one unbroken chain."""
    with Loom(db_url) as other:

        @other.flow("steps")
        def steps(ctx: FlowContext, n: int) -> int:
            return sum(ctx.decide(f"step{i}", lambda i=i: i + n) for i in range(3))

        errors: list[BaseException] = []

        def work(instance: Loom) -> None:
            try:
                _record(instance, 15)
            except BaseException as exc:  # surfaced below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(x,)) for x in (loom, other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    report = verify_log(loom.log)
    assert report.ok, report
    assert report.checked == 150


def test_a_refused_append_leaves_no_chain_row(loom: Loom) -> None:
    """A version conflict rolls back the chain row with the event: the log still verifies."""
    stream = stream_id("notes")
    loom.log.append(stream, expected_version=0, events=[(Noted, {"text": "a"})])
    with pytest.raises(Exception, match="moved past version"):
        loom.log.append(stream, expected_version=0, events=[(Noted, {"text": "b"})])
    loom.log.append(stream, expected_version=1, events=[(Noted, {"text": "c"})])
    assert verify_log(loom.log).ok


def test_altered_state_bytes_are_located(db_url: str, loom: Loom) -> None:
    """Editing one event's stored JSON is reported as altered, at that event."""
    _record(loom, 4)
    Database(db_url).sql("UPDATE {events} SET state = ? WHERE {id} = ?", b'{"value":1}', 7)
    report = verify_log(loom.log)
    assert (report.problem, report.position, report.checked) == (Tampering.ALTERED, 7, 6)


def test_an_altered_topic_is_located(db_url: str, loom: Loom) -> None:
    """The topic is part of what is chained, not just the state."""
    _record(loom, 2)
    Database(db_url).sql("UPDATE {events} SET topic = ? WHERE {id} = ?", "loom.execution.Failed", 5)
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.ALTERED, 5)


def test_a_deleted_event_is_located(db_url: str, loom: Loom) -> None:
    """Removing an event from the middle is reported as deleted, at its position."""
    _record(loom, 4)
    Database(db_url).sql("DELETE FROM {events} WHERE {id} = ?", 9)
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.DELETED, 9)


def test_deleting_the_last_event_is_located(db_url: str, loom: Loom) -> None:
    """The chain outlives the events table's tail: a removed last event is still missed."""
    position = _record(loom, 2)
    Database(db_url).sql("DELETE FROM {events} WHERE {id} = ?", position)
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.DELETED, position)


def test_swapped_states_are_located_at_the_first(db_url: str, loom: Loom) -> None:
    """Exchanging two events' stored states is caught at the earlier of the two."""
    _record(loom, 4)
    Database(db_url).swap("state", 3, 12)
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.ALTERED, 3)


def test_swapped_positions_are_reported_as_reordered(db_url: str, loom: Loom) -> None:
    """Exchanging two events' notification ids is a reorder, found at the earlier id."""
    _record(loom, 4)
    db = Database(db_url)
    db.swap(db.id, 4, 11)
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.REORDERED, 4)


def test_swapped_versions_within_a_stream_are_reported_as_reordered(
    db_url: str, loom: Loom
) -> None:
    """Reordering one stream's events (its versions) is a reorder too."""
    _record(loom, 1)
    db = Database(db_url)
    db.sql("UPDATE {events} SET originator_version = 100 WHERE {id} = 2")
    db.sql("UPDATE {events} SET originator_version = 2 WHERE {id} = 3")
    db.sql("UPDATE {events} SET originator_version = 3 WHERE {id} = 2")
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.REORDERED, 2)


def test_an_inserted_event_is_located(db_url: str, loom: Loom) -> None:
    """A row written around loom has no chain row: reported as inserted, at its position."""
    position = _record(loom, 2)
    db = Database(db_url)
    [(topic, state)] = db.sql("SELECT topic, state FROM {events} WHERE {id} = 1")
    forged = uuid.uuid4()
    db.sql(
        "INSERT INTO {events} (originator_id, originator_version, topic, state) "
        "VALUES (?, 1, ?, ?)",
        forged.hex if db.is_sqlite else forged,
        topic,
        state,
    )
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.INSERTED, position + 1)


@pytest.mark.parametrize("position", [0, -1])
@pytest.mark.parametrize("table", ["events", "chain"])
def test_a_row_stored_below_position_one_is_reported_inserted(
    db_url: str, loom: Loom, position: int, table: str
) -> None:
    """The walk began after position 0, so a row stored at 0 or below was never checked,
    while every read of its stream saw it: a forged decision appended to an execution under a
    clean verify (an anchor's head unchanged too). Positions start at 1; anything below is
    reported inserted, in either table."""
    _record(loom, 2)
    db = Database(db_url)
    anchor = verify_log(loom.log).head
    if table == "events":
        [(stream, version, topic, state)] = db.sql(
            "SELECT originator_id, originator_version, topic, state FROM {events} WHERE {id} = 2"
        )
        db.sql(
            "INSERT INTO {events} ({id}, originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?, ?)",
            position,
            stream,
            version + 100,
            topic,
            state,
        )
    else:
        [row] = db.sql("SELECT * FROM loom_chain WHERE notification_id = 2")
        db.sql("INSERT INTO loom_chain VALUES (?, ?, ?, ?, ?)", position, *row[1:])
    for report in (verify_log(loom.log), verify_log(loom.log, anchor=anchor)):
        assert (report.problem, report.position) == (Tampering.INSERTED, position)


def test_a_chain_row_respelt_is_reported(db_url: str, loom: Loom) -> None:
    """A chain row's stream id rewritten in another spelling of the same UUID (capitals)
    passed: the walk compared spellings as one. The writer reads a stream's head by its exact
    spelling, so the next append linked to the wrong one and verify then blamed that genuine
    event. Reported at the edited row, as an event row respelt is."""
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL stores a uuid, which has one spelling")
    _record(loom, 2)
    db = Database(db_url)
    db.sql("UPDATE loom_chain SET originator_id = upper(originator_id) WHERE notification_id = 2")
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.ALTERED, 2)


def test_a_deleted_chain_row_is_located(db_url: str, loom: Loom) -> None:
    """An event whose chain row is gone is unvouched for, at its position."""
    _record(loom, 2)
    Database(db_url).sql("DELETE FROM loom_chain WHERE notification_id = 6")
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.INSERTED, 6)


def test_an_edited_chain_row_breaks_the_chain(db_url: str, loom: Loom) -> None:
    """Re-hashing an altered event's own chain row does not help: the next link breaks."""
    _record(loom, 2)
    db = Database(db_url)
    db.sql("UPDATE {events} SET state = ? WHERE {id} = 4", b'{"value":2}')
    db.sql("UPDATE loom_chain SET stream_hash = ? WHERE notification_id = 4", bytes(32))
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.CHAIN_BROKEN, 4)


def test_an_event_deleted_with_its_chain_row_breaks_the_chain(db_url: str, loom: Loom) -> None:
    """Removing both rows of a position is found at the next one, which no longer links."""
    _record(loom, 2)
    db = Database(db_url)
    db.sql("DELETE FROM {events} WHERE {id} = 5")
    db.sql("DELETE FROM loom_chain WHERE notification_id = 5")
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.CHAIN_BROKEN, 6)


def test_garbage_in_the_rows_is_reported_not_raised(db_url: str, loom: Loom) -> None:
    """Whatever the columns hold (text for bytes, a non-UUID id, NULLs), verify reports."""
    _record(loom, 2)
    db = Database(db_url)
    if db.is_sqlite:  # SQLite's loose typing lets anything into any column
        db.sql("UPDATE {events} SET state = 'not bytes', topic = NULL WHERE {id} = 2")
        db.sql("UPDATE {events} SET originator_id = 'not-a-uuid' WHERE {id} = 3")
        db.sql("UPDATE loom_chain SET global_hash = 'x' WHERE notification_id = 4")
    else:
        db.sql("UPDATE {events} SET state = ?, topic = '' WHERE {id} = 2", b"\xff\x00")
    report = verify_log(loom.log)
    assert (report.problem, report.position) == (Tampering.ALTERED, 2)


def test_a_rewritten_and_rechained_log_fails_its_anchor(db_url: str, loom: Loom) -> None:
    """An attacker who re-chains the log passes a plain verify, but not the kept anchor."""
    _record(loom, 3)
    anchor = verify_log(loom.log).head
    assert anchor is not None
    db = Database(db_url)
    db.sql("UPDATE {events} SET state = ? WHERE {id} = 2", b'{"value":3}')
    _rechain(db)
    assert verify_log(loom.log).ok  # the chain alone cannot tell
    report = verify_log(loom.log, anchor=anchor)
    assert (report.problem, report.position) == (Tampering.ANCHOR_MISMATCH, anchor.notification_id)


def test_a_truncated_log_fails_its_anchor(db_url: str, loom: Loom) -> None:
    """Cutting events off the end (with their chain rows) is found against the anchor."""
    position = _record(loom, 2)
    anchor = verify_log(loom.log).head
    db = Database(db_url)
    db.sql("DELETE FROM {events} WHERE {id} > ?", position - 2)
    db.sql("DELETE FROM loom_chain WHERE notification_id > ?", position - 2)
    assert verify_log(loom.log).ok
    report = verify_log(loom.log, anchor=anchor)
    assert (report.problem, report.position) == (Tampering.DELETED, position)


def test_a_matching_anchor_verifies_and_later_appends_are_fine(loom: Loom) -> None:
    """The anchor pins what was written before it; appending after it is normal use."""
    _record(loom, 2)
    anchor = verify_log(loom.log).head
    _record(loom, 2)
    assert verify_log(loom.log, anchor=anchor).ok
    assert not verify_log(loom.log, anchor=Anchor(notification_id=3, global_hash="00")).ok


def test_sqlalchemy_persistence_cannot_be_verified(tmp_path: Path) -> None:
    """The eventsourcing-sqlalchemy recorder keeps no chain: verify says so, typed."""
    with (
        Loom(f"sqlite:///{tmp_path / 'sa.db'}", persistence="sqlalchemy") as loom,
        pytest.raises(IntegrityUnsupportedError, match="persistence='sqlalchemy'"),
    ):
        verify_log(loom.log)


def _rechain(db: Database) -> None:
    """Recompute every chain row from the (altered) events, as an attacker knowing ADR 0011."""
    events = db.sql("SELECT {id}, originator_id, originator_version, topic, state FROM {events}")
    db.sql("DELETE FROM loom_chain")
    previous, streams = GENESIS, {}
    for position, originator, version, topic, state in sorted(events):
        stream_hash = stream_link(
            streams.get(originator, GENESIS),
            topic=topic,
            originator_id=originator,
            version=version,
            state=state,
        )
        previous = global_link(previous, position, stream_hash)
        streams[originator] = stream_hash
        db.sql(
            "INSERT INTO loom_chain VALUES (?, ?, ?, ?, ?)",
            position,
            originator,
            version,
            stream_hash,
            previous,
        )
