"""What an API review passed to the runtime's public calls and got back as a bare
``TypeError``/``AttributeError`` from loom's internals, or accepted to fail later: each is now
a typed loom error naming the argument, raised before anything is written (ADR 0018, amended
"api arguments")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loom_runtime import (
    Backoff,
    ConfigurationError,
    DecisionArgumentError,
    FlowContext,
    FlowNotFoundError,
    Loom,
    LoomError,
)


@pytest.mark.parametrize(
    "options",
    [
        {"lock_timeout": float("nan")},
        {"lock_timeout": float("inf")},
        {"lock_timeout": "5"},
        {"lock_timeout": None},
        {"lock_timeout": True},
        {"pool_size": "5"},
        {"pool_size": 2.5},
        {"pool_size": True},
        {"pool_size": float("nan")},
    ],
)
def test_a_numeric_option_that_is_no_usable_number_is_refused(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(options))):
        Loom(f"sqlite:///{tmp_path / 'loom.db'}", **options)
    assert not (tmp_path / "loom.db").exists()


@pytest.mark.parametrize("name", [None, 5, ["f"]])
def test_a_flow_name_that_is_no_string_is_not_found(loom: Loom, name: Any) -> None:
    loom.flow("f")(lambda ctx: 1)
    with pytest.raises(FlowNotFoundError, match="string"):
        loom.run(name)
    assert loom.log.position == 0


def _one(ctx: FlowContext) -> str:
    return "x"


DECIDE_MISTAKES: list[tuple[str, Callable[[FlowContext], object]]] = [
    ("compute", lambda ctx: ctx.decide("k", "not callable")),  # type: ignore[arg-type]
    ("type", lambda ctx: ctx.decide("k", lambda: 1, type=5)),
    ("retry", lambda ctx: ctx.decide("k", lambda: 1, retry=5)),  # type: ignore[arg-type]
    ("retry_on", lambda ctx: ctx.decide("k", lambda: 1, retry=Backoff(), retry_on=5)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("parameter", "body"), DECIDE_MISTAKES, ids=[p for p, _ in DECIDE_MISTAKES]
)
def test_a_decide_argument_of_the_wrong_kind_is_named(
    loom: Loom, parameter: str, body: Callable[[FlowContext], object]
) -> None:
    """The flow's own mistake: raised in the flow (so its run fails, as for any bug in it),
    typed and naming the argument; stored as the decision's failure (its occurrence was
    taken), so the unchanged code replays identically."""
    loom.flow("f")(body)
    with pytest.raises(DecisionArgumentError) as refused:
        loom.run("f")
    assert refused.value.parameter == parameter
    [summary] = loom.executions()
    stored = loom.execution(summary.execution_id).decisions["k"]
    assert stored.error_type == "loom_runtime.errors:DecisionArgumentError"
    assert loom.replay(summary.execution_id).identical


def test_a_fork_override_that_is_no_mapping_is_refused_before_anything_is_written(
    loom: Loom,
) -> None:
    loom.flow("f")(lambda ctx: ctx.decide("k", lambda: 1))
    run = loom.run("f")
    position = loom.log.position
    for override in (["k"], "k"):
        with pytest.raises(ConfigurationError, match="override"):
            loom.fork(run.execution_id, at=0, override=override)  # type: ignore[arg-type]
    assert loom.log.position == position


@pytest.mark.parametrize(
    "call",
    [
        lambda loom, run: loom.export(run, None),
        lambda loom, run: loom.import_bundle(None),
        lambda loom, run: loom.import_bundle(5),
        lambda loom, run: loom.replay_bundle("b.json", max_bundle_bytes="x"),
        lambda loom, run: loom.replay_bundle("b.json", max_bundle_bytes=float("nan")),
    ],
)
def test_a_bundle_path_or_cap_of_the_wrong_kind_is_a_loom_error(
    loom: Loom, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    loom.flow("f")(lambda ctx: ctx.decide("k", lambda: 1))
    run = loom.run("f").execution_id
    loom.export(run, tmp_path / "b.json")
    with pytest.raises(LoomError):
        call(loom, run)


def test_a_flow_that_catches_the_argument_error_replays_and_resumes_as_it_ran(
    loom: Loom, other: Loom
) -> None:
    """The first form stored the refusal but rebuilt it on replay as ``RecordedComputeError``
    (its constructor needs ``parameter``): a flow catching ``TypeError`` or
    ``DecisionArgumentError`` took another path on replay (a false divergence), and its
    resume stored a false failure (a regression review). Rebuilt as itself, with its
    parameter."""
    crash = {"now": True}

    class Crash(BaseException):
        pass

    def flow(ctx: FlowContext) -> str:
        try:
            ctx.decide("k", "not callable")  # type: ignore[arg-type]
        except DecisionArgumentError as exc:
            said = exc.parameter
        if crash["now"]:
            raise Crash
        return f"fallback for {said}"

    for instance in (loom, other):
        instance.flow("f")(flow)
    with pytest.raises(Crash):
        loom.run("f")
    [summary] = loom.executions()
    crash["now"] = False
    assert other.resume(summary.execution_id).output == "fallback for compute"
    assert other.replay(summary.execution_id).identical
