"""A JSON bundle is reviewed as text (ADR 0029), so it must mean what a reader sees.

JSON leaves a repeated object member undefined; msgspec keeps the last. A bundle holding one
(a second ``events`` member far below the first, or a second ``key`` inside a decision's
state) showed a reviewer one recording and replayed, sealed and "identical", another.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import Bundle, bundle_json, read_bundle
from loom_runtime.errors import BundleFormatError

flows = FlowRegistry()


@flows.flow("search", version="t")
def search(ctx: FlowContext, question: str) -> object:
    return ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")


def _recorded(folder: Path) -> Bundle:
    with Loom(f"sqlite:///{folder / 'loom.db'}", flows=flows) as loom:
        execution_id = loom.run("search", question="q").execution_id
        return read_bundle(loom.export(execution_id, folder / "real.json"))


def _shown_and_sealed(real: Bundle, edit: str) -> Bundle:
    """The recording with its output replaced (``edit``) and sealed: what a forger appends."""
    completed = real.events[-1]
    state = msgspec.json.decode(completed.state)
    state["output"] = [edit]
    forged = msgspec.structs.replace(completed, state=msgspec.json.encode(state).decode())
    return real.resealed([*real.events[:-1], forged])


def _output_twice(real: Bundle) -> Bundle:
    """The recording re-sealed with a second ``output`` member first in its last state
    (kept as a string): one reader sees the first, the replay compares the last."""
    completed = real.events[-1]
    state = completed.state.replace('"output":', '"output":["shown"],"output":', 1)
    return real.resealed([*real.events[:-1], msgspec.structs.replace(completed, state=state)])


def test_a_repeated_events_member_is_refused(tmp_path: Path) -> None:
    """The real events first (what a reader sees), a re-sealed second ``events`` member last
    (what msgspec keeps): refused as a format error, not replayed."""
    real = _recorded(tmp_path)
    sealed = bundle_json(_shown_and_sealed(real, "forged"))
    shown = msgspec.json.encode(msgspec.to_builtins(real.events)).decode()
    text = sealed.decode().replace('  "events": [', f'  "events": {shown},\n  "events": [', 1)
    path = tmp_path / "forged.json"
    path.write_text(text)
    with pytest.raises(BundleFormatError, match="more than once"):
        read_bundle(path)


def test_a_repeated_member_inside_a_state_string_is_refused(tmp_path: Path) -> None:
    """A state kept as a string (as older bundles hold every state) with a second ``output``
    member: one reader sees the first, the replay compares the last."""
    path = tmp_path / "forged.json"
    path.write_bytes(msgspec.json.encode(_output_twice(_recorded(tmp_path))))
    with pytest.raises(BundleFormatError, match="more than once"):
        read_bundle(path)


def test_a_bundle_as_loom_writes_it_reads(tmp_path: Path) -> None:
    """The control: both layouts loom writes (reviewable, and compact with string states)."""
    real = _recorded(tmp_path)
    compact = tmp_path / "compact.json"
    compact.write_bytes(msgspec.json.encode(real))
    assert read_bundle(compact) == read_bundle(tmp_path / "real.json") == real


def test_a_repeated_member_inside_a_msgpack_bundles_state_is_refused(tmp_path: Path) -> None:
    """A msgpack bundle carries each state as JSON text too: the same two readings, one
    shown (``loom bundle show`` of a converted copy, another tool), the last replayed."""
    real = _recorded(tmp_path)
    path = tmp_path / "forged.msgpack"
    path.write_bytes(msgspec.msgpack.encode(_output_twice(real)))
    with pytest.raises(BundleFormatError, match="more than once"):
        read_bundle(path)
    control = tmp_path / "real.msgpack"
    control.write_bytes(msgspec.msgpack.encode(real))
    assert read_bundle(control) == real
