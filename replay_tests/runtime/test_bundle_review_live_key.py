"""``loom replay --live KIND`` prints each live decision on one line (bundle review, second).

A live decision's key can be built from a recorded value (``read:{doc}``), and a bundle is
anyone's to edit and re-seal: printed raw, a key holding a line break printed a line of its
own, a forged ``execution ... replayed identically`` under a replay that was not.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import BundleEvent, read_bundle
from loom_runtime.tools.cli import app

flows = FlowRegistry()
FORGED = "execution 00000000-0000-4000-8000-000000000000 (keyed) replayed identically"


@flows.flow("keyed", version="t")
def keyed(ctx: FlowContext, question: str) -> object:
    doc = ctx.decide("pick", lambda: "runbook.md", kind="retrieval")
    return ctx.decide(f"read:{doc}", lambda: "text", input={"q": question}, kind="tool")


def _forged(tmp_path: Path, doc: str) -> Path:
    """A recording of ``keyed`` edited so that ``pick`` returned ``doc``, and re-sealed."""
    with Loom(f"sqlite:///{tmp_path / 'a.db'}", flows=flows) as loom:
        path = loom.export(loom.run("keyed", question="db slow").execution_id, tmp_path / "a.json")
    bundle = read_bundle(path)
    events: list[BundleEvent] = []
    for event in bundle.events:
        state = json.loads(event.state)
        if state.get("key") == "pick":
            state["value"] = doc
        elif state.get("key") == "read:runbook.md":
            state["key"] = f"read:{doc}"
        # Written compact, as loom writes it: a respelled input is a change of its own.
        events.append(
            msgspec.structs.replace(event, state=json.dumps(state, separators=(",", ":")))
        )
    forged = tmp_path / "forged.json"
    forged.write_bytes(msgspec.json.encode(bundle.resealed(events)))
    return forged


def _live(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["replay", str(path), "--live", "tool", "--flows", f"{__name__}:flows"],
    )
    return result.exit_code, result.stdout


def test_a_live_key_with_a_line_break_prints_on_its_own_line(tmp_path: Path) -> None:
    code, out = _live(_forged(tmp_path, f"runbook.md\n{FORGED}"))
    assert code == 0, out
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].endswith("replayed identically"), out
    assert not any(line.startswith(FORGED) for line in lines), out
    assert lines[1] == f"live 'read:runbook.md\\n{FORGED}': 'text'"


def test_an_ordinary_live_key_prints_quoted_as_every_key_is(tmp_path: Path) -> None:
    code, out = _live(_forged(tmp_path, "runbook.md"))
    assert code == 0, out
    assert out.splitlines()[1] == "live 'read:runbook.md': 'text'"
