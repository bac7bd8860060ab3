"""``loom demo``: record a small triage flow, then replay it with its live dependencies cut off.

The flow's "search" and "model" are stand-ins for a retrieval and a model call: they are live
(they read the clock and a random source) and they refuse to run while
:data:`_live.reachable` is false. The replay runs with them unreachable, so an identical
replay proves that every answer came from the log.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from loom_runtime.context import FlowContext
from loom_runtime.loom import Loom
from loom_runtime.replay import ReplayResult


@dataclass
class _Live:
    reachable: bool = True


_live = _Live()


def _search(question: str) -> list[str]:
    if not _live.reachable:
        raise ConnectionError("search is unreachable during replay")
    runbooks = ["db/slow-queries.md", "db/connection-pool.md", "infra/disk-full.md"]
    return [*random.sample(runbooks, k=2), f"asked about: {question}"]


def _model(question: str, hits: list[str]) -> str:
    if not _live.reachable:
        raise ConnectionError("the model is unreachable during replay")
    return f"Check {hits[0]} first ({len(question)} chars asked at {time.time():.3f})."


def register(loom: Loom) -> str:
    """Register the demo flow on ``loom``; returns its name."""

    @loom.flow("demo-triage", version="demo-1")
    def triage(ctx: FlowContext, question: str) -> dict[str, object]:
        asked_at = ctx.now()
        hits = ctx.decide(f"search:{question}", lambda: _search(question), kind="retrieval")
        answer = ctx.decide(
            "model", lambda: _model(question, hits), input={"question": question, "hits": hits}
        )
        return {"answer": answer, "hits": hits, "asked_at": asked_at.isoformat()}

    return "demo-triage"


def run_demo(loom: Loom, *, say: Callable[[str], None]) -> ReplayResult:
    """Record one execution, replay it with live dependencies unreachable, and report both."""
    flow = register(loom)
    run = loom.run(flow, question="why is the db slow?")
    say(f"recorded execution {run.execution_id}")
    say(f"  output: {run.output}")
    _live.reachable = False
    try:
        result = loom.replay(run.execution_id)
    finally:
        _live.reachable = True
    say("replayed with search and model unreachable")
    say(f"  output: {result.output}")
    say(f"  {result.describe()}")
    return result
