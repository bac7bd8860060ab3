"""A decision key recorded twice is a stream loom never writes, refused rather than half read.

Loom records a key once: numbering gives a repeated call its own key (``k#2``), and a reopening
drops a failed decision before the key is computed again. A re-sealed bundle (or an edited
log) holding a second event for a key made the later one silently replace the first, so a
replay answered from the one the reader of the file might not have looked at, said
"identical", and never asked about the other.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import Bundle, BundleEvent, read_bundle, seal, write_bundle
from loom_runtime.errors import BundleFormatError, LogCorruptError
from loom_runtime.execution import project_execution, project_rows
from loom_runtime.storage.mapper import decode_row

flows = FlowRegistry()


@flows.flow("search", version="t")
def search(ctx: FlowContext, question: str) -> object:
    return ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")


def _with_a_second_search(folder: Path) -> Bundle:
    """A recording of ``search`` re-sealed with a second ``search`` decision, holding another
    value, inserted before the real one (a forger's copy)."""
    with Loom(f"sqlite:///{folder / 'loom.db'}", flows=flows) as loom:
        execution_id = loom.run("search", question="q").execution_id
        real = read_bundle(loom.export(execution_id, folder / "real.json"))
    created, decided, completed = real.events
    state = msgspec.json.decode(decided.state)
    state["value"] = ["not what the replay is answered with"]
    other = msgspec.structs.replace(decided, state=msgspec.json.encode(state).decode())

    def at(event: BundleEvent, version: int) -> BundleEvent:
        return msgspec.structs.replace(event, version=version)

    return seal(
        execution_id=real.execution_id,
        flow=real.flow,
        code_version=real.code_version,
        started_at_position=real.started_at_position,
        events=[created, at(other, 2), at(decided, 3), at(completed, 4)],
    )


def test_a_bundle_recording_one_key_twice_is_refused(tmp_path: Path) -> None:
    """Replaying it is a BundleFormatError, not an identical replay of the second."""
    path = write_bundle(_with_a_second_search(tmp_path), tmp_path / "forged.json")
    with pytest.raises(BundleFormatError, match="twice"):
        Loom(flows=flows).replay_bundle(path)


def test_both_projections_refuse_rows_recording_one_key_twice(tmp_path: Path) -> None:
    """The log's rows read directly (a replay's path) and as events (eventsourcing's) are
    LogCorruptError, as any other stream loom never writes."""
    rows = _with_a_second_search(tmp_path).rows()
    with pytest.raises(LogCorruptError, match="twice"):
        project_rows(rows)
    with pytest.raises(LogCorruptError, match="twice"):
        project_execution(None, [decode_row(row) for row in rows])
