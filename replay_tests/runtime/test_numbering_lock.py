"""Numbering a decide takes its lock by the lock's own methods, not ``with`` (ADR 0048,
amended): a failure while numbering must still release it, or every later ``decide`` of the
execution, from any thread, would wait forever.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from loom_runtime import FlowContext
from loom_runtime.context import Slot
from loom_runtime.execution import Decision


class _FailingOnce(Mapping[str, Decision]):
    """A recorded mapping whose first lookup fails, as a broken source's might."""

    def __init__(self) -> None:
        self.failed = False

    def __getitem__(self, key: str) -> Decision:
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the source failed while numbering")
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class _Source:
    """Answers nothing from the log and keeps computed values in memory."""

    redactor = None

    def __init__(self) -> None:
        self.recorded = _FailingOnce()

    def lookup(self, slot: Slot) -> Decision | None:
        return None

    def record(
        self, slot: Slot, value: object, *, type: Any, meta: msgspec.Raw | None = None
    ) -> Any:
        return value

    def record_failure(
        self, slot: Slot, error: Exception, *, meta: msgspec.Raw | None = None
    ) -> None:
        pass


def test_a_failure_while_numbering_releases_the_lock_for_every_thread() -> None:
    ctx = FlowContext(_Source(), execution_id=uuid.uuid4(), flow="f")
    try:
        ctx.decide("k", lambda: 1)
    except RuntimeError as exc:
        assert "while numbering" in str(exc)
    else:
        raise AssertionError("the source's failure was swallowed")
    answers: list[int] = []
    other = threading.Thread(target=lambda: answers.append(ctx.decide("k", lambda: 2)), daemon=True)
    other.start()
    other.join(30)  # a held lock would block it for good: a deadlock guard, not a timing
    assert not other.is_alive() and answers == [2]
