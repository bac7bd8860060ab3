"""An import calls a bundle "already in the log" only when a replay could not tell them apart.

Bundle review of 6 December: the import compared each event's state with its keys sorted, but
a replay compares a decision's input, and a flow's, byte for byte (its key order is what the
code, a model, reads: ADR 0002 "key order"). A bundle whose model input held the same members
in another order was "already in the log" (exit 0), yet replayed not identical while the log's
execution replayed identical: two recordings the import took for one.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import BundleEvent, read_bundle
from loom_runtime.errors import BundleConflictError

flows = FlowRegistry()


@flows.flow("ask", version="t")
def ask(ctx: FlowContext, q: str) -> object:
    return ctx.decide("model", lambda: {"a": 1, "b": 2}, input={"system": "s", "user": q})


def _edited(path: Path, edit: str) -> Path:
    bundle = read_bundle(path)
    events: list[BundleEvent] = []
    for event in bundle.events:
        state = json.loads(event.state)
        if edit == "input order" and state.get("key") == "model":
            state["input"] = {"user": "hi", "system": "s"}
        if edit == "value order" and state.get("key") == "model":
            state["value"] = {"b": 2, "a": 1}
        events.append(
            msgspec.structs.replace(event, state=json.dumps(state, separators=(",", ":")))
        )
    edited = path.with_name(f"{edit}.json")
    edited.write_bytes(msgspec.json.encode(bundle.resealed(events)))
    return edited


def test_an_input_in_another_key_order_is_a_conflict(tmp_path: Path) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", flows=flows) as loom:
        execution = loom.run("ask", q="hi").execution_id
        edited = _edited(loom.export(execution, tmp_path / "run.json"), "input order")
        assert not loom.replay_bundle(edited).identical  # a replay tells them apart
        with pytest.raises(BundleConflictError):
            loom.import_bundle(edited)


def test_a_value_in_another_key_order_is_already_in_the_log(tmp_path: Path) -> None:
    """The control: a value's key order is not compared by a replay, nor by the import."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", flows=flows) as loom:
        execution = loom.run("ask", q="hi").execution_id
        edited = _edited(loom.export(execution, tmp_path / "run.json"), "value order")
        assert loom.replay_bundle(edited).identical
        assert loom.import_bundle(edited) == execution  # already in the log: nothing new
        assert [s.execution_id for s in loom.executions()] == [execution]
