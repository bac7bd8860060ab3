"""ADR 0036: concurrent SQLite appends in one process share a commit, each still durable first.

The commit is held open on purpose (a gate inside the first transaction), so which appends
queue behind it is decided by the test, not by timing: while it is held, the queued callers
must not have returned and nothing of theirs may be visible; once released, they commit in
one transaction, and each caller gets its own outcome.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from typing import Any

import pytest

from loom_runtime import StreamConflictError
from loom_runtime.log import Row
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.group_commit import GroupCommit, Pending
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder
from replay_tests.runtime.test_held_writer import _recorder

FOLLOWERS = 6
WAIT_S = 30


class Gate:
    """Counts commits; holds the first one open until released, and can fail the second."""

    def __init__(self, recorder: ChainedSQLiteRecorder, *, fail_second: bool = False) -> None:
        self.recorder = recorder
        self.commits = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_second = fail_second
        original = recorder.writing

        @contextmanager
        def gated() -> Iterator[Any]:
            with original() as cursor:
                self.commits += 1
                if self.commits == 1:
                    self.entered.set()
                    assert self.release.wait(WAIT_S)
                yield cursor
                if self.fail_second and self.commits == 2:
                    raise OSError("disk full (injected before the group's commit)")

        recorder.writing = gated  # type: ignore[method-assign]

    def wait_until_queued(self, count: int) -> None:
        """Until ``count`` appends wait behind the held commit (they block on a condition)."""
        group = self.recorder.group_commit
        while group.queued < count:
            threading.Event().wait(0.001)


def _rows(stream: uuid.UUID, versions: range) -> list[Row]:
    return [Row(stream=stream, version=v, topic="test.Noted", state=b"{}") for v in versions]


def _visible(log: EventsourcingLog, stream: uuid.UUID) -> int:
    """Rows of ``stream`` another connection sees: what has been committed."""
    path = str(log.settings.url.database)
    with closing(sqlite3.connect(path)) as conn:
        query = "SELECT COUNT(*) FROM stored_events WHERE originator_id = ?"
        return int(conn.execute(query, (stream.hex,)).fetchone()[0])


class Appender(threading.Thread):
    """One caller: appends ``rows`` and keeps what it got back."""

    def __init__(self, log: EventsourcingLog, rows: list[Row]) -> None:
        super().__init__()
        self.log, self.rows = log, rows
        self.ids: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.ids = self.log.insert_rows(self.rows)
        except BaseException as exc:  # checked by the test
            self.error = exc


def _hold_first_commit(log: EventsourcingLog, gate: Gate) -> Appender:
    leader = Appender(log, _rows(uuid.uuid4(), range(1, 2)))
    leader.start()
    assert gate.entered.wait(WAIT_S)
    return leader


def test_appends_queued_behind_a_commit_share_the_next_one(sqlite_log: EventsourcingLog) -> None:
    """Six appends arriving during one commit are written by one more commit, not six."""
    gate = Gate(_recorder(sqlite_log))
    leader = _hold_first_commit(sqlite_log, gate)
    streams = [uuid.uuid4() for _ in range(FOLLOWERS)]
    followers = [Appender(sqlite_log, _rows(stream, range(1, 3))) for stream in streams]
    for follower in followers:
        follower.start()
    gate.wait_until_queued(FOLLOWERS)
    gate.release.set()
    for appender in [leader, *followers]:
        appender.join(WAIT_S)
        assert appender.error is None
    assert gate.commits == 2
    ids = [i for appender in [leader, *followers] for i in appender.ids]
    assert sorted(ids) == list(range(1, 2 + 2 * FOLLOWERS))
    assert all(_visible(sqlite_log, stream) == 2 for stream in streams)
    report = sqlite_log.verify()
    assert report.ok, report


def test_no_queued_append_returns_before_its_commit(sqlite_log: EventsourcingLog) -> None:
    """While the commit ahead is held, the queued callers wait and nothing of theirs is
    visible: ``decide`` cannot return before its decision is durable."""
    gate = Gate(_recorder(sqlite_log))
    leader = _hold_first_commit(sqlite_log, gate)
    stream = uuid.uuid4()
    follower = Appender(sqlite_log, _rows(stream, range(1, 2)))
    follower.start()
    gate.wait_until_queued(1)
    assert follower.is_alive()
    assert follower.ids == []
    assert _visible(sqlite_log, stream) == 0
    gate.release.set()
    follower.join(WAIT_S)
    leader.join(WAIT_S)
    assert follower.ids and _visible(sqlite_log, stream) == 1


def _between_two_good_appends(
    log: EventsourcingLog, middle: list[Row]
) -> tuple[BaseException | None, Gate, tuple[uuid.UUID, uuid.UUID]]:
    """Queue ``middle`` between two good appends behind a held commit, so the three share the
    next one; the error ``middle``'s caller got, the gate, the good appends' streams. The good
    ones must have succeeded."""
    gate = Gate(_recorder(log))
    leader = _hold_first_commit(log, gate)
    before, after = uuid.uuid4(), uuid.uuid4()
    group = [
        Appender(log, _rows(before, range(1, 2))),
        Appender(log, middle),
        Appender(log, _rows(after, range(1, 2))),
    ]
    for appender in group:
        appender.start()
    gate.wait_until_queued(len(group))
    gate.release.set()
    for appender in [leader, *group]:
        appender.join(WAIT_S)
    assert group[0].error is None and group[2].error is None
    assert (_visible(log, before), _visible(log, after)) == (1, 1)
    return group[1].error, gate, (before, after)


def test_a_conflict_in_the_group_fails_only_its_own_caller(sqlite_log: EventsourcingLog) -> None:
    """A queued append whose version is taken raises the typed conflict; the appends around
    it in the same commit are stored and chained."""
    taken = uuid.uuid4()
    sqlite_log.insert_rows(_rows(taken, range(1, 2)))
    error, gate, _ = _between_two_good_appends(sqlite_log, _rows(taken, range(1, 2)))
    assert isinstance(error, StreamConflictError)
    assert gate.commits == 2
    assert _visible(sqlite_log, taken) == 1
    assert sqlite_log.verify().ok


def test_an_append_the_driver_refuses_fails_only_its_own_caller(
    sqlite_log: EventsourcingLog,
) -> None:
    """A value the driver cannot bind (a version past SQLite's integers) is that caller's
    problem, as a conflict is: it failed every append of its group (ADR 0036 says one
    caller's failure is its own), where alone each of them is stored."""
    unbindable = _rows(uuid.uuid4(), range(2**63, 2**63 + 1))
    error, gate, _ = _between_two_good_appends(sqlite_log, unbindable)
    assert isinstance(error, OverflowError)
    assert gate.commits == 2
    assert sqlite_log.verify().ok


def test_a_failed_group_commit_fails_every_member_and_stores_none(
    sqlite_log: EventsourcingLog,
) -> None:
    """If the shared commit fails, each caller in it gets the error and none of it is stored."""
    gate = Gate(_recorder(sqlite_log), fail_second=True)
    leader = _hold_first_commit(sqlite_log, gate)
    streams = [uuid.uuid4() for _ in range(3)]
    group = [Appender(sqlite_log, _rows(stream, range(1, 2))) for stream in streams]
    for appender in group:
        appender.start()
    gate.wait_until_queued(len(group))
    gate.release.set()
    for appender in [leader, *group]:
        appender.join(WAIT_S)
    assert leader.error is None
    assert all(isinstance(appender.error, OSError) for appender in group)
    assert [_visible(sqlite_log, stream) for stream in streams] == [0, 0, 0]
    sqlite_log.insert_rows(_rows(streams[0], range(1, 2)))
    assert sqlite_log.verify().ok


def test_a_lone_writer_commits_every_append_by_itself(sqlite_log: EventsourcingLog) -> None:
    """Negative control: sequential appends have nothing to share; one commit each."""
    gate = Gate(_recorder(sqlite_log))
    gate.release.set()
    stream = uuid.uuid4()
    for version in range(1, 6):
        sqlite_log.insert_rows(_rows(stream, range(version, version + 1)))
    assert gate.commits == 5


def test_a_leader_interrupted_while_its_group_fills_writes_nothing_and_hands_over() -> None:
    """Interrupted (Ctrl-C) while waiting for its group, a leader leaves nothing queued of its
    own and no commit marked as under way: the next caller commits at once."""
    committed: list[list[str]] = []
    first_commit = threading.Event()
    release = threading.Event()

    def commit(group: Sequence[Pending[str, str]]) -> None:
        if not committed:
            first_commit.set()
            assert release.wait(WAIT_S)
        committed.append([member.work for member in group])
        for member in group:
            member.result = member.work

    group_commit: GroupCommit[str, str] = GroupCommit(commit)
    first = threading.Thread(target=group_commit.submit, args=("first",))
    first.start()
    assert first_commit.wait(WAIT_S)
    queued = [threading.Thread(target=group_commit.submit, args=(f"q{n}",)) for n in range(2)]
    for thread in queued:
        thread.start()
    while group_commit.queued < len(queued):
        threading.Event().wait(0.001)
    release.set()
    for thread in [first, *queued]:
        thread.join(WAIT_S)
    assert committed[-1] == ["q0", "q1"]  # the last commit was shared: the next leader waits

    def interrupted(*_: object, **__: object) -> bool:
        raise KeyboardInterrupt

    turn = group_commit._turn
    turn.wait_for = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        group_commit.submit("interrupted")
    del turn.wait_for
    assert group_commit.queued == 0
    assert group_commit.submit("next") == "next"
    assert committed[-1] == ["next"]
