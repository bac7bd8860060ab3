"""ADR 0026 and ADR 0002 ("completion order"), amended: a decision recorded as cancelled by
the flow's own timeout waits, on replay, for that timeout to cancel it again, at most its
bound. Under a frozen clock (freezegun, as tests replay) neither the timeout nor the bound
can fire: the replay hung. The wait now ends once the loop's clock is seen frozen, with or
without other decisions to order, and the replay ends."""

from __future__ import annotations

import asyncio
import threading

import pytest
from freezegun import freeze_time

from loom_runtime import AsyncFlowContext, Loom


async def _slow() -> str:
    await asyncio.sleep(1)
    return "late"


@pytest.mark.parametrize("decisions", [1, 2], ids=["alone", "ordered"])
def test_a_recorded_timeout_replayed_under_a_frozen_clock_ends(loom: Loom, decisions: int) -> None:
    @loom.flow("guarded")
    async def guarded(ctx: AsyncFlowContext) -> str:
        if decisions == 2:
            ctx.now()  # a second decision: the replay hands answers out in recorded order
        try:
            answer: str = await asyncio.wait_for(ctx.decide("model", _slow), 0.05)
            return answer
        except TimeoutError:
            return "fallback"

    run = loom.run("guarded")
    assert run.output == "fallback"
    ended: dict[str, object] = {}

    def replay() -> None:
        with freeze_time("2026-12-07"):
            ended["result"] = loom.replay(run.execution_id)

    worker = threading.Thread(target=replay, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the replay under a frozen clock did not end"
    assert "result" in ended
