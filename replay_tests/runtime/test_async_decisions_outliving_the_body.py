"""ADR 0002, amended: the decisions an async flow left computing when its body ended (a gather
whose first call failed, a race's loser not cancelled, a prefetch the body never awaited
because it was cancelled) are cancelled and stored as cancelled before the execution ends,
under ``await loom.arun`` as ``asyncio.run`` already did under ``loom.run``. Under ``arun``
they went on running on the application's loop: their values could no longer be stored, so
the unchanged code's replay reported them unrecorded, and a cancelled run's prefetch went on
computing while a resume computed it again."""

from __future__ import annotations

import asyncio
import contextlib

from loom_runtime import AsyncFlowContext, Loom


async def _slow(name: str) -> str:
    await asyncio.sleep(0.2)
    return name


async def _fails() -> str:
    await asyncio.sleep(0.01)
    raise ValueError("search backend down")


def _flows(loom: Loom) -> None:
    @loom.flow("gathered")
    async def gathered(ctx: AsyncFlowContext) -> list[str]:
        return list(
            await asyncio.gather(
                ctx.decide("model", lambda: _slow("model")), ctx.decide("search", _fails)
            )
        )

    @loom.flow("race")
    async def race(ctx: AsyncFlowContext) -> str:
        calls = [
            asyncio.ensure_future(ctx.decide("primary", lambda: _slow("primary"))),
            asyncio.ensure_future(ctx.decide("backup", lambda: asyncio.sleep(0.01, "backup"))),
        ]
        done, _ = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
        return str(done.pop().result())  # the loser is not cancelled: just not needed


def test_an_arun_recording_with_calls_left_computing_replays_identical(loom: Loom) -> None:
    _flows(loom)

    async def application() -> dict[str, list[str]]:
        seen = {}
        for name in ("gathered", "race"):
            with contextlib.suppress(ValueError):
                await loom.arun(name)
            await asyncio.sleep(0.4)  # the application goes on serving meanwhile
            [summary] = [e for e in loom.executions() if e.flow == name]
            execution = loom.execution(summary.execution_id)
            seen[name] = sorted(execution.decisions)
            in_a_thread = await asyncio.to_thread(loom.replay, execution.id)  # its own loop
            for replay in (await loom.areplay(execution.id), in_a_thread):
                assert replay.identical, (name, replay.divergences)
        return seen

    assert asyncio.run(application()) == {
        "gathered": ["model", "search"],
        "race": ["backup", "primary"],
    }


def test_a_cancelled_arun_does_not_leave_its_prefetch_computing_beside_the_resume(
    loom: Loom,
) -> None:
    charges: list[str] = []

    async def charge() -> str:
        await asyncio.sleep(0.3)
        charges.append("card")
        return "charged"

    @loom.flow("checkout")
    async def checkout(ctx: AsyncFlowContext) -> list[str]:
        first = asyncio.create_task(ctx.decide("reserve", lambda: asyncio.sleep(0.5, "ok")))
        second = asyncio.create_task(ctx.decide("charge", charge))  # a prefetch
        return [await first, await second]

    async def application() -> object:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loom.arun("checkout"), 0.1)
        [summary] = loom.executions()
        run = await loom.aresume(summary.execution_id)
        await asyncio.sleep(0.5)
        return run.output

    assert asyncio.run(application()) == ["ok", "charged"]
    assert charges == ["card"]
