"""A clear value that looks like a sealed one stays clear (ADR 0049): whether an execution is
sealed is decided by its input naming the execution's own key, never by a field's prefix."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_runtime import FlowContext, Loom, MasterKey

KEY = MasterKey(b"k" * 32)
_B64 = base64.b64encode(b"\0" * 16).decode()
LOOKALIKE: dict[str, Any] = {
    "loom.sealed": {"subject": "execution:elsewhere", "nonce": _B64, "ciphertext": _B64}
}
"""A value a flow may well handle (a sealed field copied from another log) that has the exact
shape of a sealed field."""
MESSAGE = "loom.sealed:" + msgspec.json.encode(LOOKALIKE["loom.sealed"]).decode()


def _register(loom: Loom) -> None:
    @loom.flow("copies")
    def copies(ctx: FlowContext, value: dict[str, Any]) -> Any:
        return ctx.decide("copy", lambda: value["inner"])

    @loom.flow("quotes")
    def quotes(ctx: FlowContext, text: str) -> str:
        ctx.decide("seen", lambda: LOOKALIKE)
        raise ValueError(MESSAGE)


@pytest.mark.parametrize("key", [None, KEY], ids=["without a key", "with a key"])
def test_a_clear_value_shaped_like_a_sealed_one_reads_as_it_was_recorded(
    key: MasterKey | None, db_url: str, tmp_path: Path
) -> None:
    with Loom(db_url) as clear:
        _register(clear)
        copied = clear.run("copies", value={"inner": LOOKALIKE})
        with pytest.raises(ValueError):
            clear.run("quotes", text="x")
        [failed] = [s for s in clear.executions() if s.flow == "quotes"]
    with Loom(db_url, encryption=key) as loom:
        _register(loom)
        execution = loom.execution(copied.execution_id)
        assert msgspec.json.decode(execution.decisions["copy"].value) == LOOKALIKE
        assert execution.output is not None and msgspec.json.decode(execution.output) == LOOKALIKE
        assert loom.replay(copied.execution_id).identical
        execution = loom.execution(failed.execution_id)
        assert execution.error is not None and execution.error[1] == MESSAGE
        assert msgspec.json.decode(execution.decisions["seen"].value) == LOOKALIKE
        bundle = loom.export(failed.execution_id, tmp_path / "failed.json")
        assert loom.replay_bundle(bundle).identical
        assert loom.export(copied.execution_id, tmp_path / "copied.json").is_file()


def test_the_same_values_recorded_sealed_are_sealed_and_read_back(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        copied = loom.run("copies", value={"inner": LOOKALIKE})
        assert all(
            b"execution:elsewhere" not in row.state  # sealed, the look-alike inside it
            for row in loom.log.rows(copied.execution_id)
        )
        execution = loom.execution(copied.execution_id)
        assert msgspec.json.decode(execution.decisions["copy"].value) == LOOKALIKE
        assert loom.replay(copied.execution_id).identical


@pytest.mark.parametrize("seal_null", [False, True], ids=["null in clear", "null sealed"])
def test_a_null_field_is_left_in_clear_and_a_sealed_null_still_reads(
    seal_null: bool, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision without input stores its ``null`` in clear; one recorded when nulls were
    sealed too (the earlier form, simulated here) reads and replays the same. A ``null``
    value and output are sealed either way (ADR 0049, "nulls")."""
    from loom_runtime import sealing

    if seal_null:
        monkeypatch.setattr(sealing, "_NULL", msgspec.Raw(b"none"))  # no field is null
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        run = loom.run("copies", value={"inner": None})
        monkeypatch.undo()
        [created, decided, completed] = [
            msgspec.json.decode(row.state) for row in loom.log.rows(run.execution_id)
        ]
        assert _sealed(decided["input"]) is seal_null
        assert _sealed(decided["value"])
        assert _sealed(completed["output"])
        assert _sealed(created["input"])  # a value that is not null: sealed
        execution = loom.execution(run.execution_id)
        value = execution.decisions["copy"].value
        assert value is not None and bytes(value) == b"null"
        assert loom.replay(run.execution_id).identical


def _sealed(stored: object) -> bool:
    return isinstance(stored, dict) and "loom.sealed" in stored
