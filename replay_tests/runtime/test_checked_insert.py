"""A precondition read by the append's last insert on SQLite (ADR 0049, amended "sealrec").

The SQLite recorder no longer runs the precondition as a ``SELECT`` of its own after the
inserts: the last event's insert reads it (``INSERT ... SELECT ... WHERE (<precondition>)``)
and stores its row only where it holds. These pin what the separate read guaranteed: an
append whose precondition fails stores none of its events, alone or in a shared commit, a
missing row is a failed precondition, and an append whose precondition holds is stored and
chained as any other.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import StoredEvent

from loom_runtime import Loom, MasterKey
from loom_runtime.log import Precondition
from loom_runtime.sealing import LIVE_SQL
from loom_runtime.storage.group_commit import Pending
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder, PreconditionFailed

HOLDS = Precondition(sql="SELECT ? = 'yes'", parameter="yes", refusal=RuntimeError)
FAILS = Precondition(sql="SELECT ? = 'yes'", parameter="no", refusal=RuntimeError)


def _recorder(loom: Loom) -> ChainedSQLiteRecorder:
    recorder = loom.log.application.recorder  # type: ignore[attr-defined]
    assert isinstance(recorder, ChainedSQLiteRecorder)
    return recorder


def _events(stream: UUID, count: int) -> list[StoredEvent]:
    return [
        StoredEvent(originator_id=stream, originator_version=v, topic="t", state=b"{}")
        for v in range(1, count + 1)
    ]


def test_an_append_of_several_events_whose_precondition_fails_stores_none(
    sqlite_url: str,
) -> None:
    """Three events, the precondition false: the two inserted before the checked one are
    rolled back with it, and the log's position and chain are as before."""
    with Loom(sqlite_url) as loom:
        recorder = _recorder(loom)
        before = loom.log.position
        stream = uuid4()
        with pytest.raises(PreconditionFailed):
            recorder.insert_events(_events(stream, 3), precondition=FAILS)
        assert recorder.stream_rows(stream) == []
        assert loom.log.position == before
        assert loom.log.verify().ok


def test_in_a_shared_commit_a_failed_multi_event_append_is_undone_whole(
    sqlite_url: str,
) -> None:
    """Appends of several events in one group, the middle one's precondition false: its
    events are all undone, the others stored, chained and verified."""
    with Loom(sqlite_url) as loom:
        recorder = _recorder(loom)
        streams = [uuid4(), uuid4(), uuid4()]
        group: list[Pending[Any, Any]] = [
            Pending((_events(streams[0], 2), HOLDS)),
            Pending((_events(streams[1], 3), FAILS)),
            Pending((_events(streams[2], 2), None)),
        ]
        recorder._commit_group(group)
        assert isinstance(group[1].error, PreconditionFailed)
        assert group[0].error is None and group[2].error is None
        assert [len(recorder.stream_rows(s)) for s in streams] == [2, 0, 2]
        assert loom.log.verify().ok


def test_an_append_whose_precondition_holds_gets_consecutive_ids_and_chains(
    sqlite_url: str,
) -> None:
    """The checked insert returns the id of the row it stored, as the plain one does."""
    with Loom(sqlite_url) as loom:
        recorder = _recorder(loom)
        before = loom.log.position
        ids = recorder.insert_events(_events(uuid4(), 3), precondition=HOLDS)
        assert list(ids or ()) == [before + 1, before + 2, before + 3]
        assert loom.log.position == before + 3
        assert loom.log.verify().ok


def test_a_subject_without_a_key_row_fails_the_live_key_precondition(sqlite_url: str) -> None:
    """The live-key check reads no row for an unknown subject (NULL, not true): refused."""
    with Loom(sqlite_url, encryption=MasterKey(b"k" * 32)) as loom:
        loom.flow("one")(lambda ctx: ctx.decide("a", lambda: 1))
        loom.run("one")  # switches encryption on: the key table exists
        recorder = _recorder(loom)
        unknown = Precondition(sql=LIVE_SQL, parameter="execution:none", refusal=RuntimeError)
        stream = uuid4()
        with pytest.raises(PreconditionFailed):
            recorder.insert_events(_events(stream, 1), precondition=unknown)
        assert recorder.stream_rows(stream) == []


@pytest.mark.parametrize("precondition", [HOLDS, FAILS], ids=["holds", "fails"])
def test_an_append_of_no_events_still_reads_its_precondition(
    precondition: Precondition, sqlite_url: str
) -> None:
    """With no event to insert there is no insert to read it: it is read on its own, so a
    failed precondition is refused as it always was and a holding one stores nothing."""
    with Loom(sqlite_url) as loom:
        recorder = _recorder(loom)
        before = loom.log.position
        if precondition is FAILS:
            with pytest.raises(PreconditionFailed):
                recorder.insert_events([], precondition=precondition)
        else:
            assert list(recorder.insert_events([], precondition=precondition) or ()) == []
        assert loom.log.position == before
