"""ADR 0040, amended: a run taken over by another worker (it was paused past ``dead_after``)
computes nothing more once its first append is refused. It went on computing, and so on
running the side effects of, every later decision of a flow that catches errors around
``decide`` (one failed item must not stop the batch): each compute ran, only its append was
refused. Only the decision that was open at the takeover may be computed twice."""

from __future__ import annotations

import threading

from loom_runtime import ExecutionConflictError, FlowContext, Loom


def test_a_run_taken_over_computes_no_later_decision(loom: Loom, db_url: str) -> None:
    entered, release = threading.Event(), threading.Event()
    computed: list[tuple[str, str]] = []

    def register(instance: Loom, name: str) -> None:
        def effect(key: str) -> str:
            computed.append((name, key))
            if name == "first" and key == "step0":
                entered.set()
                assert release.wait(20)
            return key

        @instance.flow("mail")
        def mail(ctx: FlowContext, n: int) -> list[str]:
            sent = []
            for index in range(n):
                try:  # one failed item must not stop the batch
                    sent.append(ctx.decide(f"step{index}", lambda k=f"step{index}": effect(k)))
                except Exception as exc:
                    sent.append(type(exc).__name__)
            return sent

    register(loom, "first")
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["output"] = loom.run("mail", n=4).output
        except Exception as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=run)
    runner.start()
    assert entered.wait(20)
    [summary] = loom.executions()
    with Loom(db_url) as other:  # another worker, which took the run for dead
        register(other, "second")
        assert other.resume(summary.execution_id, force=True).output == [
            "step0",
            "step1",
            "step2",
            "step3",
        ]
    release.set()
    runner.join(20)
    first = [key for name, key in computed if name == "first"]
    assert first == ["step0"], f"the run taken over computed {first}"
    assert (
        isinstance(outcome.get("error"), ExecutionConflictError)
        or outcome.get("output") == ["ExecutionConflictError"] * 4
    )
