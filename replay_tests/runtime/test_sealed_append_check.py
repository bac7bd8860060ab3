"""The live-key check of a sealed append, read in the append's own transaction (ADR 0049).

A sealed execution's append no longer reads its key row in a transaction of its own before
sealing: it seals with the cached key and the append's transaction, after its inserts and
holding the write lock, reads whether the key is still live (on PostgreSQL, inside the
server-side function the append's one statement calls). So a key destroyed after the seal but
before the commit refuses the append, with nothing written: the window the separate read left
is closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.persistence import StoredEvent

from loom_runtime import FlowContext, Loom, MasterKey, SubjectErasedError
from loom_runtime.log import Precondition
from loom_runtime.sealing import ExecutionSealer
from loom_runtime.storage.group_commit import Pending
from loom_runtime.storage.sqlite import ChainedSQLiteRecorder, PreconditionFailed

KEY = MasterKey(b"c" * 32)


def test_a_key_destroyed_between_seal_and_commit_refuses_the_append(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process erases the execution after its next decision was sealed with the
    cached key: the append is refused typed and stores nothing."""
    with Loom(db_url, encryption=KEY) as loom, Loom(db_url, encryption=KEY) as other:
        seal = ExecutionSealer.seal_events
        erase_next: list[bool] = []

        def seal_then_erase(self: ExecutionSealer, events: Sequence[Any], **kw: Any) -> Any:
            sealed = seal(self, events, **kw)
            if erase_next:
                erase_next.clear()
                other.erase(execution=self.execution_id, reason="request", by="dpo")
            return sealed

        monkeypatch.setattr(ExecutionSealer, "seal_events", seal_then_erase)
        positions: list[int] = []

        @loom.flow("erased-while-sealing")
        def flow(ctx: FlowContext, text: str) -> str:
            ctx.decide("first", lambda: text)
            erase_next.append(True)
            positions.append(loom.log.position)
            return ctx.decide("second", lambda: text + "!")

        with pytest.raises(SubjectErasedError, match="nothing more can be stored"):
            loom.run("erased-while-sealing", text="x")
        # Only the forget event was appended after the first decision: not the second.
        assert loom.log.position == positions[0] + 1


def test_the_built_in_logs_check_preconditions(db_url: str) -> None:
    """The SQLite and PostgreSQL logs declare the capability the sealer relies on."""
    with Loom(db_url) as loom:
        assert loom.log.checks_preconditions


def _recorder(loom: Loom) -> ChainedSQLiteRecorder:
    recorder = loom.log.application.recorder  # type: ignore[attr-defined]
    assert isinstance(recorder, ChainedSQLiteRecorder)
    return recorder


def _event(stream: Any) -> StoredEvent:
    return StoredEvent(originator_id=stream, originator_version=1, topic="t", state=b"{}")


def test_in_a_shared_commit_only_the_append_whose_precondition_fails_is_undone(
    sqlite_url: str,
) -> None:
    """Three appends in one group, the middle one's precondition false: the other two are
    stored and chained, the middle one raises in its own caller and stores nothing."""
    with Loom(sqlite_url) as loom:
        recorder = _recorder(loom)
        holds = Precondition(sql="SELECT ? = 'yes'", parameter="yes", refusal=RuntimeError)
        fails = Precondition(sql="SELECT ? = 'yes'", parameter="no", refusal=RuntimeError)
        streams = [uuid4(), uuid4(), uuid4()]
        group = [
            Pending(([_event(streams[0])], holds)),
            Pending(([_event(streams[1])], fails)),
            Pending(([_event(streams[2])], None)),
        ]
        recorder._commit_group(group)
        assert isinstance(group[1].error, PreconditionFailed)
        assert group[0].error is None and group[2].error is None
        assert [len(recorder.stream_rows(s)) for s in streams] == [1, 0, 1]
        assert loom.log.verify().ok


def test_a_log_that_cannot_check_refuses_a_precondition(sqlite_url: str) -> None:
    """A precondition given to a log that would not read it is an error, never ignored."""
    with Loom(sqlite_url, persistence="sqlalchemy") as loom:
        assert not loom.log.checks_preconditions
        check = Precondition(sql="SELECT 1", parameter="", refusal=RuntimeError)
        with pytest.raises(ValueError, match="cannot read a precondition"):
            loom.log.save(_Nothing(), precondition=check)


class _Nothing:
    def collect_events(self) -> list[Any]:
        return []
