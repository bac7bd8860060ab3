"""ADR 0049, "Writes": a PostgreSQL append reads its precondition in its own
statement, server-side, with no round trip of its own.

The claims: an append given a precondition is still one round trip (the writer's and the
pool's paths, one event and a batch); one whose precondition does not hold stores nothing and
raises the precondition's own refusal; a keyless Loom's new execution sends nothing but its
appends (the key-table look rode through a connection of its own before). The windows these
close are pinned where they were open: ``test_keyless_window.py`` (encryption switched on
just before a keyless append) and ``test_sealed_append_check.py`` (a key destroyed between
seal and commit), both run on PostgreSQL too.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from loom_runtime import FlowContext, Loom
from loom_runtime.log import Precondition
from loom_runtime.storage.application import EventsourcingLog
from replay_tests.runtime.test_postgres_append import (  # noqa: F401 (log: a fixture)
    _recorder,
    _round_trips,
    _rows,
    log,
)

pytestmark = pytest.mark.postgres


class _Refused(Exception):
    pass


HOLDS = Precondition(sql="SELECT ? = 'yes'", parameter="yes", refusal=_Refused)
FAILS = Precondition(sql="SELECT ? = 'yes'", parameter="no", refusal=_Refused)
MISSING = Precondition(sql="SELECT true WHERE ? = 'yes'", parameter="no", refusal=_Refused)


@pytest.mark.parametrize("batch", [1, 20], ids=["one event", "twenty events"])
def test_an_append_with_a_precondition_is_one_round_trip(
    log: EventsourcingLog,  # noqa: F811
    tmp_path: Path,
    batch: int,
) -> None:
    """Every checked append waits for the server once; the writer prepares the checked
    statement once (and its plain one once), never per append."""
    writer_prepares = 2 if batch == 1 else 0
    appends = 2 * log.settings.pool_size
    stream = uuid.uuid4()
    with _round_trips(_recorder(log), tmp_path) as counted:
        for n in range(appends):
            log.insert_rows(
                _rows(stream, range(n * batch + 1, (n + 1) * batch + 1)), precondition=HOLDS
            )
    assert counted == [appends + writer_prepares]
    assert log.verify().checked == appends * batch


@pytest.mark.parametrize("precondition", [FAILS, MISSING], ids=["false", "no row"])
@pytest.mark.parametrize("path", ["writer", "pool", "batch"])
def test_an_append_whose_precondition_does_not_hold_stores_nothing(
    log: EventsourcingLog,  # noqa: F811
    precondition: Precondition,
    path: str,
) -> None:
    """Refused with the precondition's own error, nothing stored; the next append chains on."""
    stream = uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 2)))
    before = log.position
    rows = _rows(stream, range(2, 22 if path == "batch" else 3))
    recorder = _recorder(log)
    if path == "pool":  # another thread holds the writer: the pool's cursor path is taken
        assert recorder._writer_lock.acquire()
    try:
        with pytest.raises(_Refused):
            log.insert_rows(rows, precondition=precondition)
    finally:
        if path == "pool":
            recorder._writer_lock.release()
    assert log.position == before
    assert log.insert_rows(rows, precondition=HOLDS)
    assert log.verify().problem is None


def test_a_keyless_execution_sends_nothing_but_its_appends(pg_url: str) -> None:
    """The key-table look of a keyless Loom's new execution is the append's: nothing goes
    through the log's SQLAlchemy engine while it runs (before: a connection checkout and a
    catalogue read there, four round trips per execution)."""
    with Loom(pg_url) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("echo", lambda: text)

        loom.run("note", text="warm")  # connections and prepared statements made
        statements: list[str] = []

        def seen(*args: Any) -> None:
            statements.append(args[2])

        engine: Any = loom.log.engine
        event.listen(engine, "before_cursor_execute", seen)
        try:
            before = loom.log.position
            loom.run("note", text="written without a key")
        finally:
            event.remove(engine, "before_cursor_execute", seen)
        assert statements == []
        assert loom.log.position > before


def test_a_writer_lost_before_its_first_checked_append_is_replaced_and_retried(
    log: EventsourcingLog,  # noqa: F811
    pg_url: str,
) -> None:
    """PostgreSQL review of 6 December: the writer prepares its checked statement at its
    first checked append (every new execution of a keyless Loom). A session ended by then
    (a restart, an idle timeout) failed that PREPARE with the server's error class, not the
    lost connection's, so the append was not retried: a transient drop failed the run."""
    import psycopg

    from replay_tests.runtime.test_postgres_append import _backend_pid, _libpq

    recorder = _recorder(log)
    stream = uuid.uuid4()
    log.insert_rows(_rows(stream, range(1, 2)))  # the writer is taken, its plain append ready
    killed = _backend_pid(recorder)
    assert killed is not None and recorder._writer is not None
    assert not recorder._writer.checked_prepared
    with psycopg.connect(_libpq(pg_url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
    log.insert_rows(_rows(stream, range(2, 3)), precondition=HOLDS)
    assert _backend_pid(recorder) not in (None, killed)
    assert [row.version for row in recorder.stream_rows(stream)] == [1, 2]
    assert log.verify().checked == 2
