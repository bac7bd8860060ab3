"""A resume by code that never asks some of the execution's recorded decisions (ADR 0026,
amended 2026-12-05 "changed code").

Resuming with code that asks a recorded key with another input is refused (two runs would be
spliced). Code that renamed a key asked nothing recorded: it computed its own decisions and
completed silently, and the execution's record then held both runs' decisions, so its replay
reported the old ones unused. The resume now says so, naming them; code that asks every
recorded decision resumes without a word (the control).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from loom_runtime import Loom


def _interrupted(url: str) -> Any:
    with Loom(url) as loom:

        @loom.flow("f")
        def f(ctx: Any) -> str:
            ctx.decide("search", lambda: "hits")
            raise KeyboardInterrupt  # the process stops here

        with pytest.raises(KeyboardInterrupt):
            loom.run("f")
        (summary,) = loom.executions()
        return summary.execution_id


@pytest.mark.parametrize("renamed", [True, False], ids=["renamed", "same-keys"])
def test_a_resume_that_never_asks_a_recorded_decision_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, renamed: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    execution_id = _interrupted(url)
    with Loom(url) as loom:

        @loom.flow("f")
        def f(ctx: Any) -> str:
            hits = ctx.decide("retrieve" if renamed else "search", lambda: "hits")
            return str(ctx.decide("model", lambda: f"answer from {hits}"))

        with caplog.at_level(logging.WARNING, logger="loom.runtime"):
            run = loom.resume(execution_id)
        assert run.output == "answer from hits"
        identical = loom.replay(execution_id).identical
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if renamed:
        assert len(warned) == 1 and "'search'" in warned[0] and "never asked" in warned[0]
        assert not identical
    else:
        assert warned == [] and identical


def test_a_resume_asking_a_recorded_decision_as_another_kind_is_refused(tmp_path: Path) -> None:
    """A resume refuses code that asks a recorded key with another input (two runs spliced);
    asked as another ``kind`` it was taken silently, though a replay of the execution now
    reports that as a divergence (review of 6 December). Refused alike, naming both kinds;
    the same kind resumes (the test above)."""
    from loom_runtime import DecisionKindChangedError

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    execution_id = _interrupted(url)
    with Loom(url) as loom:

        @loom.flow("f")
        def f(ctx: Any) -> str:
            return str(ctx.decide("search", lambda: "hits", kind="retrieval"))

        with pytest.raises(DecisionKindChangedError, match=r"'search'.*None.*'retrieval'"):
            loom.resume(execution_id)
