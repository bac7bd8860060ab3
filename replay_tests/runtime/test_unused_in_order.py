"""``Replayer.unused`` answers a replay that matched every recorded key in recorded order
with one list comparison (ADR 0043, amended 2026-12-02); every other replay takes the sets,
and must report exactly what it reported before."""

from __future__ import annotations

from typing import Any

from loom_runtime import Loom, UnusedDecisionsError


def _flow(order: list[str]) -> Any:
    def flow(ctx: Any) -> list[int]:
        return [ctx.decide(key, lambda: 1) for key in order]

    return flow


def test_recorded_keys_asked_in_another_order_leave_none_unused(sqlite_url: str) -> None:
    with Loom(sqlite_url) as loom:
        loom.flow("f")(_flow(["a", "b", "c"]))
        run = loom.run("f")
    with Loom(sqlite_url) as loom:
        loom.flow("f")(_flow(["c", "a", "b"]))
        result = loom.replay(run.execution_id)
    assert not any(isinstance(d, UnusedDecisionsError) for d in result.divergences)


def test_a_key_not_asked_is_unused_in_order_or_not(sqlite_url: str) -> None:
    with Loom(sqlite_url) as loom:
        loom.flow("f")(_flow(["a", "b", "c"]))
        run = loom.run("f")
    for order in (["a", "b"], ["b", "a"]):
        with Loom(sqlite_url) as loom:
            loom.flow("f")(_flow(order))
            result = loom.replay(run.execution_id)
        unused = [d for d in result.divergences if isinstance(d, UnusedDecisionsError)]
        assert [d.keys for d in unused] == [["c"]], order
