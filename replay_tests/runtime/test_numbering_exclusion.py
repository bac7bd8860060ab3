"""Numbering a decide excludes every other thread's numbering until it is done (ADR 0043,
amended 2026-12-02): the lock is a one-token queue, not a ``threading.Lock``, and must still
be one.

A thread pool's calls of one key are numbered one at a time, or two of them could take the
same occurrence. Here a thread is held inside numbering (in its source's lookup) while a
second thread decides: the second must not reach numbering before the first has left it.
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
    """Answers nothing from the log and keeps computed values in memory."""

    redactor = None

    def __init__(self) -> None:
        self.recorded = _HeldOnFirst()

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


def test_a_second_thread_waits_while_another_is_numbering() -> None:
    source = _Source()
    ctx = FlowContext(source, execution_id=uuid.uuid4(), flow="f")
    first = threading.Thread(target=lambda: ctx.decide("held", lambda: 1), daemon=True)
    first.start()
    assert source.recorded.inside.wait(30)
    second = threading.Thread(target=lambda: ctx.decide("other", lambda: 2), daemon=True)
    second.start()
    second.join(0.5)  # ample for it to reach numbering, were it not excluded
    try:
        assert source.recorded.entered == ["held"], "a second thread numbered concurrently"
    finally:
        source.recorded.release.set()
        first.join(30)
        second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert source.recorded.entered == ["held", "other"]
