"""Execution bundles: portable, versioned, hashed; replayable with no database at all."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import read_bundle
from loom_runtime.errors import (
    BundleConflictError,
    BundleFormatError,
    BundleTamperedError,
    BundleTruncatedError,
    BundleVersionError,
)

FLOWS = textwrap.dedent(
    """
    import os
    from loom_runtime import FlowRegistry

    flows = FlowRegistry()

    def search(q):
        if os.environ.get("LOOM_TEST_UNREACHABLE"):
            raise ConnectionError("search is unreachable")
        return [q, "runbook.md"]

    @flows.flow("triage")
    def triage(ctx, question: str) -> dict:
        hits = ctx.decide(f"search:{question}", lambda: search(question), kind="retrieval")
        return {"hits": hits, "at": ctx.now().isoformat()}
    """
)


@pytest.fixture
def flows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FlowRegistry:
    (tmp_path / "bundle_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import bundle_flows

    registry: FlowRegistry = bundle_flows.flows
    return registry


@pytest.fixture
def recorded(db_url: str, flows: FlowRegistry) -> tuple[Loom, Any]:
    loom = Loom(db_url, flows=flows)
    return loom, loom.run("triage", question="db slow")


@pytest.mark.parametrize("suffix", [".json", ".msgpack"])
def test_export_then_replay_the_bundle(
    recorded: tuple[Loom, Any], tmp_path: Path, suffix: str
) -> None:
    """Both encodings round-trip: the bundle replays identically to the same output."""
    loom, run = recorded
    path = loom.export(run.execution_id, tmp_path / f"incident{suffix}")
    bundle = read_bundle(path)
    assert bundle.flow == "triage" and bundle.execution_id == run.execution_id
    assert bundle.positions == (1, 4) and bundle.started_at_position == 0
    assert [e.version for e in bundle.events] == [1, 2, 3, 4]
    result = Loom(flows=loom.flows).replay_bundle(path)
    assert result.identical and result.output == run.output


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_a_bundle_replays_in_a_fresh_process_with_no_database(
    recorded: tuple[Loom, Any], tmp_path: Path
) -> None:
    """A new interpreter, a working folder with no database, search unreachable: identical."""
    loom, run = recorded
    path = loom.export(run.execution_id, tmp_path / "incident.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = (
        "import json, sys; from loom_runtime import Loom; import bundle_flows\n"
        "result = Loom(flows=bundle_flows.flows).replay_bundle(sys.argv[1])\n"
        "print(json.dumps({'identical': result.identical, 'output': result.output}))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        cwd=elsewhere,
        env={"PYTHONPATH": str(tmp_path), "LOOM_TEST_UNREACHABLE": "1", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(completed.stdout) == {"identical": True, "output": run.output}
    assert list(elsewhere.iterdir()) == []  # no database was created


def test_import_keeps_it_replayable_and_never_duplicates(
    recorded: tuple[Loom, Any], tmp_path: Path
) -> None:
    """Imported into another log: replayable there; a second import writes nothing."""
    loom, run = recorded
    path = loom.export(run.execution_id, tmp_path / "incident.json")
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=loom.flows) as other:
        assert other.import_bundle(path) == run.execution_id
        position = other.log.position
        assert other.import_bundle(path) == run.execution_id
        assert other.log.position == position == 5  # its 4 events, and that it was imported
        assert other.replay(run.execution_id).identical
        assert [s.execution_id for s in other.executions()] == [run.execution_id]


def test_importing_a_different_history_of_the_same_execution_is_refused(
    recorded: tuple[Loom, Any], tmp_path: Path, db_url: str
) -> None:
    """Same id, different events: BundleConflictError and nothing imported."""
    loom, run = recorded
    path = loom.export(run.execution_id, tmp_path / "incident.json")
    data = json.loads(path.read_text())
    data["events"] = data["events"][:2]
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=loom.flows) as other:
        other.import_bundle(path)
        shorter = tmp_path / "shorter.json"
        shorter.write_text(json.dumps(data))
        _reseal(shorter)
        with pytest.raises(BundleConflictError):
            other.import_bundle(shorter)


def _reseal(path: Path) -> None:
    """Recompute a hand-edited bundle's hash, as a (legitimate) exporter would."""
    import msgspec

    from loom_runtime.bundle import Bundle, content_hash

    document = msgspec.json.decode(path.read_bytes())
    for event in document["events"]:  # a state written inline (ADR 0029) back to its text
        if isinstance(event["state"], dict):
            event["state"] = msgspec.json.encode(event["state"]).decode()
    bundle = msgspec.convert(document, type=Bundle)
    bundle = msgspec.structs.replace(
        bundle, positions=(bundle.events[0].position, bundle.events[-1].position)
    )
    path.write_bytes(
        msgspec.json.encode(msgspec.structs.replace(bundle, content_hash=content_hash(bundle)))
    )


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda text: text[: len(text) // 2], BundleTruncatedError),
        (lambda text: text.replace("db slow", "db fast"), BundleTamperedError),
        (
            lambda text: text.replace('"schema_version": 1', '"schema_version": 2'),
            BundleVersionError,
        ),
        (
            lambda text: text.replace('"format": "loom-bundle"', '"format": "zip"'),
            BundleFormatError,
        ),
        (lambda text: "[1, 2, 3]", BundleFormatError),
        (lambda text: "hello\n", BundleFormatError),  # not JSON at all: not a cut-off bundle
        (lambda text: "", BundleFormatError),
    ],
    ids=[
        "truncated",
        "tampered",
        "future-version",
        "not-a-bundle",
        "not-an-object",
        "not-json",
        "empty",
    ],
)
def test_a_damaged_bundle_is_refused_with_a_typed_error(
    recorded: tuple[Loom, Any], tmp_path: Path, damage: Any, error: type[Exception]
) -> None:
    """Each way a bundle can be unusable is its own error, raised before any replay."""
    loom, run = recorded
    path = loom.export(run.execution_id, tmp_path / "incident.json")
    path.write_text(damage(path.read_text()))
    with pytest.raises(error):
        Loom(flows=loom.flows).replay_bundle(path)


def test_executions_lists_status(loom: Loom) -> None:
    """executions() reports each execution once, with running/completed/failed."""

    @loom.flow("ok")
    def ok(ctx: FlowContext) -> int:
        return 1

    @loom.flow("bad")
    def bad(ctx: FlowContext) -> int:
        raise ValueError("no")

    loom.run("ok")
    with pytest.raises(ValueError):
        loom.run("bad")
    assert [(s.flow, s.status) for s in loom.executions()] == [
        ("ok", "completed"),
        ("bad", "failed"),
    ]


_HIT = '"runbook.md"'
"""The recorded hit as it stands in a bundle's file (its decision's value and the output)."""


@pytest.mark.parametrize("swap", [(_HIT, "true", "1"), (_HIT, "1", "1.0")])
def test_a_history_that_differs_by_true_1_or_1_0_is_a_conflict_not_already_imported(
    recorded: tuple[Loom, Any], tmp_path: Path, swap: tuple[str, str, str]
) -> None:
    """Import compared the two histories as Python values, where ``True == 1 == 1.0``: a bundle
    holding ``1`` where the log held ``true`` was "already in the log", and replaying the log
    and the bundle then answered differently. Compared as JSON bytes, it is a conflict."""
    loom, run = recorded
    path = loom.export(run.execution_id, tmp_path / "incident.json")
    text = path.read_text()
    assert text.count(swap[0]) >= 1
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(text.replace(swap[0], swap[1]))
    second.write_text(text.replace(swap[0], swap[2]))
    _reseal(first)
    _reseal(second)
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=loom.flows) as other:
        other.import_bundle(first)
        with pytest.raises(BundleConflictError):
            other.import_bundle(second)


def test_a_json_bundle_ends_with_a_newline(recorded: tuple[Loom, Any], tmp_path: Path) -> None:
    """Written without one, a bundle an editor or a pre-commit end-of-file fixer had given
    one lost it at each re-seal: a stray hunk in every reviewed diff."""
    loom, run = recorded
    text = loom.export(run.execution_id, tmp_path / "incident.json").read_bytes()
    assert text.endswith(b"}\n") and not text.endswith(b"\n\n")
