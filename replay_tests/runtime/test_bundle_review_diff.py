"""``loom diff`` and ``loom bundle show`` in review (bundle review, second).

``loom diff`` said "same" for two bundles whose replays by the same code disagree: it never
compared a fork's lineage nor a decision's origin mark, which decide what a replay counts as
unused (ADR 0027). And a key (or kind) differing only by Unicode composition, NFC ``café``
against NFD ``cafe`` + U+0301, printed alike on both sides: "removed 'café'", "added 'café'".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import BundleEvent, read_bundle
from loom_runtime.tools.cli import app

flows = FlowRegistry()
PARENT = "11111111-1111-4111-8111-111111111111"
NFC, NFD = "caf\u00e9", "cafe\u0301"

State = dict[str, Any]


@flows.flow("answer", version="t")
def answer(ctx: FlowContext, question: str) -> object:
    found = ctx.decide("search", lambda: [question, "runbook.md"], kind="retrieval")
    return {"found": found, "text": ctx.decide("model", lambda: "ok", kind="model")}


def _recorded(tmp_path: Path) -> Path:
    with Loom(f"sqlite:///{tmp_path / 'a.db'}", flows=flows) as loom:
        return loom.export(loom.run("answer", question="db").execution_id, tmp_path / "a.json")


def _forged(real: Path, out: Path, edit: Callable[[list[tuple[str, State]]], None]) -> Path:
    """``real`` with its events (topic, state) edited in place by ``edit``, re-sealed."""
    bundle = read_bundle(real)
    events = [(event.topic, json.loads(event.state)) for event in bundle.events]
    edit(events)
    resealed: list[BundleEvent] = [
        BundleEvent(position=n, topic=topic, version=n, state=json.dumps(state))
        for n, (topic, state) in enumerate(events, start=1)
    ]
    out.write_bytes(msgspec.json.encode(bundle.resealed(resealed)))
    return out


def _loom(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout


def _with_escalation(*, fork: bool) -> Callable[[list[tuple[str, State]]], None]:
    """One more decision after the start: the run's own, or one a fork took from its parent."""

    def edit(events: list[tuple[str, State]]) -> None:
        created = events[0][1]
        escalate = {"key": "escalate", "kind": "tool", "value": "paged", "input": None}
        if fork:
            created.update(parent_id=PARENT, forked_at=1)
            escalate["origin"] = "inherited"
        escalate["timestamp"] = created["timestamp"]
        events.insert(1, ("loom.execution.DecisionRecorded", escalate))

    return edit


def test_a_fork_and_a_run_are_not_the_same(tmp_path: Path) -> None:
    """The run's replay diverges (``escalate`` is never asked: unused); the fork's is
    identical (a decision inherited and not asked is not counted). Not "same"."""
    real = _recorded(tmp_path)
    run = _forged(real, tmp_path / "run.json", _with_escalation(fork=False))
    fork = _forged(real, tmp_path / "fork.json", _with_escalation(fork=True))
    code, out = _loom("diff", str(run), str(fork), "--json")
    changes = [(d["change"], d["key"]) for d in json.loads(out)["differences"]]
    assert (code, changes) == (1, [("lineage", None), ("origin", "escalate")])
    code, out = _loom("diff", str(run), str(fork))
    assert code == 1 and "lineage:" in out and "origin 'escalate':" in out, out
    assert '+  "forked_at": 1,' in out and '+"inherited"' in out, out


def test_two_recordings_of_the_same_fork_are_the_same(tmp_path: Path) -> None:
    """The control: forks of two recordings (two parents, two ids) that behave alike."""
    paths = []
    for name in ("a", "b"):
        with Loom(f"sqlite:///{tmp_path / name}.db", flows=flows) as loom:
            parent = loom.run("answer", question="db").execution_id
            fork = loom.fork(parent, at=1, override={"model": "changed"}).execution_id
            paths.append(loom.export(fork, tmp_path / f"{name}.json"))
    code, out = _loom("diff", *map(str, paths))
    assert (code, out.startswith("same: ")) == (0, True), out


def _key_to(key: str) -> Callable[[list[tuple[str, State]]], None]:
    def edit(events: list[tuple[str, State]]) -> None:
        for _, state in events:
            if state.get("key") == "search":
                state["key"] = key

    return edit


def _kind_to(kind: str) -> Callable[[list[tuple[str, State]]], None]:
    def edit(events: list[tuple[str, State]]) -> None:
        for _, state in events:
            if state.get("key") == "search":
                state["kind"] = kind

    return edit


def test_keys_that_differ_only_by_composition_print_apart(tmp_path: Path) -> None:
    real = _recorded(tmp_path)
    a = _forged(real, tmp_path / "nfc.json", _key_to(NFC))
    b = _forged(real, tmp_path / "nfd.json", _key_to(NFD))
    code, out = _loom("diff", str(a), str(b))
    assert code == 1
    assert f"removed '{NFC}':" in out and "added 'cafe<U+0301>':" in out, out
    assert f"+++ {b} decision 'cafe<U+0301>'" in out and NFD not in out, out
    code, out = _loom("bundle", "show", str(b))
    assert code == 0 and "decision 'cafe<U+0301>' (retrieval)" in out and NFD not in out, out


def test_kinds_that_differ_only_by_composition_print_apart(tmp_path: Path) -> None:
    real = _recorded(tmp_path)
    a = _forged(real, tmp_path / "nfc.json", _kind_to(NFC))
    b = _forged(real, tmp_path / "nfd.json", _kind_to(NFD))
    code, out = _loom("diff", str(a), str(b))
    assert code == 1 and "kind 'search':" in out, out
    assert f'-"{NFC}"' in out and '+"cafe<U+0301>"' in out and NFD not in out, out
    code, out = _loom("bundle", "show", str(b))
    assert code == 0 and "decision 'search' (cafe<U+0301>)" in out and NFD not in out, out
