"""The on-disk JSON of a bundle (ADR 0029): reviewable, and every bundle written before reads."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import Bundle, BundleEvent, read_bundle, write_bundle

flows = FlowRegistry()


@flows.flow("greet")
def greet(ctx: FlowContext, name: str) -> str:
    salutation = ctx.decide("model", lambda: "Hello", input={"prompt": f"Greet {name}"})
    return f"{salutation}, {name}"


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    with Loom(f"sqlite:///{tmp_path / 'rec.db'}", flows=flows) as loom:
        run = loom.run("greet", name="Ada")
        return loom.export(run.execution_id, tmp_path / "greet.json")


def test_the_json_is_sorted_indented_with_each_state_inline(exported: Path) -> None:
    text = exported.read_text()
    assert text.startswith('{\n  "code_version": ')
    assert '\n          "prompt": "Greet Ada"\n' in text  # its own line: one line of git diff
    assert '\\"' not in text  # no state left as an escaped string
    assert list(msgspec.json.decode(text)) == sorted(msgspec.json.decode(text))


def test_a_bundle_written_before_reads_imports_and_replays(exported: Path, tmp_path: Path) -> None:
    """The layout of earlier looms: compact, each state an escaped string."""
    bundle = read_bundle(exported)
    old = tmp_path / "old.json"
    old.write_bytes(msgspec.json.encode(bundle, order="sorted"))
    assert read_bundle(old) == bundle
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=flows) as other:
        assert other.replay_bundle(old).identical
        assert other.import_bundle(old) == bundle.execution_id
        assert other.replay(bundle.execution_id).identical


def test_a_state_that_would_not_read_back_exactly_stays_a_string(
    exported: Path, tmp_path: Path
) -> None:
    """Inline, a state is read back by re-encoding it; one whose text that would change (here,
    spaces) is kept as the string it is, so its hash still holds."""
    bundle = read_bundle(exported)
    events = list(bundle.events)
    spaced = msgspec.json.format(events[2].state.encode(), indent=1).decode()
    events[2] = msgspec.structs.replace(events[2], state=spaced)
    odd = _resealed(bundle, events)
    path = write_bundle(odd, tmp_path / "odd.json")
    assert read_bundle(path) == odd
    assert msgspec.json.decode(path.read_bytes())["events"][2]["state"] == spaced


def _resealed(bundle: Bundle, events: list[BundleEvent]) -> Bundle:
    return bundle.resealed(events)


@flows.flow("ordered")
def ordered(ctx: FlowContext) -> str:
    found = ctx.decide("lookup", lambda: {"zeta": 1, "alpha": 2})
    return ", ".join(found)  # the value's key order reaches what the flow builds


def test_recorded_json_keeps_its_recorded_key_order_which_the_flow_sees(tmp_path: Path) -> None:
    """Sorted keys are the bundle's own structure; a recorded value, input or state keeps its
    recorded order. The order is part of what was recorded: a replay hands the flow the dict
    in that order, and the prompt it builds from it follows, so a bundle showing the keys
    sorted would show a value the flow never saw (and its hash covers the recorded text)."""
    with Loom(f"sqlite:///{tmp_path / 'rec.db'}", flows=flows) as loom:
        run = loom.run("ordered")
        path = loom.export(run.execution_id, tmp_path / "ordered.json")
    assert run.output == "zeta, alpha"
    text = path.read_text()
    assert text.index('"zeta"') < text.index('"alpha"')
    with Loom(f"sqlite:///{tmp_path / 'other.db'}", flows=flows) as other:
        replayed = other.replay_bundle(path)
    assert replayed.identical and replayed.output == "zeta, alpha"
