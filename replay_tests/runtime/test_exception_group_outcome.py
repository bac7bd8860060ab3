"""ADR 0002, amended: a flow that fails with an exception group (``asyncio.TaskGroup``,
``ExceptionGroup``) is recorded with what each error inside it was, so a replay whose tasks
now fail differently is a divergence. The group's own message ("unhandled errors in a
TaskGroup (1 sub-exception)") said nothing of them, and a task raising ``KeyError`` where it
had raised ``ValueError`` replayed identical."""

from __future__ import annotations

import asyncio

import pytest

from loom_runtime import AsyncFlowContext, FlowContext, Loom
from loom_runtime.execution import error_message_of


def _flow(loom: Loom, behaviour: dict[str, str]) -> None:
    @loom.flow("fan-out")
    async def fan_out(ctx: AsyncFlowContext) -> str:
        async def task(name: str) -> str:
            value: str = await ctx.decide(name, lambda: name)
            if name == "b":
                if behaviour["raise"] == "value":
                    raise ValueError("quota for b exceeded")
                raise KeyError("a different bug")
            return value

        async with asyncio.TaskGroup() as group:
            group.create_task(task("a"))
            group.create_task(task("b"))
        return "done"


def test_a_task_failing_differently_inside_a_task_group_is_a_divergence(loom: Loom) -> None:
    behaviour = {"raise": "value"}
    _flow(loom, behaviour)
    with pytest.raises(ExceptionGroup):
        loom.run("fan-out")
    [summary] = loom.executions()
    recorded = loom.execution(summary.execution_id).error
    assert recorded is not None and "builtins:ValueError: quota for b exceeded" in recorded[1]
    assert loom.replay(summary.execution_id).identical  # the control: the same code
    behaviour["raise"] = "key"
    result = loom.replay(summary.execution_id)
    assert not result.identical
    assert "OutcomeChangedError" in {type(d).__name__ for d in result.divergences}


def test_a_group_s_message_names_each_error_inside_it_nested_groups_too() -> None:
    group = ExceptionGroup("outer", [ValueError("one"), ExceptionGroup("inner", [KeyError("two")])])
    assert error_message_of(group) == (
        "outer (2 sub-exceptions) [builtins:ValueError: one; "
        "builtins:ExceptionGroup: inner (1 sub-exception) [builtins:KeyError: 'two']]"
    )


def test_a_group_recorded_before_its_errors_were_stored_still_replays_identical(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An execution recorded by an earlier release holds only the group's own message: the
    same code replays it identical (it cannot tell what its tasks raised, as before), not a
    false divergence on every old incident that failed in a TaskGroup."""
    import loom_runtime.execution as execution_module
    from loom_runtime.execution import printed

    behaviour = {"raise": "value"}
    _flow(loom, behaviour)
    with monkeypatch.context() as patched:  # the earlier release: str(error) only
        patched.setattr(execution_module, "error_message_of", printed)
        with pytest.raises(ExceptionGroup):
            loom.run("fan-out")
    [summary] = loom.executions()
    recorded = loom.execution(summary.execution_id).error
    assert recorded is not None and "[" not in recorded[1]
    assert loom.replay(summary.execution_id).identical


def test_a_large_group_s_message_names_twenty_errors_and_counts_the_rest() -> None:
    """A fan-out of 5,000 failed calls stored a message of half a megabyte (every error
    named): the first twenty are named, then how many more, nested ones counted."""
    group = ExceptionGroup("fan-out", [ValueError(f"call {n} failed") for n in range(5_000)])
    message = error_message_of(group)
    assert message.count("builtins:ValueError") == 20
    assert message.endswith("; ... 4980 more]") and len(message) < 1_000


def test_a_group_too_large_to_keep_keeps_no_errors_and_is_recorded_bounded(loom: Loom) -> None:
    """Its meta kept every error (600 KB for 5,000): past ``GROUP_KEPT`` it keeps none (a
    group rebuilt with some of its errors would take another ``except*`` path), and the
    replay raises the recorded type and message, as before groups were kept."""
    from loom_runtime.execution import GROUP_KEPT

    def fan_out() -> str:
        raise ExceptionGroup("fan-out", [ValueError(str(n)) for n in range(GROUP_KEPT + 1)])

    @loom.flow("big")
    def big(ctx: FlowContext) -> str:
        try:
            ctx.decide("search", fan_out)
        except Exception as exc:
            return type(exc).__name__
        return "none"

    run = loom.run("big")
    assert run.output == "ExceptionGroup"
    decision = loom.execution(run.execution_id).decisions["search"]
    assert decision.meta is None and len(decision.message or "") < 1_000
