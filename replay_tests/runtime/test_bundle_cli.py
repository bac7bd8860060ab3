"""``loom diff A B`` and ``loom bundle show F``: bundles read as text in review (ADR 0029)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from loom_runtime import FlowContext, FlowRegistry, Loom
from loom_runtime.bundle import read_bundle, write_bundle
from loom_runtime.tools.cli import app

flows = FlowRegistry()
PROMPT = {"text": "Greet "}


@flows.flow("greet")
def greet(ctx: FlowContext, name: str) -> str:
    salutation = ctx.decide("model", lambda: "Hello", input={"prompt": PROMPT["text"] + name})
    return f"{salutation}, {name}"


@flows.flow("ask")
def ask(ctx: FlowContext, user_first: bool) -> dict[str, str]:
    system, user = ("system", "Answer from the passages."), ("user", "why?")
    request = dict([user, system] if user_first else [system, user])
    ctx.decide("model", lambda: "42", input=request)
    return dict(reversed(request.items()))  # an output in the other order: the same output


def record(path: Path, prompt: str, name: str = "Ada") -> Path:
    PROMPT["text"] = prompt
    with Loom(f"sqlite:///{path.with_suffix('.db')}", flows=flows) as loom:
        return loom.export(loom.run("greet", name=name).execution_id, path)


def loom(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    return record(tmp_path / "a.json", "Greet "), record(tmp_path / "b.json", "Say hi to ")


def test_two_recordings_of_the_same_behaviour_are_the_same(tmp_path: Path) -> None:
    """Different ids and timestamps, same arguments, decisions and output: exit 0."""
    a, b = record(tmp_path / "a.json", "Greet "), record(tmp_path / "b.json", "Greet ")
    code, out, _ = loom("diff", str(a), str(b))
    assert (code, out.startswith("same: ")) == (0, True)
    code, out, _ = loom("diff", str(a), str(b), "--json")
    assert (code, json.loads(out)["same"], json.loads(out)["differences"]) == (0, True, [])


def test_a_changed_prompt_is_shown_as_a_unified_diff(two: tuple[Path, Path]) -> None:
    a, b = two
    code, out, _ = loom("diff", str(a), str(b))
    assert code == 1
    assert "input 'model':" in out
    assert '-  "prompt": "Greet Ada"' in out and '+  "prompt": "Say hi to Ada"' in out
    assert f"--- {a} input of decision 'model'" in out
    code, out, _ = loom("diff", str(a), str(b), "--json")
    report = json.loads(out)
    assert (code, report["same"]) == (1, False)
    assert [(d["change"], d["key"]) for d in report["differences"]] == [("input", "model")]


def test_changed_arguments_and_output_are_differences(tmp_path: Path) -> None:
    a, b = record(tmp_path / "a.json", "Greet "), record(tmp_path / "b.json", "Greet ", "Bo")
    code, out, _ = loom("diff", str(a), str(b), "--json")
    changes = [d["change"] for d in json.loads(out)["differences"]]
    assert (code, changes) == (1, ["arguments", "input", "outcome"])


def test_show_prints_every_decision_whole(two: tuple[Path, Path]) -> None:
    code, out, _ = loom("bundle", "show", str(two[0]))
    assert code == 0
    assert "decision 'model'" in out and '"prompt": "Greet Ada"' in out and '"Hello, Ada"' in out
    code, out, _ = loom("bundle", "show", str(two[0]), "--json")
    view = json.loads(out)
    assert view["decisions"][0]["input"] == {"prompt": "Greet Ada"}
    assert (view["flow"], view["output"]) == ("greet", "Hello, Ada")


def test_a_missing_file_exits_2_and_a_tampered_one_1_on_stderr(
    two: tuple[Path, Path], tmp_path: Path
) -> None:
    code, out, err = loom("diff", str(two[0]), str(tmp_path / "nope.json"))
    assert (code, out, err.startswith("error: file not found: ")) == (2, "", True)
    code, _, err = loom("bundle", "show", str(tmp_path / "nope.json"))
    assert code == 2 and "file not found" in err
    two[1].write_text(two[1].read_text().replace("Say hi", "Say hello"))
    code, out, err = loom("bundle", "show", str(two[1]))
    assert (code, out) == (1, "") and "altered after export" in err


def test_values_from_a_bundle_are_printed_inert(tmp_path: Path) -> None:
    """A bundle is untrusted: an ESC sequence in a recorded prompt is shown, not obeyed."""
    a = record(tmp_path / "a.json", "Greet \x1b]0;pwned\x07")
    code, out, _ = loom("bundle", "show", str(a))
    assert code == 0 and "\x1b" not in out
    b = record(tmp_path / "b.json", "Greet ")
    _, out, _ = loom("diff", str(a), str(b))
    assert "\x1b" not in out


def test_a_request_whose_keys_are_reordered_is_a_changed_input(tmp_path: Path) -> None:
    """Review of 6 December: the order of a request's keys is what the model reads, and a
    replay reports it as a changed input (ADR 0002, "key order"); ``loom diff`` sorted keys
    before comparing, and called the two recordings the same. An output compares as the
    replay compares it: its key order is not a difference."""
    with Loom(f"sqlite:///{tmp_path / 'k.db'}", flows=flows) as recorder:
        a = recorder.export(recorder.run("ask", user_first=False).execution_id, tmp_path / "a.json")
        b = recorder.export(recorder.run("ask", user_first=True).execution_id, tmp_path / "b.json")
    code, out, _ = loom("diff", str(a), str(b), "--json")
    changes = [(d["change"], d["key"]) for d in json.loads(out)["differences"]]
    assert (code, changes) == (1, [("arguments", None), ("input", "model")])


@flows.flow("fan-out")
def fan_out(ctx: FlowContext) -> str:
    def fails() -> str:
        raise ExceptionGroup("tools", [ValueError("card declined")])

    outcome = "none"
    try:
        ctx.decide("tool", fails, kind="tool")
    except* ValueError:
        outcome = "declined"
    return outcome


def _edited_meta(bundle: Path, edit: Callable[[dict[str, Any]], None], path: Path) -> Path:
    """``bundle`` with its failed decision's meta edited by ``edit`` and sealed again, as an
    attacker with the file (its seal is a checksum, not a signature) can write it."""
    original = read_bundle(bundle)
    events = []
    for event in original.events:
        state = json.loads(event.state)
        if state.get("error_type") is not None and isinstance(state.get("meta"), dict):
            edit(state["meta"])
        events.append(msgspec.structs.replace(event, state=json.dumps(state)))
    return write_bundle(original.resealed(events), path)


def test_a_failure_s_meta_that_a_replay_rebuilds_it_from_is_a_difference(tmp_path: Path) -> None:
    """An attack review: the meta a recorded failure is rebuilt from (a group's errors, an
    MCP error's code) decides which ``except`` a replay takes, yet ``loom diff`` compared only
    the type and message and called a bundle edited there "same". It is compared as part of
    the failure, and shown."""
    with Loom(f"sqlite:///{tmp_path / 'g.db'}", flows=flows) as recorder:
        a = recorder.export(recorder.run("fan-out").execution_id, tmp_path / "a.json")

    def to_key_error(meta: dict[str, Any]) -> None:
        meta["exceptions"]["exceptions"][0]["type"] = "builtins:KeyError"

    b = _edited_meta(a, to_key_error, tmp_path / "b.json")
    code, out, _ = loom("diff", str(a), str(b), "--json")
    changes = [(d["change"], d["key"]) for d in json.loads(out)["differences"]]
    assert (code, changes) == (1, [("value", "tool")])
    code, out, _ = loom("diff", str(a), str(b))
    assert code == 1 and "builtins:KeyError" in out
    unchanged = _edited_meta(a, lambda meta: None, tmp_path / "c.json")  # the control
    assert loom("diff", str(a), str(unchanged))[0] == 0
