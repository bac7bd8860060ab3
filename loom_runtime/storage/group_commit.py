"""Group commit: appends that arrive while a commit is under way share the next one.

At ``synchronous=FULL`` a SQLite commit waits for an fsync, and that wait is most of what a
decision costs. One flow must pay it for every decision: its next decision depends on the
previous one being durable. Concurrent flows in one process need not each pay their own: while
one commit is being flushed, the appends that arrive queue up, and the next commit writes them
all and flushes once. Each caller still returns only after the commit holding its events has
completed, so "decide returns once its decision is durable" holds for every one of them.

The scheme is leader/follower, as in database write-ahead logs: a caller that finds no commit
under way leads one for everything queued (itself included); callers that find one under way
wait, and the first of them still unserved when it ends leads the next.

One refinement, PostgreSQL's ``commit_delay`` made adaptive: when the last commit was shared
by several appends, a new leader waits for as many to queue, for at most half the last
commit's duration. Without it, flows that were released together come back one CPU slice
apart: the first leads a commit of one, the rest queue behind it, and groups alternate between
one and the rest (measured: 4.2 appends per commit with 8 flows). A lone flow never waits:
its last commit held only itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from loom_runtime.storage.forks import reset_in_child

T = TypeVar("T")
R = TypeVar("R")


class Pending(Generic[T, R]):
    """One caller's work, and its outcome once the commit holding it has completed."""

    __slots__ = ("done", "error", "result", "work")

    def __init__(self, work: T) -> None:
        self.work = work
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit(Generic[T, R]):
    """Runs ``commit`` on every piece of work queued while the previous commit ran.

    ``commit`` receives the group in arrival order and sets each member's ``result`` or
    ``error`` (one member's failure must not fail the others: it isolates each, e.g. with a
    savepoint). An exception escaping ``commit`` means nothing of the group was committed; every
    member that has no outcome yet gets it.
    """

    def __init__(self, commit: Callable[[Sequence[Pending[T, R]]], None]) -> None:
        self._commit = commit
        self._reset()
        reset_in_child(self, "_reset")

    def _reset(self) -> None:
        """A fresh lock and an empty queue with no commit under way: the state at creation,
        and in a forked child, where a commit the parent's threads had under way (or a lock
        one of them held) would never end, and the child's first append would wait for it
        for ever. Their callers are not the child's: their appends are the parent's."""
        self._lock = threading.Lock()
        """``_turn``'s lock, entered directly on the append path: the same lock, without the
        condition's Python-level ``__enter__``/``__exit__`` around it."""
        self._turn = threading.Condition(self._lock)
        self._queue: list[Pending[T, R]] = []
        self._committing = False
        self._last_group = 1
        self._last_seconds = 0.0
        self._waiting = 0
        """Callers inside a wait on ``_turn``: a lone flow's appends find none, and skip the
        notifications (``Condition.notify_all`` is Python, twice per append)."""

    @property
    def queued(self) -> int:
        """How many appends wait for the next commit (what a monitor, or a test, looks at)."""
        with self._turn:
            return len(self._queue)

    def submit(self, work: T) -> R | None:
        """``work``'s result once committed (durably, if the commit is), or its error."""
        mine: Pending[T, R] = Pending(work)
        with self._lock:
            self._queue.append(mine)
            if self._waiting:
                self._turn.notify_all()  # a leader may be waiting for its group to fill
            while self._committing and not mine.done:
                self._wait()
            if mine.done:
                return _outcome(mine)
            self._committing = True
            try:
                if len(self._queue) < self._last_group:  # never true for a lone flow's appends
                    self._wait(lambda: len(self._queue) >= self._last_group, self._last_seconds / 2)
            except BaseException:  # interrupted before its commit began: it writes nothing,
                self._queue.remove(mine)  # and the next caller leads
                self._committing = False
                self._turn.notify_all()
                raise
            group, self._queue = self._queue, []
        started = time.monotonic()
        try:
            self._commit(group)
        except BaseException as exc:
            for member in group:
                if member.error is None:
                    member.error = exc
        finally:
            with self._lock:
                for member in group:
                    member.done = True
                self._committing = False
                self._last_group = len(group)
                self._last_seconds = time.monotonic() - started
                if self._waiting:
                    self._turn.notify_all()
        return _outcome(mine)

    def _wait(self, until: Callable[[], bool] | None = None, timeout: float = 0.0) -> None:
        """Wait on ``_turn`` (held), for a notification or until ``until`` holds (at most
        ``timeout`` seconds), counted in ``_waiting`` for as long as it waits."""
        self._waiting += 1
        try:
            if until is None:
                self._turn.wait()
            else:
                self._turn.wait_for(until, timeout=timeout)
        finally:
            self._waiting -= 1


def _outcome(pending: Pending[T, R]) -> R | None:
    """The result, or the error raised in each caller it belongs to (one object for a whole
    failed group, as ``concurrent.futures`` raises one exception to every waiter)."""
    if pending.error is not None:
        raise pending.error
    return pending.result
