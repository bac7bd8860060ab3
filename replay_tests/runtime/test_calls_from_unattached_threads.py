"""A recorded kind of call made from a thread the flow started without its context (ADR 0024,
amended 2026-12-05 "threads").

The flow's context is a ``ContextVar``: tasks inherit it, threads do not. A flow that sent
requests from a ``ThreadPoolExecutor`` recorded none of them (outside any flow, a recording
transport passes a request through), and its replay sent them again, live, and said
"identical". Now the run logs a warning naming what was not recorded, and a replay during
which such a call was made is not identical. Submitting through
``contextvars.copy_context().run`` records and replays them (the control).
"""

from __future__ import annotations

import contextvars
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import loom_runtime
from loom_runtime import Loom, UnattributedCallError, tool


def _loom(path: Path, sent: list[str]) -> Loom:
    loom = Loom(f"sqlite:///{path}")

    def reply(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(200, json={"path": request.url.path})

    client = httpx.Client(transport=loom_runtime.transport(httpx.MockTransport(reply)))

    @tool
    def lookup(topic: str) -> str:
        return topic.upper()

    def fetch(name: str) -> Any:
        return client.get(f"https://api.example/{name}").json()["path"]

    @loom.flow("pooled")
    def pooled(ctx: Any, with_context: bool) -> list[str]:
        with ThreadPoolExecutor(2) as pool:
            if with_context:
                futures = [
                    pool.submit(contextvars.copy_context().run, fetch, n) for n in ("a", "b")
                ]
                futures.append(pool.submit(contextvars.copy_context().run, lookup, "c"))
            else:
                futures = [pool.submit(fetch, n) for n in ("a", "b")]
                futures.append(pool.submit(lookup, "c"))
            return [future.result() for future in futures]

    return loom


def _recorded_and_replayed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, *, with_context: bool
) -> tuple[int, list[str], Any, list[str]]:
    """Run the pooled flow, then replay it: the decisions it recorded, the warnings of the
    run, the replay's result, and the requests the replay sent."""
    sent: list[str] = []
    with _loom(tmp_path / "loom.db", sent) as loom:
        with caplog.at_level(logging.WARNING, logger="loom.runtime"):
            run = loom.run("pooled", with_context=with_context)
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        decisions = len(loom.execution(run.execution_id).decisions)
        sent.clear()
        return decisions, warned, loom.replay(run.execution_id), sent


def test_calls_from_a_thread_without_the_flow_s_context_are_said_not_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    decisions, warned, replayed, sent = _recorded_and_replayed(tmp_path, caplog, with_context=False)
    assert decisions == 0
    assert len(warned) == 1 and "not recorded" in warned[0]
    assert "GET api.example/a" in warned[0] and "copy_context" in warned[0]
    assert sent  # the replay reached the transport: it cannot be the recording's
    assert not replayed.identical
    (divergence,) = [d for d in replayed.divergences if isinstance(d, UnattributedCallError)]
    assert "tool:lookup" in str(divergence) and "copy_context" in str(divergence)


def test_calls_from_a_thread_given_the_flow_s_context_are_recorded_and_replayed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    decisions, warned, replayed, sent = _recorded_and_replayed(tmp_path, caplog, with_context=True)
    assert (decisions, warned, sent) == (3, [], [])
    assert replayed.identical
