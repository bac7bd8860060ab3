"""A sealed execution seals a ``null`` value and output too (ADR 0049, amended 2026-12-04
"nulls").

A ``null`` field was stored in clear (it holds nothing personal), so an edit that needs no key
could replace a sealed decision value with ``null``: a replay then answered ``None`` as
recorded, and ``loom executions show`` showed it. A decision's value and an execution's output
are now sealed even when ``null``; a decision's input stays clear when ``null`` (half the
AES-GCM calls of a decision without one, and a forged ``null`` input only makes a replay
diverge: the code asks with its real input).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_runtime import FlowContext, Loom, MasterKey, sealing
from loom_runtime.errors import LogCorruptError
from loom_runtime.sealing import ExecutionSealer

KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("checks")
    def checks(ctx: FlowContext, account: str) -> None:
        ctx.decide("approved", lambda: True)
        ctx.decide("note", lambda: None)


def _states(path: Path, execution_id: Any) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT topic, state FROM stored_events WHERE originator_id = ? ORDER BY rowid",
            (execution_id.hex,),
        ).fetchall()
    return {f"{topic}:{i}": msgspec.json.decode(state) for i, (topic, state) in enumerate(rows)}


def _edit_value(path: Path, execution_id: Any, topic: str, field: str, index: int = 0) -> None:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_id = ? AND topic = ? "
            "ORDER BY rowid",
            (execution_id.hex, topic),
        ).fetchall()
        rowid, state = rows[index]
        fields = msgspec.json.decode(state, type=dict[str, msgspec.Raw])
        fields[field] = msgspec.Raw(b"null")
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?",
            (msgspec.json.encode(fields), rowid),
        )


def test_a_null_value_and_output_are_sealed_and_replay(tmp_path: Path) -> None:
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom)
        run = loom.run("checks", account="a")
        states = _states(path, run.execution_id)
        for name, state in states.items():
            if "DecisionRecorded" in name:
                assert "loom.sealed" in state["value"]
                assert state["input"] is None  # a null input stays clear
            if "Completed" in name:
                assert "loom.sealed" in state["output"]
        assert loom.replay(run.execution_id).identical
        execution = loom.execution(run.execution_id)
        assert bytes(execution.decisions["note"].value or b"") == b"null"


@pytest.mark.parametrize(
    ("topic", "field", "index"),
    [
        ("loom.execution.DecisionRecorded", "value", 0),
        ("loom.execution.Completed", "output", 0),
    ],
)
def test_a_sealed_field_replaced_by_null_is_refused_as_corrupt(
    tmp_path: Path, topic: str, field: str, index: int
) -> None:
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom)
        run = loom.run("checks", account="a")
    _edit_value(path, run.execution_id, topic, field, index)
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom)
        with pytest.raises(LogCorruptError, match=field):
            loom.execution(run.execution_id)
        with pytest.raises(LogCorruptError, match=field):
            loom.export(run.execution_id, tmp_path / "bundle.json")


@pytest.mark.parametrize("flag", [b',"nulls":true', b',"names":true'])
def test_dropping_a_flag_refuses_the_execution(tmp_path: Path, flag: bytes) -> None:
    """Each flag is in the input's associated data too: without it, the input does not open
    (dropped, ``nulls`` would let a sealed value replaced by ``null`` read as recorded, and
    ``names`` would rebuild the execution under sealed texts)."""
    path = tmp_path / "loom.db"
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom)
        run = loom.run("checks", account="a")
    with sqlite3.connect(path) as connection:
        rowid, state = connection.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_id = ? AND topic = ?",
            (run.execution_id.hex, "loom.execution.Created"),
        ).fetchone()
        assert flag in state
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?",
            (state.replace(flag, b""), rowid),
        )
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom, pytest.raises(LogCorruptError):
        loom.execution(run.execution_id)


def test_an_execution_sealed_before_nulls_were_keeps_them_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded in part by a loom that left nulls in clear (simulated), then resumed by this
    one: read, resumed and replayed as it was, its later null still clear (one execution
    never holds both)."""
    path = tmp_path / "loom.db"
    original = ExecutionSealer.__init__
    crash = [True]

    def earlier(self: ExecutionSealer, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **{**kwargs, "nulls": False})

    def register(loom: Loom) -> None:
        @loom.flow("checks")
        def checks(ctx: FlowContext) -> None:
            ctx.decide("first", lambda: None)
            if crash[0]:
                raise KeyboardInterrupt  # the process dies: nothing recorded, resumable
            ctx.decide("second", lambda: None)

    with monkeypatch.context() as patch, Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        patch.setattr(ExecutionSealer, "__init__", earlier)
        register(loom)
        with pytest.raises(KeyboardInterrupt):
            loom.run("checks")
        [interrupted] = loom.executions()
    crash[0] = False
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        register(loom)
        run = loom.resume(interrupted.execution_id)
        created = msgspec.json.decode(loom.log.rows(run.execution_id)[0].state)
        assert sealing.input_flags(msgspec.json.encode(created["input"])) == (True, False)
        assert loom.replay(run.execution_id).identical
    values = [
        state["value"]
        for name, state in _states(path, run.execution_id).items()
        if "DecisionRecorded" in name
    ]
    assert values == [None, None]  # both clear: the earlier form, kept


def test_an_imported_execution_seals_its_nulls_and_refuses_them_replaced(tmp_path: Path) -> None:
    with Loom(f"sqlite:///{tmp_path / 'clear.db'}") as loom:
        _register(loom)
        run = loom.run("checks", account="a")
        bundle = loom.export(run.execution_id, tmp_path / "run.json")
    path = tmp_path / "sealed.db"
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom)
        imported = loom.import_bundle(bundle)
        assert loom.replay(imported).identical
    for name, state in _states(path, imported).items():
        if "DecisionRecorded" in name:
            assert "loom.sealed" in state["value"]
        if "Completed" in name:
            assert "loom.sealed" in state["output"]
    _edit_value(path, imported, "loom.execution.DecisionRecorded", "value", 1)
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom, pytest.raises(LogCorruptError):
        loom.execution(imported)
