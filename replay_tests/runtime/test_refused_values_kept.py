"""A decision value the redactor refuses is stored as the decision's failure.

Core review of 6 December: only ``NotSerialisableError`` was; a value refused by
``Redactor(mode="refuse")`` (``SecretRefusedError``), or one whose two keys redact to the
same marker under the default redactor (``RedactedKeysCollideError``), left the occurrence
unstored. A flow that caught the refusal completed live, its faithful replay said
``UnrecordedDecisionError``, and a resume ran the compute again (ADR 0026, "kept failures").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loom_runtime import AsyncFlowContext, Backoff, FlowContext, Loom, Redactor
from loom_runtime.errors import (
    RedactedKeysCollideError,
    SecretIdentifierError,
    SecretRefusedError,
)

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


def _outcomes(outcomes: list[object], computed: list[int]) -> Callable[[], object]:
    def compute() -> object:
        computed.append(1)
        outcome = outcomes[len(computed) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return compute


@pytest.mark.parametrize(
    "outcomes",
    [[ValueError(f"bad token {GITHUB_A}"), "ok"], [ValueError(f"bad {GITHUB_A}"), KeyError("x")]],
    ids=["then-returned", "then-raised"],
)
def test_a_retried_decision_whose_earlier_attempt_the_redactor_refuses_stores_the_refusal(
    tmp_path: Path, outcomes: list[object]
) -> None:
    """The attempts a retried decision keeps in its meta name each error: one holding a
    secret under ``mode="refuse"`` refused the meta and nothing was stored, whether the
    last attempt returned or raised. The refusal is the decision's failure now, as for a
    refused message (a regression review of ADR 0026's "refused failures")."""
    computed: list[int] = []
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            try:
                return str(
                    ctx.decide(
                        "call",
                        _outcomes(outcomes, computed),
                        retry=Backoff(attempts=2, first_pause=0, max_pause=0),
                        retry_on=lambda _: True,
                    )
                )
            except SecretRefusedError as refused:
                return f"refused: {refused.pattern}"

        run = loom.run("f")
        assert run.output == "refused: github-token"
        decision = loom.execution(run.execution_id).decisions["call"]
        assert decision.error_type == "loom_runtime.errors:SecretRefusedError"
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
        assert loom.resume(run.execution_id).output == run.output
    assert computed == [1, 1]


def test_a_timeout_during_a_retry_pause_stays_a_timeout_when_an_attempt_is_refused(
    tmp_path: Path,
) -> None:
    """A timeout cutting a retried call in its pause stores the cancellation with the
    attempts so far; one whose message the redactor refuses turned the flow's
    ``TimeoutError`` into ``SecretRefusedError`` and stored nothing. A cancellation must
    stay one (asyncio's timeout reads it): it is stored without the attempts, and the flow
    times out as it did, live and on replay."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        async def f(ctx: AsyncFlowContext) -> str:
            async def compute() -> str:
                raise ValueError(f"bad token {GITHUB_A}")

            try:
                async with asyncio.timeout(0.2):
                    await ctx.decide(
                        "call",
                        compute,
                        retry=Backoff(attempts=3, first_pause=5, max_pause=5),
                        retry_on=lambda _: True,
                    )
            except TimeoutError:
                return "timed out"
            return "returned"

        run = loom.run("f")
        assert run.output == "timed out"
        decision = loom.execution(run.execution_id).decisions["call"]
        assert GITHUB_A not in str(decision.meta) + (decision.message or "")
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()


@pytest.mark.parametrize("outcome", ["fail", "record_or_refuse"])
def test_a_wrapped_call_whose_meta_the_redactor_refuses_stores_the_refusal(
    tmp_path: Path, outcome: str
) -> None:
    """What a wrapped call measured (its meta) holding a secret under ``mode="refuse"``:
    nothing was stored for a failure, nor for a value recorded by ``record_or_refuse`` (whose
    refusal was stored with the very meta refused again). The refusal is stored without it."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            try:
                held = ctx.open_decision("call")
                if outcome == "fail":
                    held.fail(ValueError("upstream down"), meta={"auth": f"token {GITHUB_A}"})
                else:
                    held.record_or_refuse("ok", meta={"auth": f"token {GITHUB_A}"})
            except SecretRefusedError as refused:
                return f"refused: {refused.pattern}"
            return "stored"

        run = loom.run("f")
        assert run.output == "refused: github-token"
        decision = loom.execution(run.execution_id).decisions["call"]
        assert decision.error_type == "loom_runtime.errors:SecretRefusedError"
        assert decision.meta is None
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()


class _PolicyRefusal(SecretRefusedError):
    """An application's own refusal, with a constructor of its own."""

    def __new__(cls, rule: str) -> _PolicyRefusal:
        return super().__new__(cls)

    def __init__(self, rule: str) -> None:
        super().__init__(pattern="policy", path=f"rule {rule}")
        self.rule = rule


def test_an_application_s_own_refusal_class_is_not_rebuilt_as_loom_s_are(tmp_path: Path) -> None:
    """Loom's refusal classes are rebuilt from their message; an application's subclass was
    too, without its ``__new__`` arguments, and the replay raised loom's own ``TypeError``
    into the flow (a regression review). It is rebuilt as any loom subclass of the
    application's is not: a ``RecordedComputeError``, reported, never a crash."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            try:
                ctx.decide("call", _raises(_PolicyRefusal("r1"), []))
            except _PolicyRefusal as refused:
                return f"refused by {refused.rule}"
            return "returned"

        run = loom.run("f")
        assert run.output == "refused by r1"
        replayed = loom.replay(run.execution_id)
    assert [type(d).__name__ for d in replayed.divergences] == ["OutcomeChangedError"]
    assert "TypeError" not in replayed.describe()


@pytest.mark.parametrize(
    "cls", [SecretRefusedError, RedactedKeysCollideError, SecretIdentifierError]
)
def test_a_refusal_reads_back_a_pattern_and_path_holding_parentheses(
    cls: type[SecretRefusedError],
) -> None:
    """A team's own pattern named with parentheses replayed with an empty path and pattern,
    so a flow reading them diverged (a regression review): read back whole, and a path (a
    key the flow chose) holding the message's own text too (a third review)."""
    for path in ("decision 'k' (retried)", f"decision 'a{cls._WRITTEN[0]}b'.args.x"):
        refused = cls(pattern="team rule (v2)", path=path)
        again = cls.replayed(str(refused))
        assert (again.pattern, again.path) == ("team rule (v2)", path)


def test_a_cancellation_raised_with_a_secret_in_its_message_stays_a_cancellation(
    tmp_path: Path,
) -> None:
    """A compute raising its own ``CancelledError`` (a client whose stream was closed
    upstream) is stored once the flow goes on; one whose message named a token under
    ``mode="refuse"`` raised the refusal from the flow's next, unrelated decision, and stored
    nothing (a second regression review). It is stored as a cancellation, its message
    withheld, and replays as one."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        async def f(ctx: AsyncFlowContext) -> list[object]:
            async def compute() -> str:
                raise asyncio.CancelledError(f"closed upstream, token {GITHUB_A}")

            with contextlib.suppress(asyncio.CancelledError):
                await ctx.decide("call", compute)
            return ["next", await ctx.decide("next", lambda: 7)]

        run = loom.run("f")
        assert run.output == ["next", 7]
        decision = loom.execution(run.execution_id).decisions["call"]
        assert decision.error_type == "asyncio.exceptions:CancelledError"
        assert GITHUB_A not in (decision.message or "") and "withheld" in (decision.message or "")
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()


def test_a_stream_whose_read_raises_a_cancellation_naming_a_secret_is_stored(
    tmp_path: Path,
) -> None:
    """A recorded HTTP stream whose read raises its own ``CancelledError`` (closed upstream)
    keeps that error in its value, stored once the flow goes on: one naming a token under
    ``mode="refuse"`` raised the refusal from the flow's next decision and stored nothing (a
    third regression review). Its message is withheld, and the read replays as it ran."""
    import httpx

    from loom_runtime.http_transport import async_transport

    class Closing(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield b"harmless part\n"
            raise asyncio.CancelledError(f"stream closed upstream for token {GITHUB_A}")

    transport = async_transport(
        httpx.MockTransport(lambda _: httpx.Response(200, stream=Closing()))
    )
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=Redactor(mode="refuse")) as loom:

        @loom.flow("f")
        async def f(ctx: AsyncFlowContext) -> list[object]:
            seen: list[object] = []
            async with httpx.AsyncClient(transport=transport) as client:
                try:
                    async with client.stream("GET", "http://x.test/") as response:
                        async for chunk in response.aiter_bytes():
                            seen.append(len(chunk))
                except asyncio.CancelledError:
                    seen.append("cancelled")
            return [seen, await ctx.decide("next", lambda: 7)]

        run = loom.run("f")
        assert run.output == [[14, "cancelled"], 7]
        stored = loom.execution(run.execution_id).decisions
        assert GITHUB_A not in str([d.value for d in stored.values()])
        replayed = loom.replay(run.execution_id)
        assert replayed.identical, replayed.describe()
