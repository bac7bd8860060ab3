"""Loading an execution from its rows (the replay's direct read path, ADR 0043).

``project_rows`` applies a decision from its decoded fields instead of building an event and
running eventsourcing's ``mutate``: it must rebuild exactly the execution the events rebuild,
and refuse exactly what they refuse, with the same message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest

from loom_runtime import FlowContext, Loom
from loom_runtime.errors import LogCorruptError
from loom_runtime.execution import Execution, project_execution, project_rows
from loom_runtime.log import Row, decode_rows

FAILING = {"flow": True}


def _unavailable() -> str:
    raise TimeoutError("model timed out")


def _record(loom: Loom) -> UUID:
    """An execution with every kind of event: decisions, a failed decision, the flow's
    failure, a reopening (which drops the failed decision) and its completion."""

    @loom.flow("mixed", version="t")
    def mixed(ctx: FlowContext, question: str) -> str:
        hits = ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")
        try:
            answer = ctx.decide("model", _unavailable, input={"q": question}, kind="model")
        except TimeoutError:
            answer = "fallback"
        for index in range(3):
            ctx.decide("step", lambda index=index: index)
        if FAILING["flow"]:
            raise RuntimeError("the flow broke")
        return f"{answer}: {hits[1]}"

    FAILING["flow"] = True
    with pytest.raises(RuntimeError):
        loom.run("mixed", question="db slow")
    [summary] = loom.executions()
    FAILING["flow"] = False
    loom.resume(summary.execution_id, retry_failed=True)
    return summary.execution_id


def _state(execution: Any) -> dict[str, Any]:
    """An execution's attributes but its lock (each object has its own, never stored)."""
    return {name: value for name, value in vars(execution).items() if name != "appending"}


def test_rows_rebuild_the_execution_its_events_rebuild(loom: Loom) -> None:
    """At every point of the stream (so also where a decision is the last event read)."""
    execution_id = _record(loom)
    rows = loom.log.rows(execution_id)
    assert [row.version for row in rows] == list(range(1, len(rows) + 1))
    for upto in range(1, len(rows) + 1):
        from_events = project_execution(None, decode_rows(rows[:upto]))
        from_rows = project_rows(rows[:upto])
        assert isinstance(from_events, Execution) and isinstance(from_rows, Execution)
        assert _state(from_rows) == _state(from_events)
    assert from_rows.reopenings and from_rows.output is not None  # every kind of event ran


def _drop_version(version: int) -> Callable[[list[Row]], list[Row]]:
    return lambda rows: [row for row in rows if row.version != version]


def _edit_row(version: int, **changes: Any) -> Callable[[list[Row]], list[Row]]:
    return lambda rows: [
        msgspec.structs.replace(row, **changes) if row.version == version else row for row in rows
    ]


EDITS: dict[str, Callable[[list[Row]], list[Row]]] = {
    "version-gap": _drop_version(3),
    "other-stream": _edit_row(3, stream=uuid4()),
    "state-not-json": _edit_row(3, state=b'{"key": '),
    "state-wrong-shape": _edit_row(3, state=b'{"key": 1}'),
    "decision-first": _drop_version(1),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_decision_row_is_refused_as_its_event_is(sqlite_url: str, edit: str) -> None:
    with Loom(sqlite_url) as loom:
        rows = EDITS[edit](loom.log.rows(_record(loom)))
    with pytest.raises(LogCorruptError) as from_events:
        project_execution(None, decode_rows(rows))
    with pytest.raises(LogCorruptError) as from_rows:
        project_rows(rows)
    assert str(from_rows.value) == str(from_events.value)


def test_a_replay_reads_the_rows_without_eventsourcing_row_objects(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One SELECT of the columns straight into rows: ``select_events`` (a ``StoredEvent`` per
    row) is not on the replay's path, and the rows are the ones it would have given."""
    execution_id = _record(loom)
    recorder = loom.log.application.recorder  # type: ignore[attr-defined]
    through_events = [
        Row(stream=execution_id, version=s.originator_version, topic=s.topic, state=s.state)
        for s in recorder.select_events(execution_id)
    ]
    assert loom.log.rows(execution_id) == through_events

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("select_events was called")

    monkeypatch.setattr(recorder, "select_events", refuse)
    assert loom.replay(execution_id).identical


def test_a_decision_row_of_an_older_class_version_is_upcast_as_its_event_is(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows stored at version 1, read once the class is at version 2: the direct decode
    hands them to the mapper's upcasting path, so both projections see the upcast fields."""
    from loom_runtime.storage import mapper

    execution_id = _record(loom)

    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["kind"] = "upcast"

    cls = Execution.DecisionRecorded
    monkeypatch.setattr(cls, "class_version", 2, raising=False)
    monkeypatch.setattr(cls, "upcast_v1_v2", staticmethod(upcast_v1_v2), raising=False)
    mapper._decoder.cache_clear()  # its cached class version is the old one
    try:
        rows = loom.log.rows(execution_id)
        from_rows = project_rows(rows)
        from_events = project_execution(None, decode_rows(rows))
    finally:
        monkeypatch.undo()
        mapper._decoder.cache_clear()
    assert isinstance(from_rows, Execution) and isinstance(from_events, Execution)
    assert _state(from_rows) == _state(from_events)
    assert {decision.kind for decision in from_rows.decisions.values()} == {"upcast", "model"}
