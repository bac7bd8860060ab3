"""ADR 0002, amended: a compute that fails with an exception group (a tool fanning out with
``asyncio.TaskGroup``) is replayed as that group, holding the errors it held, so a flow that
handles it with ``except*`` or ``except ExceptionGroup`` takes the path it took live. The group
could not be rebuilt from its message (it needs its errors): the replay raised
``RecordedComputeError`` and diverged from the unchanged code. The errors are kept in the
failure's meta (type and message each, nested groups likewise), read back as untrusted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from loom_runtime import AsyncFlowContext, FlowContext, Loom
from loom_runtime.context import rebuild_error
from loom_runtime.execution import Decision


async def _fan_out() -> str:
    async def backend(number: int) -> None:
        raise ValueError(f"backend {number} down")

    async with asyncio.TaskGroup() as group:
        group.create_task(backend(1))
    return "unreachable"


def test_a_flow_handling_a_compute_s_group_with_except_star_replays_identical(
    loom: Loom,
) -> None:
    @loom.flow("star")
    async def star(ctx: AsyncFlowContext) -> str:
        try:
            answer: str = await ctx.decide("search", _fan_out, kind="tool")
            return answer
        except* ValueError:
            pass
        return "fallback"

    run = loom.run("star")
    assert run.output == "fallback"
    result = loom.replay(run.execution_id)
    assert result.identical, result.divergences


def test_a_plain_flow_handling_a_compute_s_group_replays_identical(loom: Loom) -> None:
    """The same in a ``def`` flow, whose decisions are computed by another path (no driver),
    and through a fork past the failure, which answers it from the parent's recording."""

    def fails() -> str:
        raise ExceptionGroup("tools", [ValueError("backend down")])

    @loom.flow("plain-star")
    def plain(ctx: FlowContext) -> str:
        outcome = "other"
        try:
            ctx.decide("search", fails, kind="tool")
        except* ValueError:
            outcome = "fallback"
        ctx.decide("after", lambda: 1)
        return outcome

    run = loom.run("plain-star")
    assert run.output == "fallback"
    result = loom.replay(run.execution_id)
    assert result.identical, result.divergences
    fork = loom.fork(run.execution_id, at="after")
    assert fork.output == "fallback"


def test_a_group_is_rebuilt_with_its_errors_nested_ones_too() -> None:
    meta = {
        "exceptions": {
            "message": "outer",
            "exceptions": [
                {"type": "builtins:ValueError", "message": "one"},
                {
                    "type": "builtins:ExceptionGroup",
                    "message": "inner",
                    "exceptions": [{"type": "builtins:KeyError", "message": "'two'"}],
                },
            ],
        }
    }
    decision = Decision(
        "search",
        "tool",
        msgspec.Raw(b"null"),
        error_type="builtins:ExceptionGroup",
        message="outer (2 sub-exceptions) [builtins:ValueError: one; builtins:ExceptionGroup: "
        "inner (1 sub-exception) [builtins:KeyError: 'two']]",
        meta=msgspec.Raw(msgspec.json.encode(meta)),
    )
    rebuilt = rebuild_error(decision)
    assert isinstance(rebuilt, ExceptionGroup) and rebuilt.message == "outer"
    first, second = rebuilt.exceptions
    assert isinstance(first, ValueError) and str(first) == "one"
    assert isinstance(second, ExceptionGroup)
    assert isinstance(second.exceptions[0], KeyError)


@pytest.mark.parametrize(
    "exceptions",
    [
        None,
        "not a mapping",
        {"message": "no errors", "exceptions": []},
        {"message": 3, "exceptions": [{"type": "builtins:ValueError", "message": "x"}]},
        {"message": "m", "exceptions": [{"type": 1, "message": "x"}]},
        {"message": "m", "exceptions": [{"type": "builtins:ValueError"}]},
    ],
)
def test_a_group_s_errors_that_are_not_as_loom_stores_them_rebuild_nothing(
    exceptions: object,
) -> None:
    """The meta is untrusted (a bundle): anything but loom's own shape is the recorded type
    and message as a :class:`RecordedComputeError`, as before, never a crash."""
    decision = Decision(
        "search",
        "tool",
        msgspec.Raw(b"null"),
        error_type="builtins:ExceptionGroup",
        message="m",
        meta=msgspec.Raw(msgspec.json.encode({"exceptions": exceptions})),
    )
    assert not isinstance(rebuild_error(decision), ExceptionGroup)


class Batch(ExceptionGroup):  # type: ignore[type-arg]
    """An application's own exception group (a batch of failed tool calls)."""


def test_a_subclass_of_exception_group_replays_as_itself_with_its_errors(loom: Loom) -> None:
    """An application's ``ExceptionGroup`` subclass was rebuilt as ``RecordedComputeError``:
    ``except Batch`` and ``except* ValueError`` took another path on replay than live, and a
    flow letting it through replayed as failing with another error. Rebuilt as its class
    (loaded, never imported), holding its errors, nested ones too."""

    def fails() -> str:
        raise Batch("batch", [ValueError("a down"), Batch("inner", [KeyError("b")])])

    @loom.flow("batch")
    def batch(ctx: FlowContext) -> list[str]:
        seen = []
        try:
            ctx.decide("tools", fails)
        except Batch as group:
            seen.append(type(group.exceptions[1]).__name__)
            try:
                raise group
            except* ValueError:
                seen.append("value")
            except* KeyError:
                seen.append("key")
        return seen

    @loom.flow("through")
    def through(ctx: FlowContext) -> str:
        return str(ctx.decide("tools", fails))

    run = loom.run("batch")
    assert run.output == ["Batch", "value", "key"]
    result = loom.replay(run.execution_id)
    assert result.identical, result.divergences
    with pytest.raises(Batch):
        loom.run("through")
    failed = loom.executions()[-1].execution_id
    again = loom.replay(failed)
    assert again.identical, again.divergences


@pytest.mark.parametrize(
    "errors",
    [
        pytest.param(lambda: [ValueError(f"backend {n} down") for n in range(25)], id="25-errors"),
        pytest.param(lambda: [ValueError("token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")],
                     id="a-secret"),
        pytest.param(lambda: [ValueError("GET https://bob:pw@api.example.com/x?key=s3cr3t")],
                     id="a-url-with-credentials"),
        pytest.param(lambda: [ValueError("a\x00nul and a \ud800 surrogate")], id="unstorable"),
        pytest.param(lambda: [_nested(7)], id="nested-to-the-kept-depth"),
        pytest.param(lambda: [KeyError("k"), Batch("inner", [OSError(2, "gone")])], id="mixed"),
        pytest.param(lambda: [KeyError("k"), ValueError("password=hunter2")], id="a-password-last"),
    ],
)  # fmt: skip
def test_a_recorded_group_of_any_shape_replays_identical(
    loom: Loom, errors: Callable[[], list[Exception]]
) -> None:
    """What loom itself records, of many shapes (redacted, made storable, cut after 20
    errors, nested to the kept depth), is rebuilt as the group it was, so the unchanged flow
    replays identical. A first form of ADR 0002's "failure meta" rebuilt a group only when it
    described as its stored message, and a regression review found genuine shapes that do
    not (a redacted password taking the closing bracket, a member class not loaded at
    replay): the check was withdrawn. (Nested past ``GROUP_DEPTH`` the innermost errors are
    not kept, and such a flow diverges.)"""

    def fails() -> str:
        raise ExceptionGroup("tools", errors())

    @loom.flow("shapes")
    def shapes(ctx: FlowContext) -> list[str]:
        seen = []
        try:
            ctx.decide("search", fails, kind="tool")
        except* ValueError:
            seen.append("value")
        except* Exception:
            seen.append("other")
        return seen

    run = loom.run("shapes")
    result = loom.replay(run.execution_id)
    assert result.identical, result.divergences


def _nested(depth: int) -> Exception:
    error: Exception = ValueError("deepest")
    for level in range(depth):
        error = ExceptionGroup(f"level {level}", [error])
    return error
