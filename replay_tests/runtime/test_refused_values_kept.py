"""A decision value the redactor refuses is stored as the decision's failure.

Core review of 6 December: only ``NotSerialisableError`` was; a value refused by
``Redactor(mode="refuse")`` (``SecretRefusedError``), or one whose two keys redact to the
same marker under the default redactor (``RedactedKeysCollideError``), left the occurrence
unstored. A flow that caught the refusal completed live, its faithful replay said
``UnrecordedDecisionError``, and a resume ran the compute again (ADR 0026, "kept failures").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from loom_runtime import FlowContext, Loom, Redactor
from loom_runtime.errors import SecretRefusedError

GITHUB_A, GITHUB_B = "ghp_" + "a" * 36, "ghp_" + "b" * 36


@pytest.mark.parametrize(
    ("mode", "value", "refusal", "where"),
    [
        ("refuse", {"body": f"token {GITHUB_A}"}, "SecretRefusedError", "'tokens'.body"),
        ("redact", {GITHUB_A: "ci", GITHUB_B: "deploy"}, "RedactedKeysCollideError", "'tokens'"),
    ],
    ids=["refuse-mode", "colliding-keys"],
)
def test_a_refused_value_is_the_decision_s_failure_and_replays(
    tmp_path: Path, mode: str, value: object, refusal: str, where: str
) -> None:
    computed: list[int] = []

    def compute() -> object:
        computed.append(1)
        return value

    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode=mode)) as loom:  # type: ignore[arg-type]

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            try:
                ctx.decide("tokens", compute)
            except SecretRefusedError as refused:  # what it says is replayed too
                return f"refused: {type(refused).__name__} {refused.path} {refused.pattern}"
            return "stored"

        run = loom.run("f")
        assert run.output == f"refused: {refusal} decision {where} github-token"
        decision = loom.execution(run.execution_id).decisions["tokens"]
        assert decision.error_type == f"loom_runtime.errors:{refusal}"
        assert GITHUB_A not in (decision.message or "")
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
        assert replayed.output == run.output
    assert computed == [1]


def _raises(error: Exception, computed: list[int]) -> Callable[[], object]:
    def compute() -> object:
        computed.append(1)
        raise error

    return compute


@pytest.mark.parametrize("via", ["compute", "open_decision"])
@pytest.mark.parametrize(
    ("error", "where"),
    [
        (ValueError(f"bad token {GITHUB_A}"), "loom.execution.DecisionFailed.message"),
        (
            ExceptionGroup("tools", [ValueError(f"bad token {GITHUB_A}"), KeyError("x")]),
            "meta of 'call'.exceptions.exceptions[0].message",
        ),
    ],
    ids=["message", "group-meta"],
)
def test_a_failure_whose_message_the_redactor_refuses_stores_the_refusal(
    tmp_path: Path, error: Exception, where: str, via: str
) -> None:
    """A compute's (or a wrapped call's: ``OpenDecision.fail``) error whose message, or for a
    group a member's, holds a secret under ``Redactor(mode="refuse")``: the flow sees the
    refusal, as for a refused value, and the refusal is the decision's failure. Before,
    nothing was stored: the flow that caught it completed live, its faithful replay said
    ``UnrecordedDecisionError``, and a resume ran the compute again (ADR 0026, amended
    "refused failures")."""
    computed: list[int] = []
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            try:
                if via == "compute":
                    ctx.decide("call", _raises(error, computed))
                else:  # answered (a recorded failure raised) where it is opened
                    held = ctx.open_decision("call")
                    computed.append(1)
                    held.fail(error)
            except SecretRefusedError as refused:
                return f"refused: {refused.path} {refused.pattern}"
            return "returned"

        run = loom.run("f")
        assert run.output == f"refused: {where} github-token"
        decision = loom.execution(run.execution_id).decisions["call"]
        assert decision.error_type == "loom_runtime.errors:SecretRefusedError"
        assert GITHUB_A not in (decision.message or "") + str(decision.meta)
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
        assert loom.resume(run.execution_id).output == run.output
    assert computed == [1]
