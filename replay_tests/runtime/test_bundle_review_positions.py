"""A bundle's log positions must fit the log's integers (bundle review, second).

An imported execution's ``log_position`` is where the next export starts its scan of the log,
in SQL. One past SQLite's 64-bit integers (``2**70``, re-sealed into a bundle) was imported,
and then ``loom export ID`` and ``loom export --all`` died of an ``OverflowError`` traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import BundleEvent, read_bundle, read_importable
from loom_runtime.errors import BundleFormatError
from loom_runtime.tools.cli import app

flows = FlowRegistry()
PARENT = "11111111-1111-4111-8111-111111111111"


@flows.flow("answer", version="t")
def answer(ctx: FlowContext, question: str) -> object:
    return ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")


def _with_start(tmp_path: Path, **fields: Any) -> Path:
    """A recording whose ``Created`` event holds ``fields``, re-sealed."""
    with Loom(f"sqlite:///{tmp_path / 'a.db'}", flows=flows) as loom:
        path = loom.export(loom.run("answer", question="db").execution_id, tmp_path / "a.json")
    bundle = read_bundle(path)
    created = {**json.loads(bundle.events[0].state), **fields}
    events: list[BundleEvent] = [
        msgspec.structs.replace(bundle.events[0], state=json.dumps(created)),
        *bundle.events[1:],
    ]
    forged = tmp_path / "forged.json"
    forged.write_bytes(msgspec.json.encode(bundle.resealed(events)))
    return forged


def _cli(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(app, list(args))
    error = None if isinstance(result.exception, SystemExit) else result.exception
    return result.exit_code, result.output, error


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"log_position": 2**70}, "log_position"),
        ({"log_position": 2**63}, "log_position"),
        ({"log_position": -1}, "log_position"),
        ({"parent_id": PARENT, "forked_at": 2**70}, "forked_at"),
        ({"parent_id": PARENT, "forked_at": -1}, "forked_at"),
    ],
    ids=[
        "log_position-2**70",
        "log_position-2**63",
        "log_position-negative",
        "forked_at-2**70",
        "forked_at-negative",
    ],
)
def test_a_position_past_the_logs_integers_is_refused_naming_it(
    tmp_path: Path, fields: dict[str, Any], named: str
) -> None:
    forged = _with_start(tmp_path, **fields)
    with pytest.raises(BundleFormatError, match=named):
        read_importable(forged)
    target = tmp_path / "target.db"
    code, output, error = _cli("import", str(forged), f"--db=sqlite:///{target}")
    assert (code, error) == (1, None), output
    assert named in output and "Traceback" not in output
    assert not target.exists()  # refused before any database was opened


def test_the_largest_position_is_imported_and_exported_again(tmp_path: Path) -> None:
    """The control: ``2**63 - 1`` fits, and the export of its import works."""
    forged = _with_start(tmp_path, log_position=2**63 - 1)
    db = f"--db=sqlite:///{tmp_path / 'target.db'}"
    code, output, error = _cli("import", str(forged), db)
    assert (code, error) == (0, None), output
    execution_id = str(read_bundle(forged).execution_id)
    code, output, error = _cli("export", execution_id, "-o", str(tmp_path / "again.json"), db)
    assert (code, error) == (0, None), output
    assert read_bundle(tmp_path / "again.json").execution().log_position == 2**63 - 1
