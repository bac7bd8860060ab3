"""The msgspec Mapper: typed round trip of every event type, JSON stored form, upcasting."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

import msgspec
import pytest
from eventsourcing.domain import Aggregate
from freezegun import freeze_time

from loom_runtime import FlowContext, Loom
from loom_runtime.errors import LogCorruptError
from loom_runtime.execution import EXECUTION_EVENT_TYPES, Execution
from loom_runtime.storage.mapper import MsgspecMapper
from loom_runtime.storage.topics import register_aggregate, register_event

_RAW = msgspec.Raw(b'{"a":[1,2]}')
_SAMPLES: dict[type, dict[str, Any]] = {
    Execution.Created: {
        "originator_topic": "loom.execution",
        "flow": "f",
        "code_version": "v1",
        "input": _RAW,
        "log_position": 7,
    },
    Execution.DecisionRecorded: {"key": "k#2", "kind": "model", "value": _RAW, "input": _RAW},
    Execution.DecisionFailed: {
        "key": "k",
        "kind": None,
        "input": msgspec.Raw(b"null"),
        "error_type": "builtins:ValueError",
        "message": "no",
    },
    Execution.Resumed: {"worker": "host:1"},
    Execution.Completed: {"output": _RAW},
    Execution.Failed: {"error_type": "builtins:KeyError", "message": "'x'"},
    Execution.Reopened: {"worker": "host:1", "dropped": ("k", "k#2")},
}


@pytest.mark.parametrize("cls", EXECUTION_EVENT_TYPES, ids=lambda c: c.__qualname__)
def test_every_event_type_round_trips(cls: type) -> None:
    """Encode then decode gives equal fields, a tz-aware timestamp and Raw values as bytes."""
    assert set(_SAMPLES) == set(EXECUTION_EVENT_TYPES)
    event = cls(
        originator_id=uuid.uuid4(),
        originator_version=3,
        timestamp=datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC),
        **_SAMPLES[cls],
    )
    mapper = MsgspecMapper()
    stored = mapper.to_stored_event(event)
    assert stored.topic == cls.TOPIC
    back = mapper.to_domain_event(stored)
    assert type(back) is cls
    assert back.timestamp == event.timestamp and back.timestamp.tzinfo is not None
    for name, value in vars(event).items():
        got = getattr(back, name)
        assert (bytes(got) if isinstance(got, msgspec.Raw) else got) == (
            bytes(value) if isinstance(value, msgspec.Raw) else value
        ), name


def test_stored_form_is_json_an_operator_can_read(loom: Loom) -> None:
    """The state column holds JSON with the decision's value inline, not an opaque blob."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> dict[str, str]:
        return ctx.decide("k", lambda: {"answer": "é"})

    with freeze_time("2026-03-04T05:06:07Z"):
        loom.run("f")
    table = loom.log.application.recorder.events_table_name  # type: ignore[attr-defined]
    with loom.log.engine.connect() as conn:
        [(state,)] = conn.exec_driver_sql(
            f"SELECT state FROM {table} WHERE topic = 'loom.execution.DecisionRecorded'"
        ).fetchall()
    document = json.loads(bytes(state))
    assert document["value"] == {"answer": "é"}
    assert document["timestamp"].startswith("2026-03-04T05:06:07")


class _Note(Aggregate):
    """A test aggregate whose event gains a field in class_version 2."""

    TOPIC = "test.mapper.Note"

    class Created(Aggregate.Created):
        TOPIC = "test.mapper.Note.Created"
        text: str

    class Edited(Aggregate.Event):
        TOPIC = "test.mapper.Note.Edited"
        class_version: ClassVar[int] = 2
        text: str
        editor: str

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["editor"] = "unknown"

        def apply(self, aggregate: Any) -> None:
            aggregate.text = self.text

    def __init__(self, *, text: str) -> None:
        self.text = text


register_aggregate(_Note)  # the mapper reads only loom's closed set of registered topics


def _edited() -> _Note.Edited:
    """A current (v2) Edited event, to store and read back in different shapes."""
    return _Note.Edited(
        originator_id=uuid.uuid4(),
        originator_version=2,
        timestamp=datetime.now(UTC),
        text="hello",
        editor="ann",
    )


def test_old_events_are_upcast_on_read() -> None:
    """A v1 payload (no 'editor') decodes into the v2 class through its upcaster."""
    mapper = MsgspecMapper()
    stored = mapper.to_stored_event(_edited())
    assert json.loads(stored.state)["class_version"] == 2
    old_state = json.loads(stored.state)
    del old_state["class_version"], old_state["editor"]
    old = type(stored)(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=json.dumps(old_state).encode(),
    )
    back = mapper.to_domain_event(old)
    assert back.editor == "unknown" and back.text == "hello"


def test_a_renamed_topic_reads_through_its_registered_alias() -> None:
    """A row stored under an old topic maps once the alias is registered, and only then:
    the mapper reads loom's closed set of topics, never resolving (importing) one."""
    mapper = MsgspecMapper()
    stored = mapper.to_stored_event(_edited())
    old = type(stored)(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic="test.mapper.OldNote.Edited",
        state=stored.state,
    )
    with pytest.raises(LogCorruptError, match="none of loom's event classes"):
        mapper.to_domain_event(old)
    register_event(_Note.Edited, topic="test.mapper.OldNote.Edited")
    assert mapper.to_domain_event(old).editor == "ann"
