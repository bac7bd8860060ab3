"""A fixed recording's replays, pinned: what each ``decide`` returns and every divergence's text.

Written before the replay path's per-decision cuts (ADR 0048, amended by `replay`) and passing
on the code before them: the cuts change how a recorded decision reaches the flow, never what
it returns, which divergence is found, or how it reads. On both backends, and from a bundle.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from loom_runtime import FlowContext, Loom
from loom_runtime.execution import project_execution

RECORDED: dict[str, Any] = {"first": [1, 2.0, True], "second": {"b": None, "a": "x"}}


class Shape(msgspec.Struct):
    name: str
    size: int


def _flow(*, change: str = "") -> Any:
    """The recorded flow, or one ``change`` away from it."""

    def f(ctx: FlowContext) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        seen["first"] = ctx.decide("first", lambda: RECORDED["first"])
        seen["second"] = ctx.decide(
            "second", lambda: RECORDED["second"], input={"q": "input" if change != "input" else 2}
        )
        seen["shape"] = ctx.decide("shape", lambda: Shape("s", 3), type=Shape, kind="model")
        seen["again"] = [ctx.decide("loop", partial(int, f"{i}0")) for i in range(3)]
        try:
            ctx.decide("fails", _raise)
        except ValueError as exc:
            seen["fails"] = str(exc)
        if change != "fewer":
            key = "tail" if change != "renamed" else "tale"
            seen["tail"] = ctx.decide(key, lambda: "end")
        return {"seen": repr(seen)}

    return f


def _raise() -> Any:
    raise ValueError("recorded failure")


def _replayed(db_url: str, tmp_path: Path, change: str) -> tuple[list[str], list[str]]:
    """Record with the flow, replay with ``change``: (the log's verdict lines, the bundle's)."""
    with Loom(db_url) as old:
        old.flow("f")(_flow())
        run = old.run("f")
        old.export(run.execution_id, tmp_path / "b.loom")
    with Loom(db_url) as new:
        new.flow("f")(_flow(change=change))
        from_log = new.replay(run.execution_id)
    with Loom(f"sqlite:///{tmp_path / 'other.db'}") as bare:
        bare.flow("f")(_flow(change=change))
        from_bundle = bare.replay_bundle(tmp_path / "b.loom")
    return (
        from_log.describe().replace(str(run.execution_id), "ID").splitlines(),
        from_bundle.describe().replace(str(run.execution_id), "ID").splitlines(),
    )


SEEN = (
    "{'first': [1, 2.0, True], 'second': {'b': None, 'a': 'x'}, "
    "'shape': Shape(name='s', size=3), 'again': [0, 10, 20], "
    "'fails': 'recorded failure', 'tail': 'end'}"
)


def test_a_faithful_replay_returns_each_recorded_value_as_the_run_saw_it(
    db_url: str, tmp_path: Path
) -> None:
    """Every ``decide`` of a faithful replay returns the value (typed where asked) the run saw."""
    with Loom(db_url) as loom:
        loom.flow("f")(_flow())
        run = loom.run("f")
        replayed = loom.replay(run.execution_id)
        decisions = loom.execution(run.execution_id).decisions
        events = project_execution(None, loom.log.events(run.execution_id))
    assert run.output == {"seen": SEEN}
    assert replayed.identical and replayed.output == {"seen": SEEN}
    assert events is not None and decisions == events.decisions
    assert [
        (key, d.kind, bytes(d.input), d.value and bytes(d.value)) for key, d in decisions.items()
    ] == [
        ("first", None, b"null", b"[1,2.0,true]"),
        ("second", None, b'{"q":"input"}', b'{"b":null,"a":"x"}'),
        ("shape", "model", b"null", b'{"name":"s","size":3}'),
        ("loop", None, b"null", b"0"),
        ("loop#2", None, b"null", b"10"),
        ("loop#3", None, b"null", b"20"),
        ("fails", None, b"null", None),
        ("tail", None, b"null", b'"end"'),
    ]
    assert (decisions["fails"].error_type, decisions["fails"].message) == (
        "builtins:ValueError",
        "recorded failure",
    )


def test_a_changed_input_reads_the_same(db_url: str, tmp_path: Path) -> None:
    """A changed input is its diff, from the log and from a bundle alike."""
    assert _replayed(db_url, tmp_path, "input") == (INPUT, INPUT)


def test_a_renamed_key_reads_the_same(db_url: str, tmp_path: Path) -> None:
    """An unrecorded key names its nearest recorded keys and stops the flow there."""
    assert _replayed(db_url, tmp_path, "renamed") == (RENAMED, RENAMED)


def test_fewer_decisions_read_the_same(db_url: str, tmp_path: Path) -> None:
    """A decision the code no longer asks for is unused, after the output's diff."""
    assert _replayed(db_url, tmp_path, "fewer") == (FEWER, FEWER)


INPUT = [
    "execution ID (f) diverged:",
    "- DecisionInputChangedError: decision 'second' was recorded with a different input:",
    "--- recorded input of 'second'",
    "+++ replayed input of 'second'",
    "@@ -1,3 +1,3 @@",
    " {",
    '-  "q": "input"',
    '+  "q": 2',
    " }",
]
RENAMED = [
    "execution ID (f) diverged:",
    "- UnrecordedDecisionError: decision 'tale' was never recorded; nearest recorded keys: "
    "'tail', 'shape', 'fails'. The flow asks for something the recorded run did not: the code "
    "changed, or the key is built from live data.",
]
FEWER = [
    "execution ID (f) diverged:",
    "- OutputChangedError: the flow's output changed:",
    "--- recorded output",
    "+++ replayed output",
    "@@ -1,3 +1,3 @@",
    " {",
    f"-  {msgspec.json.encode(SEEN).decode()}".replace('"', '"seen": "', 1),
    "+  "
    + msgspec.json.encode(SEEN.replace(", 'tail': 'end'", ""))
    .decode()
    .replace('"', '"seen": "', 1),
    " }",
    "",
    "- UnusedDecisionsError: 1 recorded decision(s) never asked for by the replay: 'tail'",
]
