"""Numbering a decide holds a lock of its own (ADR 0048 and ADR 0043, amended).

It is taken by the lock's own methods, not ``with``: a failure while numbering must still
release it, or every later ``decide`` of the execution, from any thread, would wait forever.
And it must exclude: a thread pool's calls of one key are numbered one at a time, or two of
them could take the same occurrence (the lock is a one-token queue, not a ``threading.Lock``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import pytest

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


class _HeldOnFirst(Mapping[str, Decision]):
    """A recorded mapping whose lookup of ``held`` waits for ``release``; every lookup is
    listed in ``entered`` as it starts."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.entered: list[str] = []

    def __getitem__(self, key: str) -> Decision:
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.entered.append(key)
        if key == "held":
            self.inside.set()
            self.release.wait(30)  # a deadlock guard, not a timing
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class _Source:
    """Answers nothing from the log and keeps computed values in memory; ``recorded`` is what
    numbering looks keys up in."""

    redactor = None

    def __init__(self, recorded: Mapping[str, Decision]) -> None:
        self.recorded = recorded

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
    ctx = FlowContext(_Source(_FailingOnce()), execution_id=uuid.uuid4(), flow="f")
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


@pytest.mark.waits  # the second thread is given 0.5 s to reach numbering
def test_a_second_thread_waits_while_another_is_numbering() -> None:
    """A thread held inside numbering (in its source's lookup) keeps a second thread's decide
    out of numbering until it has left."""
    recorded = _HeldOnFirst()
    ctx = FlowContext(_Source(recorded), execution_id=uuid.uuid4(), flow="f")
    first = threading.Thread(target=lambda: ctx.decide("held", lambda: 1), daemon=True)
    first.start()
    assert recorded.inside.wait(30)
    second = threading.Thread(target=lambda: ctx.decide("other", lambda: 2), daemon=True)
    second.start()
    second.join(0.5)  # ample for it to reach numbering, were it not excluded
    try:
        assert recorded.entered == ["held"], "a second thread numbered concurrently"
    finally:
        recorded.release.set()
        first.join(30)
        second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert recorded.entered == ["held", "other"]
