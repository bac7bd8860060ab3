"""ADR 0035: a PostgreSQL append is one statement and one round trip, chained server-side.

Each guarantee is checked where it would break: the round trips are counted on the wire
(libpq's protocol trace of every connection the recorder uses), the server's hashes are held
against Python's (one log written by the old client-side path and the new one verifies as one
chain; the same rows in SQLite and PostgreSQL end on the same head), a version conflict is made
to happen, concurrent processes race on one stream, and a backend is terminated while its append
waits between inserting the events and chaining them.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg import pq
from sqlalchemy.engine import make_url

from loom_runtime import LogEvent, StreamConflictError
from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.postgres import ChainedPostgresRecorder, _Writer

pytestmark = pytest.mark.postgres

PROCESSES = 4
APPENDS_PER_PROCESS = 40


@pytest.fixture
def log(pg_url: str) -> Iterator[EventsourcingLog]:
    opened = open_log(LogSettings(pg_url))
    assert isinstance(opened, EventsourcingLog)
    yield opened
    opened.close()


class Noted(LogEvent):
    TOPIC = "test.postgres_append.Noted"
    text: str


def _recorder(log: EventsourcingLog) -> ChainedPostgresRecorder:
    recorder = log.application.recorder
    assert isinstance(recorder, ChainedPostgresRecorder)
    return recorder


@contextmanager
def _pool_checkouts(recorder: ChainedPostgresRecorder) -> Iterator[list[int]]:
    """The backend pids of every connection checked out of the pool meanwhile."""
    used: list[int] = []
    original = recorder.datastore.get_connection

    @contextmanager
    def noting() -> Iterator[Any]:
        with original() as conn:
            used.append(conn.pgconn.backend_pid)
            yield conn

    recorder.datastore.get_connection = noting  # type: ignore[method-assign]
    try:
        yield used
    finally:
        del recorder.datastore.get_connection


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _rows(stream: uuid.UUID, versions: range, *, topic: str = "test.Noted") -> list[Row]:
    return [Row(stream=stream, version=v, topic=topic, state=b'{"n":%d}' % v) for v in versions]


def _stored(rows: Sequence[Row]) -> list[StoredEvent]:
    return [
        StoredEvent(
            originator_id=row.stream,
            originator_version=row.version,
            topic=row.topic,
            state=row.state,
        )
        for row in rows
    ]


def _append_the_old_way(recorder: ChainedPostgresRecorder, rows: Sequence[Row]) -> None:
    """The append as it was before ADR 0035, from eventsourcing's own steps: one transaction,
    the table lock, NOTIFY, the insert, then the chain computed in Python and inserted."""
    events = _stored(rows)
    with (
        recorder.datastore.get_connection() as conn,
        conn.transaction(),
        conn.cursor() as curs,
    ):
        PostgresApplicationRecorder._insert_stored_events(recorder, curs, events)
        ids = PostgresApplicationRecorder._fetch_ids_after_insert_events(recorder, curs, events)
        recorder.chain.append(curs, events, ids or ())


@contextmanager
def _round_trips(recorder: ChainedPostgresRecorder, directory: Path) -> Iterator[list[int]]:
    """Count the round trips of every connection the recorder takes while inside the block.

    libpq's trace logs each protocol message; the server ends every reply it sends, for a
    simple query or an extended-protocol Sync alike, with one ReadyForQuery, so their number is
    the number of times the client waited for the server. Yields a list filled on exit. The
    connections counted are the pool's checkouts and the writer the recorder holds for its
    one-event appends, taken inside the block (it is given back before and after).
    """
    trace = directory / "libpq.trace"
    datastore = recorder.datastore
    original = datastore.get_connection
    original_getconn = datastore.pool.getconn
    held: list[Any] = []
    counted: list[int] = []
    recorder.release_writer()
    with trace.open("w") as sink:

        def start(conn: Any) -> None:
            conn.pgconn.trace(sink.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

        @contextmanager
        def traced() -> Iterator[Any]:
            with original() as conn:
                start(conn)
                try:
                    yield conn
                finally:
                    conn.pgconn.untrace()

        def traced_getconn(timeout: float | None = None) -> Any:
            conn = original_getconn(timeout)
            start(conn)
            held.append(conn)
            return conn

        datastore.get_connection = traced  # type: ignore[method-assign]
        datastore.pool.getconn = traced_getconn  # type: ignore[method-assign]
        try:
            yield counted
        finally:
            del datastore.get_connection
            del datastore.pool.getconn
            for conn in held:
                conn.pgconn.untrace()
            recorder.release_writer()
    messages = [line.split("\t") for line in trace.read_text().splitlines()]
    counted.append(sum(1 for m in messages if m[:1] == ["B"] and m[2:3] == ["ReadyForQuery"]))


# -- one round trip ------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 20], ids=["one event", "twenty events over two streams"])
def test_an_append_is_one_round_trip(log: EventsourcingLog, tmp_path: Path, batch: int) -> None:
    """Every append, the first on each pooled connection included, waits for the server once.

    Appends of one event go through the recorder's writer connection, which costs one more
    round trip when it is taken (its ``PREPARE``), once per log, never per append."""
    recorder = _recorder(log)
    writer_prepares = 1 if batch == 1 else 0
    first, second = uuid.uuid4(), uuid.uuid4()
    appends = 2 * log.settings.pool_size  # every connection of the pool, twice
    with _round_trips(recorder, tmp_path) as counted:
        for n in range(appends):
            start = n * batch + 1
            half = batch // 2
            rows = _rows(first, range(start, start + batch - half))
            rows += _rows(second, range(start, start + half))
            log.insert_rows(rows)
    assert counted == [appends + writer_prepares]
    assert log.verify().checked == appends * batch


def test_the_counter_sees_the_round_trips_of_the_old_path(
    log: EventsourcingLog, tmp_path: Path
) -> None:
    """Negative control: the same counter on the old client-side path counts one per statement
    (BEGIN, SET, LOCK, NOTIFY, INSERT, heads, chain INSERT, COMMIT), so it can see more than one."""
    recorder = _recorder(log)
    with _round_trips(recorder, tmp_path) as counted:
        _append_the_old_way(recorder, _rows(uuid.uuid4(), range(1, 2)))
    assert counted[0] >= 7


def test_no_notify_is_sent(log: EventsourcingLog, pg_url: str) -> None:
    """Nothing in loom listens, so an append queues no notification for a listener to get."""
    with psycopg.connect(_libpq(pg_url), autocommit=True) as listener:
        listener.execute(f"LISTEN {_recorder(log).channel_name}")
        log.insert_rows(_rows(uuid.uuid4(), range(1, 3)))
        _append_the_old_way(_recorder(log), _rows(uuid.uuid4(), range(1, 2)))
        heard = list(listener.notifies(timeout=0.5))
    assert len(heard) == 1  # the old path's, and only it: the listener does hear


def test_a_subscription_is_refused_with_what_to_do_instead(log: EventsourcingLog) -> None:
    """eventsourcing's subscription would wait for a NOTIFY that never comes: refused, loudly."""
    with pytest.raises(NotImplementedError, match="polling"):
        _recorder(log).subscribe(gt=0)


# -- the same chain ------------------------------------------------------------------------


def _varied_batches() -> list[list[Row]]:
    """Batches that exercise every part of a link: several streams in one batch, one stream
    across batches, non-ASCII and astral topics, an empty state and a large one."""
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    return [
        _rows(a, range(1, 4)),
        _rows(b, range(1, 2), topic="test.Noté") + _rows(a, range(4, 6)),
        [Row(stream=c, version=1, topic="test.🧵", state=b"")],
        [Row(stream=c, version=2, topic="test.Big", state=b'"' + b"x" * 200_000 + b'"')],
        _rows(b, range(2, 5)) + _rows(c, range(3, 4)) + _rows(a, range(6, 7)),
    ]


def test_old_and_new_appends_verify_as_one_chain(log: EventsourcingLog) -> None:
    """A log written alternately by the client-side chain and the server-side one verifies
    from the first row to the last: the two compute the same links."""
    recorder = _recorder(log)
    batches = _varied_batches() + _varied_batches()
    for n, batch in enumerate(batches):
        if n % 2:
            _append_the_old_way(recorder, batch)
        else:
            log.insert_rows(batch)
    report = log.verify()
    assert report.ok, report
    assert report.checked == sum(len(batch) for batch in batches)


def test_postgresql_and_sqlite_end_on_the_same_head(log: EventsourcingLog, tmp_path: Path) -> None:
    """The same rows appended to a fresh SQLite log (chained in Python) and a fresh PostgreSQL
    log (chained by the server) give the same global hash, byte for byte."""
    sqlite = open_log(LogSettings(f"sqlite:///{tmp_path / 'loom.db'}"))
    try:
        for batch in _varied_batches():
            log.insert_rows(batch)
            sqlite.insert_rows(batch)
        expected = sqlite.verify().head
    finally:
        sqlite.close()
    assert expected is not None
    assert log.verify().head == expected


# -- eventsourcing's semantics -------------------------------------------------------------


def test_a_version_conflict_raises_and_writes_nothing_of_the_batch(
    log: EventsourcingLog,
) -> None:
    """A batch whose last event's version is taken is refused whole, with the typed error."""
    taken, fresh = uuid.uuid4(), uuid.uuid4()
    log.insert_rows(_rows(taken, range(1, 3)))
    before = log.position
    with pytest.raises(StreamConflictError, match="moved past version"):
        log.insert_rows(_rows(fresh, range(1, 4)) + _rows(taken, range(2, 3)))
    assert log.rows(fresh) == []
    assert log.position == before
    assert log.verify().ok


def test_a_stale_expected_version_raises_the_conflict(log: EventsourcingLog) -> None:
    """Two writers from one version of an aggregate's stream: the second is told it moved on."""
    stream = uuid.uuid4()
    log.append(stream, expected_version=0, events=[(Noted, {"text": "first"})])
    log.append(stream, expected_version=1, events=[(Noted, {"text": "second"})])
    with pytest.raises(StreamConflictError, match="moved past version 1"):
        log.append(stream, expected_version=1, events=[(Noted, {"text": "stale"})])
    assert [event.text for event in log.events(stream)] == ["first", "second"]


def _race(url: str, shared: str, own: str, ready: Any, go: Any, results: Any) -> None:
    """One process: append to its own stream and race the others for the shared stream's
    next version, as an aggregate does (read the version, append expecting it)."""
    outcome: tuple[int, int] | str
    try:
        log = open_log(LogSettings(url))
        wins = conflicts = 0
        ready.release()
        go.wait()
        try:
            for n in range(1, APPENDS_PER_PROCESS + 1):
                log.insert_rows(_rows(uuid.UUID(own), range(n, n + 1)))
                version = log.stream_version(uuid.UUID(shared))
                try:
                    log.append(
                        uuid.UUID(shared), expected_version=version, events=[(Noted, {"text": own})]
                    )
                    wins += 1
                except StreamConflictError:
                    conflicts += 1
        finally:
            log.close()
        outcome = (wins, conflicts)
    except BaseException as exc:  # reported to the test, which fails on it
        outcome = f"{type(exc).__name__}: {exc}"
    results.put(outcome)


def test_concurrent_processes_lose_nothing_duplicate_nothing_and_keep_one_chain(
    pg_url: str,
) -> None:
    """Processes appending at once: every append that returned is stored once, the shared
    stream's versions are contiguous, positions are unique, and the chain verifies."""
    open_log(LogSettings(pg_url)).close()  # the schema, before the racers
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
    shared = uuid.uuid4()
    owns = [uuid.uuid4() for _ in range(PROCESSES)]
    racers = [
        context.Process(target=_race, args=(pg_url, str(shared), str(own), ready, go, results))
        for own in owns
    ]
    for racer in racers:
        racer.start()
    for _ in racers:
        assert ready.acquire(timeout=120)
    go.set()
    outcomes = [results.get(timeout=300) for _ in racers]
    assert not [failure for failure in outcomes if isinstance(failure, str)], outcomes
    for racer in racers:
        racer.join(timeout=60)
        assert racer.exitcode == 0
    wins = sum(w for w, _ in outcomes)
    assert sum(c for _, c in outcomes) + wins == PROCESSES * APPENDS_PER_PROCESS

    log = open_log(LogSettings(pg_url))
    try:
        assert [r.version for r in log.rows(shared)] == list(range(1, wins + 1))
        for own in owns:
            assert [r.version for r in log.rows(own)] == list(range(1, APPENDS_PER_PROCESS + 1))
        positions = [record.position for record in log.notifications()]
        assert len(positions) == len(set(positions)) == wins + PROCESSES * APPENDS_PER_PROCESS
        report = log.verify()
        assert report.ok, report
    finally:
        log.close()


# -- crash safety --------------------------------------------------------------------------


def _next_position(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END "
        "FROM loom_events_notification_id_seq"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _waiting_append(conn: psycopg.Connection[Any], deadline: float) -> int:
    """The backend whose append waits on a lock (after its events' insert, at the chain's)."""
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            ("%loom_events_append%",),
        ).fetchone()
        if row is not None:
            return int(row[0])
        time.sleep(0.01)
    raise AssertionError("the append never reached the chain insert")


def test_an_append_killed_between_its_events_and_its_chain_leaves_nothing(
    log: EventsourcingLog, pg_url: str
) -> None:
    """The backend is terminated after inserting the events and before chaining them: none of
    the batch is stored, the log verifies, and the next append chains on past the gap."""
    recorder = _recorder(log)
    log.insert_rows(_rows(uuid.uuid4(), range(1, 3)))
    before = log.position
    killed = uuid.uuid4()
    failures: list[BaseException] = []

    def append() -> None:
        try:  # one attempt, not the retried insert_events
            recorder._insert(_stored(_rows(killed, range(1, 4))), None)
        except BaseException as exc:  # the killed append's error, checked below
            failures.append(exc)

    with (
        psycopg.connect(_libpq(pg_url)) as blocker,
        psycopg.connect(_libpq(pg_url), autocommit=True) as admin,
    ):
        # An uncommitted chain row at the position the append's first event will take: the
        # append inserts its events, then waits on this row's key to insert its chain row.
        blocker.execute(
            "INSERT INTO loom_chain VALUES (%s, %s, 1, '\\x00', '\\x00')",
            (_next_position(admin), uuid.uuid4()),
        )
        appender = threading.Thread(target=append)
        appender.start()
        pid = _waiting_append(admin, time.monotonic() + 30)
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        appender.join(timeout=30)
        blocker.rollback()
    assert len(failures) == 1
    assert log.rows(killed) == []
    assert log.position == before
    log.insert_rows(_rows(killed, range(1, 4)))
    report = log.verify()
    assert report.ok, report
    assert report.checked == 5


# -- the writer connection -----------------------------------------------------------------


def _backend_pid(recorder: ChainedPostgresRecorder) -> int | None:
    writer = recorder._writer
    return None if writer is None else writer.pgconn.backend_pid


def test_one_event_appends_share_one_held_connection(log: EventsourcingLog) -> None:
    """Every one-event append after the first uses the same server session, prepared once."""
    recorder = _recorder(log)
    stream = uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 2)))
    first = _backend_pid(recorder)
    assert first is not None
    for version in range(2, 12):
        log.insert_rows(_rows(stream, range(version, version + 1)))
        assert _backend_pid(recorder) == first
    assert log.verify().checked == 11


def test_a_terminated_writer_is_replaced_and_the_append_retried(
    log: EventsourcingLog, pg_url: str
) -> None:
    """The server ends the writer's session between two appends (a restart, an idle timeout):
    the next append fails on that connection, which goes back to the pool to be discarded,
    and the recorder's retry appends through a new one. Nothing is lost or written twice."""
    recorder = _recorder(log)
    stream = uuid.uuid4()
    for version in (1, 2):
        log.insert_rows(_rows(stream, range(version, version + 1)))
    killed = _backend_pid(recorder)
    assert killed is not None
    with psycopg.connect(_libpq(pg_url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
    log.insert_rows(_rows(stream, range(3, 4)))
    assert _backend_pid(recorder) not in (None, killed)
    assert [row.version for row in recorder.stream_rows(stream)] == [1, 2, 3]
    assert log.verify().checked == 3


def test_a_thread_finding_the_writer_busy_appends_through_the_pool(
    log: EventsourcingLog,
) -> None:
    """While one thread appends through the writer, another does not queue behind it in the
    process: it checks a connection out of the pool, and both appends land, chained."""
    recorder = _recorder(log)
    stream = uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 2)))
    writer = _backend_pid(recorder)
    # the writer is busy with another thread's append
    with _pool_checkouts(recorder) as used, recorder._writer_lock:
        done = threading.Thread(target=log.insert_rows, args=(_rows(stream, range(2, 3)),))
        done.start()
        done.join(timeout=30)
        assert not done.is_alive()
    assert used and writer not in used
    assert log.verify().checked == 2


def test_a_pool_of_one_keeps_no_writer(pg_url: str) -> None:
    """With one connection in the pool a held writer would leave reads none: none is held."""
    opened = open_log(LogSettings(pg_url, pool_size=1))
    assert isinstance(opened, EventsourcingLog)
    try:
        stream = uuid.uuid4()
        opened.insert_rows(_rows(stream, range(1, 3)))
        assert _recorder(opened)._writer is None
        assert [row.version for row in _recorder(opened).stream_rows(stream)] == [1, 2]
    finally:
        opened.close()


def test_closing_the_log_gives_the_writer_back(log: EventsourcingLog) -> None:
    """The held connection returns to the pool when the log closes, not left open."""
    recorder = _recorder(log)
    log.insert_rows(_rows(uuid.uuid4(), range(1, 2)))
    writer = recorder._writer
    assert writer is not None
    log.close()
    assert recorder._writer is None
    assert writer.conn.closed


# -- a reply lost after the commit ---------------------------------------------------------


_LOST = "server closed the connection unexpectedly"


def test_an_append_whose_reply_is_lost_after_its_commit_returns_its_own_ids(
    log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server commits the append, then the connection drops before its reply arrives. The
    retry meets the row the lost attempt stored: that is this append having happened, so it
    returns that row's id instead of reporting a conflict, and nothing is written twice."""
    stream = uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 3)))
    original = _Writer.append
    lost: list[list[int]] = []

    def commit_then_lose(self: _Writer, event: StoredEvent, precondition: Any) -> list[int]:
        ids = original(self, event, precondition)
        if not lost:
            lost.append(ids)
            raise psycopg.OperationalError(_LOST)
        return ids

    monkeypatch.setattr(_Writer, "append", commit_then_lose)
    ids = log.insert_rows(_rows(stream, range(3, 4)))
    assert lost and ids == lost[0]
    assert [row.version for row in _recorder(log).stream_rows(stream)] == [1, 2, 3]
    assert log.verify().checked == 3


def test_a_batch_whose_reply_is_lost_after_its_commit_returns_its_own_ids(
    log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through the pool's path (a batch of events, one statement): every event of the
    batch is found stored as sent, so the batch's ids come back in its order."""
    stream, other = uuid.uuid4(), uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 2)))
    original = psycopg.Cursor.fetchone
    lost: list[Any] = []

    appending = threading.get_ident()

    def commit_then_lose(self: psycopg.Cursor[Any]) -> Any:
        row = original(self)
        # Only the append's reply: a thread another test of this process left running (a
        # worker's heartbeat, say) may fetch a row meanwhile (seen once in a full run).
        ours = threading.get_ident() == appending and isinstance(row, dict) and "ids" in row
        if ours and not lost:
            lost.append(row)
            raise psycopg.OperationalError(_LOST)
        return row

    monkeypatch.setattr(psycopg.Cursor, "fetchone", commit_then_lose)
    ids = log.insert_rows(_rows(stream, range(2, 4)) + _rows(other, range(1, 2)))
    monkeypatch.undo()
    assert lost and ids == lost[0]["ids"]
    assert [row.version for row in _recorder(log).stream_rows(stream)] == [1, 2, 3]
    assert [row.version for row in _recorder(log).stream_rows(other)] == [1]
    assert log.verify().checked == 4


def test_a_lost_attempt_then_another_writer_s_row_is_still_a_conflict(
    log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check that makes a lost reply a success compares the stored row with the one sent:
    when the attempt was lost before its commit and another writer stored a different event at
    that version meanwhile, the append is the conflict it always was, and that row stays."""
    stream = uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 3)))
    original = _Writer.append
    lost: list[bool] = []
    theirs = Row(stream=stream, version=3, topic="test.Noted", state=b'{"n":"theirs"}')

    def lose_to_another_writer(self: _Writer, event: StoredEvent, precondition: Any) -> list[int]:
        if not lost:
            lost.append(True)
            log.insert_rows([theirs])  # the writer is held: this one goes through the pool
            raise psycopg.OperationalError(_LOST)
        return original(self, event, precondition)

    monkeypatch.setattr(_Writer, "append", lose_to_another_writer)
    with pytest.raises(StreamConflictError):
        log.insert_rows(_rows(stream, range(3, 4)))
    assert lost
    assert _recorder(log).stream_rows(stream)[-1] == theirs
    assert log.verify().checked == 3


def test_a_position_read_that_keeps_losing_its_connection_is_a_loom_error(
    log: EventsourcingLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run starts by reading the log's position; with the connection lost on every
    retry, eventsourcing's own OperationalError left ``loom.run`` (an append in the same
    state is LogWriteError). It is DatabaseUnavailableError, the lost connection its cause."""
    from eventsourcing.persistence import OperationalError

    from loom_runtime import DatabaseUnavailableError

    def lost() -> int:
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(log.application.recorder, "max_notification_id", lost)
    with pytest.raises(DatabaseUnavailableError) as raised:
        _ = log.position
    assert isinstance(raised.value.__cause__, OperationalError)
