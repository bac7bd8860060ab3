"""One step body for the sync and async paths: what each driver does at the pending point."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loom_runtime.driver import Pending, Steps, adrive, drive


async def _three() -> int:
    return 3


async def _boom() -> int:
    raise ValueError("boom")


def _steps(awaitable: Any, log: list[str]) -> Steps[str]:
    try:
        value = yield Pending("the step", awaitable)
    except ValueError as exc:
        log.append(f"handled {exc}")
        raise
    return f"got {value}"


def _settle(pending: Pending) -> Any:
    return asyncio.run(pending.awaitable)  # type: ignore[arg-type]


def test_drive_settles_the_pending_value_and_returns_the_result() -> None:
    """drive sends back what settle made of the pending value; the step's return is the result."""
    assert drive(_steps(_three(), []), _settle) == "got 3"


def test_adrive_awaits_the_pending_value() -> None:
    """adrive awaits the pending value and returns the step's result."""
    assert asyncio.run(adrive(_steps(_three(), []))) == "got 3"


@pytest.mark.parametrize("driver", ["drive", "adrive"])
def test_a_failure_is_thrown_where_the_step_waited(driver: str) -> None:
    """A failure while settling is raised inside the step, whose own handler sees it."""
    log: list[str] = []
    with pytest.raises(ValueError, match="boom"):
        if driver == "drive":
            drive(_steps(_boom(), log), _settle)
        else:
            asyncio.run(adrive(_steps(_boom(), log)))
    assert log == ["handled boom"]


def test_a_step_that_never_waits_is_a_plain_call() -> None:
    """A step that returns before yielding gives its result with nothing settled."""

    def immediate() -> Steps[int]:
        return 7
        yield Pending("never", _three())  # pragma: no cover - makes this a generator

    assert drive(immediate(), lambda _p: pytest.fail("nothing is pending")) == 7
