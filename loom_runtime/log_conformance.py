"""The event-log conformance kit: every clause of :class:`~loom_runtime.log.EventLog` as a test.

An implementation of the port subclasses :class:`EventLogContract` and provides ONE fixture,
``log``, yielding a fresh, empty log (closed afterwards)::

    import pytest
    from loom_runtime import LogSettings
    from loom_runtime.log_conformance import EventLogContract

    class TestMyLog(EventLogContract):
        @pytest.fixture
        def log(self, tmp_path):
            log = MyLog(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
            yield log
            log.close()

and adds ``pytest.register_assert_rewrite("loom_runtime.log_conformance")`` to the conftest.py
that precedes it, so a failing clause shows its values. The class has no ``Test`` prefix so
that pytest never collects the kit itself; each test states one clause in its docstring, so
``-k`` selects clauses and a failure names the clause broken.

Two capabilities are optional, and their clauses SKIP naming them: the hash chain (a log
that keeps none raises :class:`~loom_runtime.errors.IntegrityUnsupportedError` from
``verify``) and preconditions read inside the append (a log whose ``checks_preconditions`` is
false). One clause needs more than the port: that ``verify`` reports an event edited behind
the log's back needs someone to edit it, which only the backend's author can do; provide a
fixture ``tamper`` (a callable taking a position, changing the stored bytes of the event
there) or that clause skips, saying so::

    @pytest.fixture
    def tamper(self, log):
        def edit(position):
            ...  # UPDATE the events table's state at ``position``, bypassing the log
        return edit

Why so many clauses pin an edge (a free row ahead of a taken one, ``event_at`` between
positions, every verb of a closed log): each was a wrong backend the kit once let pass
(ADR 0020, amended 6 Dec).

What the kit cannot see:

* concurrency between processes. Two writers racing on one version are simulated in one
  process (a stale expected version); the real races are the runtime's own process tests.
* durability. Nothing here kills a process between an append and its commit.
* permanent gaps in positions (a failed PostgreSQL insert consumes one): no portable way to
  make one, so paging past a gap is tested only where the backend's own tests make one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, ClassVar
from uuid import UUID, uuid4

import msgspec
import pytest

from loom_runtime.errors import (
    IntegrityUnsupportedError,
    LogCorruptError,
    LoomClosedError,
    StreamConflictError,
)
from loom_runtime.execution import Execution, project_execution
from loom_runtime.integrity import Anchor, VerifyReport
from loom_runtime.log import EventLog, Precondition, Row
from loom_runtime.stream import Change, LogEvent, stream_id


class KitNoted(LogEvent):
    """The kit's one event class: a note with a number, stored under a topic of its own."""

    TOPIC: ClassVar[str] = "loom.conformance.Noted"
    text: str
    n: int


class KitCounted(LogEvent):
    """A second topic, for the topic filter."""

    TOPIC: ClassVar[str] = "loom.conformance.Counted"
    n: int


def notes(*texts: str) -> list[Change]:
    """One :class:`KitNoted` change per text, numbered from 1."""
    return [(KitNoted, {"text": text, "n": n}) for n, text in enumerate(texts, start=1)]


class KitRefused(Exception):
    """What the kit's precondition raises when it does not hold."""


def kit_precondition(*, holds: bool) -> Precondition:
    """A :class:`Precondition` that holds or not by its parameter alone: ``SELECT ? = 'yes'``
    reads no table, so it means the same on every database (SQLite runs it as a subquery of
    the insert, PostgreSQL with ``$1`` for the ``?``)."""
    return Precondition(
        sql="SELECT ? = 'yes'",
        parameter="yes" if holds else "no",
        refusal=lambda: KitRefused("the kit's precondition does not hold"),
    )


class EventLogContract:
    """The clauses every :class:`~loom_runtime.log.EventLog` keeps (see the module docstring).

    Subclasses provide the ``log`` fixture: a fresh, empty log.
    """

    @pytest.fixture
    def log(self) -> Any:
        raise NotImplementedError("provide a `log` fixture yielding a fresh, empty EventLog")

    # -- positions and versions --------------------------------------------------------------

    def test_an_empty_log_is_at_position_zero(self, log: EventLog) -> None:
        """An empty log's head is 0 and a stream nobody wrote is at version 0."""
        assert log.position == 0
        assert log.stream_version(stream_id("kit:nobody")) == 0

    def test_append_returns_one_increasing_position_per_event(self, log: EventLog) -> None:
        """append returns the events' positions, increasing, the last of them the new head."""
        positions = log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        assert len(positions) == 2 and positions[0] < positions[1] == log.position

    def test_append_moves_the_stream_version(self, log: EventLog) -> None:
        """After appending n events at version v the stream is at version v + n."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x", "y"))
        log.append(stream, expected_version=2, events=notes("z"))
        assert log.stream_version(stream) == 3

    def test_positions_are_one_order_across_streams(self, log: EventLog) -> None:
        """Appends to different streams share one increasing sequence of positions."""
        first = log.append(stream_id("kit:a"), expected_version=0, events=notes("x"))
        second = log.append(stream_id("kit:b"), expected_version=0, events=notes("y"))
        assert first[0] < second[0]

    # -- optimistic concurrency --------------------------------------------------------------

    def test_an_append_at_a_taken_version_is_refused_whole(self, log: EventLog) -> None:
        """An append whose expected version is stale raises StreamConflictError, writes nothing."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x"))
        head = log.position
        with pytest.raises(StreamConflictError):
            log.append(stream, expected_version=0, events=notes("late", "and more"))
        assert log.position == head and log.stream_version(stream) == 1

    def test_a_stale_aggregate_cannot_be_saved(self, log: EventLog) -> None:
        """save appends an aggregate's new events; a copy that lost the race gets a conflict."""
        execution = _execution()
        log.save(execution)
        winner, loser = _load(log, execution.id), _load(log, execution.id)
        winner.complete(output=msgspec.Raw(b"1"))
        log.save(winner)
        loser.complete(output=msgspec.Raw(b"2"))
        with pytest.raises(StreamConflictError):
            log.save(loser)
        assert _load(log, execution.id).output == msgspec.Raw(b"1")

    def test_append_replanned_plans_again_on_the_new_version(self, log: EventLog) -> None:
        """A plan that lost a race is called again with the new version; each event lands once."""
        stream = stream_id("kit:a")
        seen: list[int] = []

        def plan(version: int) -> tuple[Sequence[Change], str]:
            seen.append(version)
            if len(seen) == 1:  # another writer appends between this read and this append
                log.append(stream, expected_version=version, events=notes("rival"))
            return [(KitNoted, {"text": "mine", "n": version + 1})], f"planned at {version}"

        [position], outcome = log.append_replanned(stream, plan, what="a kit write")
        assert seen == [0, 1] and position == log.position
        assert outcome == "planned at 1"  # the outcome of the attempt that was appended
        assert [e.text for e in log.events(stream)] == ["rival", "mine"]

    def test_a_planned_precondition_is_asked_with_each_attempts_events(self, log: EventLog) -> None:
        """A precondition given as a function is called once per attempt with events, with
        the events that attempt planned (which documents a sync seals is decided there)."""
        stream = stream_id("kit:a")
        asked: list[list[str]] = []

        def plan(version: int) -> tuple[Sequence[Change], None]:
            if not asked:  # another writer appends between this read and this append
                log.append(stream, expected_version=version, events=notes("rival"))
            return [(KitNoted, {"text": f"at {version}", "n": version + 1})], None

        def precondition(events: Sequence[Change]) -> None:
            asked.append([fields["text"] for _, fields in events])

        log.append_replanned(stream, plan, what="a kit write", precondition=precondition)
        assert asked == [["at 0"], ["at 1"]]
        assert [e.text for e in log.events(stream)] == ["rival", "at 1"]

    def test_an_empty_plan_appends_nothing(self, log: EventLog) -> None:
        """append_replanned with a plan of no events writes nothing and returns no positions."""
        assert log.append_replanned(stream_id("kit:a"), lambda _v: ([], 7), what="a no-op") == (
            [],
            7,
        )
        assert log.position == 0

    # -- reading a stream ----------------------------------------------------------------------

    def test_events_read_back_in_version_order(self, log: EventLog) -> None:
        """events(stream) returns the appended events, decoded, with their stream and versions."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x", "y", "z"))
        events = list(log.events(stream))
        assert [(e.originator_id, e.originator_version, e.text) for e in events] == [
            (stream, 1, "x"),
            (stream, 2, "y"),
            (stream, 3, "z"),
        ]

    def test_events_read_newest_first_and_limited(self, log: EventLog) -> None:
        """events(desc=True, limit=1) returns only the stream's last event."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x", "y"))
        assert [e.text for e in log.events(stream, desc=True, limit=1)] == ["y"]

    def test_events_newest_first_and_limit_each_alone(self, log: EventLog) -> None:
        """events(desc=True) without a limit returns every event newest first; limit without
        desc returns the first events, oldest first; after_version applies to both."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x", "y", "z"))
        assert [e.text for e in log.events(stream, desc=True)] == ["z", "y", "x"]
        assert [e.text for e in log.events(stream, limit=2)] == ["x", "y"]
        assert [e.text for e in log.events(stream, after_version=1, desc=True)] == ["z", "y"]
        assert [e.text for e in log.events(stream, after_version=1, limit=1)] == ["y"]

    def test_events_read_after_a_version(self, log: EventLog) -> None:
        """events(after_version=v) returns the events with versions above v."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x", "y", "z"))
        assert [e.text for e in log.events(stream, after_version=1)] == ["y", "z"]

    def test_an_event_keeps_an_aware_timestamp(self, log: EventLog) -> None:
        """Every event carries the tz-aware time it was created at, close to now."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x"))
        [event] = log.events(stream_id("kit:a"))
        assert event.timestamp.tzinfo is not None
        assert abs((datetime.now(UTC) - event.timestamp).total_seconds()) < 60

    # -- following the log ---------------------------------------------------------------------

    def test_notifications_follow_the_log_in_order(self, log: EventLog) -> None:
        """notifications() returns every stored row once, by increasing position."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        log.append(stream_id("kit:b"), expected_version=0, events=notes("z"))
        records = list(log.notifications())
        assert [(r.stream, r.version) for r in records] == [
            (stream_id("kit:a"), 1),
            (stream_id("kit:a"), 2),
            (stream_id("kit:b"), 1),
        ]
        assert all(a.position < b.position for a, b in pairwise(records))

    def test_notifications_between_positions_whatever_the_page(self, log: EventLog) -> None:
        """notifications(after=a, upto=b) returns positions in (a, b] for any page size."""
        positions = log.append(stream_id("kit:a"), expected_version=0, events=notes(*"abcdefg"))
        after, upto = positions[1], positions[5]
        for page_size in (1, 2, 3, 500):
            found = log.notifications(after=after, upto=upto, page_size=page_size)
            assert [r.position for r in found] == positions[2:6]

    def test_notifications_of_some_topics(self, log: EventLog) -> None:
        """notifications(topics=...) returns only rows stored under those topics."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x"))
        log.append(stream_id("kit:b"), expected_version=0, events=[(KitCounted, {"n": 7})])
        found = list(log.notifications(topics=[KitCounted.TOPIC]))
        assert [(r.topic, r.stream) for r in found] == [(KitCounted.TOPIC, stream_id("kit:b"))]

    def test_a_record_decodes_to_its_event(self, log: EventLog) -> None:
        """decode(record) returns the stored event, with the record's stream and version."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x"))
        [record] = log.notifications()
        event = log.decode(record)
        assert isinstance(event, KitNoted) and event.text == "x"
        assert (event.originator_id, event.originator_version) == (record.stream, 1)

    def test_a_row_of_an_unknown_topic_is_refused(self, log: EventLog) -> None:
        """decode of a row whose topic is no registered event class raises LogCorruptError."""
        row = Row(stream=uuid4(), version=1, topic="kit.nobody.Defines", state=b"{}")
        with pytest.raises(LogCorruptError):
            log.decode(row)

    def test_a_corrupt_row_of_a_known_topic_is_refused(self, log: EventLog) -> None:
        """decode of a row whose topic is known but whose bytes are not its event (not JSON,
        not UTF-8, a field of the wrong type or missing) raises LogCorruptError, never the
        decoder's own error: a caller catches one type for every bad row (ADR 0018)."""
        for state in (b"{not json", b"\xff\x00", b'{"text": 1, "n": "x"}', b"{}", b"null"):
            row = Row(stream=uuid4(), version=1, topic=KitNoted.TOPIC, state=state)
            with pytest.raises(LogCorruptError):
                log.decode(row)

    def test_the_event_at_a_position(self, log: EventLog) -> None:
        """event_at(p) returns the event stored at p, its position and its timestamp."""
        [_, second] = log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        stamped = log.event_at(second)
        assert stamped is not None and stamped.position == second
        assert stamped.event.text == "y" and stamped.timestamp == stamped.event.timestamp

    def test_the_event_at_or_after_a_position(self, log: EventLog) -> None:
        """event_at(p) is the first event at or after p (positions may skip): event_at(0)
        is the first event, event_at(first) the first, event_at(second) the second."""
        [first, second] = log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        found = [log.event_at(position) for position in (0, first, second)]
        assert [(s.position, s.event.text) if s else None for s in found] == [
            (first, "x"),
            (first, "x"),
            (second, "y"),
        ]

    def test_no_event_past_the_head(self, log: EventLog) -> None:
        """event_at(p) for p past the head returns None."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x"))
        assert log.event_at(log.position + 1) is None

    def test_timestamps_grow_with_positions(self, log: EventLog) -> None:
        """Events appended one after another have non-decreasing timestamps."""
        for n in range(3):
            log.append(stream_id("kit:a"), expected_version=n, events=notes(str(n)))
        stamps = [log.decode(r).timestamp for r in log.notifications()]
        assert stamps == sorted(stamps)

    # -- stored rows, as bundles carry them ----------------------------------------------------

    def test_rows_are_stored_exactly_as_inserted(self, log: EventLog) -> None:
        """insert_rows stores the given bytes unchanged: rows(stream) returns them equal."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        copy = uuid4()
        rows = [msgspec.structs.replace(row, stream=copy) for row in log.rows(stream_id("kit:a"))]
        positions = log.insert_rows(rows)
        assert len(positions) == 2 and positions[-1] == log.position
        assert log.rows(copy) == rows
        assert [e.text for e in log.events(copy)] == ["x", "y"]

    def test_inserting_a_taken_version_is_refused_whole(self, log: EventLog) -> None:
        """insert_rows with a row at a version the stream holds raises StreamConflictError and
        writes nothing: not even the free rows of another stream given ahead of it."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x"))
        head = log.position
        taken = log.rows(stream)
        fresh = uuid4()
        free = [msgspec.structs.replace(row, stream=fresh) for row in taken]
        with pytest.raises(StreamConflictError):
            log.insert_rows([*free, *taken])
        assert (log.position, log.stream_version(fresh)) == (head, 0)
        with pytest.raises(StreamConflictError):
            log.insert_rows(taken)
        assert log.position == head

    # -- preconditions (optional: checks_preconditions) ----------------------------------------

    def test_a_false_precondition_refuses_every_write_whole(self, log: EventLog) -> None:
        """Where checks_preconditions, a write given a precondition that holds is stored, and
        one given a precondition that does not raises its refusal and stores nothing: append
        (of several events), append_replanned, save and insert_rows (else: skipped)."""
        if not log.checks_preconditions:
            pytest.skip("capability not supported: preconditions (checks_preconditions)")
        stream = stream_id("kit:a")
        log.append(
            stream, expected_version=0, events=notes("x"), precondition=kit_precondition(holds=True)
        )
        head = log.position
        refused = kit_precondition(holds=False)
        with pytest.raises(KitRefused):
            log.append(stream, expected_version=1, events=notes("y", "z"), precondition=refused)
        with pytest.raises(KitRefused):
            log.append_replanned(
                stream, lambda _v: (notes("w"), None), what="a kit write", precondition=refused
            )
        execution = _execution()
        with pytest.raises(KitRefused):
            log.save(execution, precondition=refused)
        copy = [msgspec.structs.replace(row, stream=uuid4()) for row in log.rows(stream)]
        with pytest.raises(KitRefused):
            log.insert_rows(copy, precondition=refused)
        assert log.position == head
        assert [log.stream_version(s) for s in (stream, execution.id, copy[0].stream)] == [1, 0, 0]

    # -- what the log shares -------------------------------------------------------------------

    def test_the_engine_reaches_the_same_database(self, log: EventLog) -> None:
        """log.engine connects to the log's database, for projections to share it."""
        with log.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
        assert log.engine.url.database == log.settings.url.database

    @pytest.fixture
    def tamper(self, log: EventLog) -> Callable[[int], None]:
        """Override: change the stored bytes of the event at a position behind the log's back."""
        _verified(log)  # a log without a chain skips for that reason first
        pytest.skip(
            "provide a fixture tamper (a callable taking a position, editing the stored state "
            "of the event there, bypassing the log) to check that verify reports the edit"
        )

    def test_a_fresh_log_verifies(self, log: EventLog) -> None:
        """A log that keeps a hash chain verifies every event it stored (else: skipped)."""
        log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        report = _verified(log)
        assert report.ok and report.checked == 2

    def test_verify_holds_the_log_to_an_anchor(self, log: EventLog) -> None:
        """The head a verify reports checks out as an anchor later; an anchor the log does not
        hold (another hash at a position it has, or a position past its end) is reported, not
        ok: so a verify that never looks cannot pass (else: skipped)."""
        [first, _] = log.append(stream_id("kit:a"), expected_version=0, events=notes("x", "y"))
        head = _verified(log).head
        assert head is not None and head.notification_id == log.position
        assert log.verify(anchor=head).ok
        forged = Anchor(notification_id=first, global_hash="00" * 32)
        past = Anchor(notification_id=log.position + 1, global_hash=head.global_hash)
        assert [log.verify(anchor=anchor).ok for anchor in (forged, past)] == [False, False]

    def test_verify_reports_an_event_edited_behind_the_log(
        self, log: EventLog, tamper: Callable[[int], None]
    ) -> None:
        """After the stored bytes of one event are edited outside the log, verify is not ok
        and names that event's position (else: skipped, without a chain or a tamper fixture)."""
        [_, second, _] = log.append(
            stream_id("kit:a"), expected_version=0, events=notes("x", "y", "z")
        )
        assert _verified(log).ok
        tamper(second)
        report = log.verify()
        assert (report.ok, report.position) == (False, second)

    def test_a_closed_log_refuses_every_use_and_closes_again_quietly(self, log: EventLog) -> None:
        """After close, every verb that reaches the database raises LoomClosedError (nothing
        reaches a closed pool): each write, each read, position, event_at, verify (or its
        IntegrityUnsupportedError) and a connection from engine; a second close does nothing.
        decode, settings and redactor read no database and may still answer."""
        stream = stream_id("kit:a")
        log.append(stream, expected_version=0, events=notes("x"))
        copy = [msgspec.structs.replace(row, stream=uuid4()) for row in log.rows(stream)]
        log.close()
        log.close()
        uses: dict[str, Callable[[], object]] = {
            "append": lambda: log.append(stream, expected_version=1, events=notes("y")),
            "append_replanned": lambda: log.append_replanned(
                stream, lambda _v: (notes("y"), None), what="a kit write"
            ),
            "save": lambda: log.save(_execution()),
            "insert_rows": lambda: log.insert_rows(copy),
            "stream_version": lambda: log.stream_version(stream),
            "events": lambda: list(log.events(stream)),
            "rows": lambda: log.rows(stream),
            "notifications": lambda: list(log.notifications()),
            "event_at": lambda: log.event_at(1),
            "position": lambda: log.position,
            "engine.connect": lambda: log.engine.connect(),
            "verify": lambda: log.verify(),  # a log without a chain may say so instead
        }
        answered = []
        for verb, use in uses.items():
            try:
                use()
            except LoomClosedError:
                continue
            except IntegrityUnsupportedError:
                if verb == "verify":
                    continue
                raise
            answered.append(verb)
        assert answered == []


def _verified(log: EventLog) -> VerifyReport:
    """``log.verify()``, or the clause skipped when the log keeps no hash chain."""
    try:
        return log.verify()
    except IntegrityUnsupportedError:
        pytest.skip("capability not supported: a hash chain (verify)")


def _execution() -> Execution:
    return Execution.start(
        id=uuid4(), flow="kit", code_version="1", input=msgspec.Raw(b"null"), log_position=0
    )


def _load(log: EventLog, execution_id: UUID) -> Execution:
    execution = project_execution(None, log.events(execution_id))
    assert execution is not None
    return execution
