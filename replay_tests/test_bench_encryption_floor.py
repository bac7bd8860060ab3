"""The encryption benchmark's floor opens what the log holds where it is stored: every sealed
field with its associated data (an execution's input says whether its keys are sealed) and
every sealed decision key. A floor that cannot open one stops the benchmark run
(``InvalidTag``), as it did once the input's associated data changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import encryption
from benchmarks.harness import InstrumentError
from benchmarks.workload import FLOW, make_values, recording_flow
from loom_runtime import Loom


def test_the_floor_opens_every_sealed_field_and_key_of_a_recording(tmp_path: Path) -> None:
    values = make_values(5)
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=encryption.KEY) as loom:
        loom.flow(FLOW)(recording_flow(values))
        execution_id = loom.run(FLOW, n=len(values)).execution_id
        floors = encryption._floors(loom, execution_id, len(values))
        assert floors["open_floor_us"] > 0
        assert floors["seal_floor_us"] > 0
        with pytest.raises(InstrumentError):  # more decisions than the rows hold keys for
            encryption._floors(loom, execution_id, len(values) + 3)
