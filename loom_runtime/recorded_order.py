"""The order an async flow's recorded answers are handed back in: the order they were recorded.

Live, concurrent calls finish in the order the world answers them, and each is recorded as it
finishes. A replay has every answer at hand, so without an order of its own the tasks of a
flow got theirs in the order they asked, which is the order they were started: code that acts
on which call finished first (``asyncio.as_completed``, ``asyncio.wait(FIRST_COMPLETED)``, a
``TaskGroup`` whose failure cancels its siblings) took another path on every replay and was
reported as diverging when nothing had changed.

So a replay of an async flow hands a recorded answer out only once every answer recorded
before it has been handed out; a task asking early waits (on a future of the running loop)
until its turn. Sequential code asks in the recorded order and never waits. When a turn can
never come (the code no longer asks an earlier call, or asks it only after this one), the
replay would wait forever; so when nothing has been handed out for :data:`STALL_PASSES`
passes of the event loop, the earliest waiting answer is handed out and the earlier ones it
waited for are passed over (a later ask of one is answered at once). While a timer of the
loop is pending (a flow's own ``asyncio.wait(timeout=...)`` before it starts a hedging call),
the missing call may still come, so the watch gives it :data:`STALL_SECONDS` as well.
ADR 0002 ("completion order") says why and what it cannot see (a call waiting on real I/O
the log does not hold).
"""

from __future__ import annotations

import asyncio
import functools

STALL_PASSES = 100
"""Passes of the event loop with nothing handed out (and no timer pending) after which the
earliest waiting answer is handed out anyway. A woken task asks its next call within a few
passes (a queue's hand-over takes two), so a faithful replay never gets near it."""

STALL_SECONDS = 5.0
"""With a timer of the loop pending (it may start the missing call when it fires), how long
by the loop's clock the watch waits for progress before it hands out the earliest answer: a
pending timer may belong to a task that never will (a heartbeat of the application that
replays), and a replay must end."""


class RecordedOrder:
    """Hands out the recorded answers of one replay (or resume) in their recorded order.

    Built from the decision keys in the order the log holds them. :meth:`turn` is asked by a
    caller that can wait (an awaited ``decide``, an async transport's or tool's call);
    :meth:`handed_out` by one that cannot (``ctx.now()``, a sync client), which gets its
    answer at once. Keys it was not built with (computed live, new) are never held back.
    Used from the flow's event loop only, as everything of an async flow is.
    """

    def __init__(self, keys: list[str]) -> None:
        self._keys = keys
        self._rank: dict[str, int] | None = None
        """Each key's place, built when the first key is asked out of order (sequential
        code never asks one so: it is checked against ``_keys[_next]`` alone)."""
        self._handed = bytearray()  # by rank, built with ``_rank``
        self._next = 0
        """The lowest rank not handed out: every answer ranked below it has been."""
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._progress = 0
        """How many answers have been handed out: the watch's measure of progress."""
        self._watching = False

    def turn(self, key: str) -> asyncio.Future[None] | None:
        """None when ``key``'s answer may be handed out now (it is then counted handed out),
        else a future of the running loop that completes when its turn comes."""
        if self._in_order(key):
            return None
        rank = self._ranks().get(key)
        if rank is None:
            return None
        if rank <= self._next:
            self._hand(rank)
            return None
        waiting = self._waiting.get(rank)
        if waiting is not None and not waiting.done():  # asked again while it waits
            return waiting
        loop = asyncio.get_running_loop()
        waiting = self._waiting[rank] = loop.create_future()
        waiting.add_done_callback(functools.partial(self._left, rank))
        if not self._watching:
            self._watching = True
            loop.call_soon(self._watch, loop, self._progress, 0, loop.time())
        return waiting

    def handed_out(self, key: str) -> None:
        """``key``'s answer was handed out now, by a caller that could not wait its turn."""
        if not self._in_order(key):
            rank = self._ranks().get(key)
            if rank is not None:
                self._hand(rank)

    def _in_order(self, key: str) -> bool:
        """Whether ``key`` is the next recorded one while none was asked out of order (it is
        then counted handed out): the path of sequential code, with nothing to wake."""
        following = self._next
        if self._rank is None and following < len(self._keys) and self._keys[following] == key:
            self._next = following + 1
            self._progress += 1
            return True
        return False

    def _ranks(self) -> dict[str, int]:
        if self._rank is None:
            self._rank = {key: rank for rank, key in enumerate(self._keys)}
            handed = self._next  # the ranks below it were handed out in order
            self._handed = bytearray(b"\x01") * handed + bytearray(len(self._keys) - handed)
        return self._rank

    def _hand(self, rank: int) -> None:
        handed = self._handed
        if handed[rank]:
            return
        handed[rank] = 1
        self._progress += 1
        self._wake()

    def _wake(self) -> None:
        """Move past every answer handed out, waking each waiter whose turn that makes."""
        handed, waiting = self._handed, self._waiting
        while True:
            while self._next < len(handed) and handed[self._next]:
                self._next += 1
            woken = waiting.pop(self._next, None)
            if woken is None:
                return
            handed[self._next] = 1
            self._progress += 1
            if not woken.done():
                woken.set_result(None)

    def _left(self, rank: int, waiting: asyncio.Future[None]) -> None:
        """A waiter whose task was cancelled while it waited counts as handed out: the
        answers after it must not wait for a task that is gone."""
        if self._waiting.get(rank) is waiting:
            del self._waiting[rank]
            self._hand(rank)

    def _watch(
        self, loop: asyncio.AbstractEventLoop, progress: int, idle: int, since: float
    ) -> None:
        """Once a pass of the loop while answers wait: hand out the earliest of them after
        :data:`STALL_PASSES` passes in a row with nothing handed out and no timer pending,
        or after :data:`STALL_SECONDS` by the loop's clock with nothing handed out at all."""
        if not self._waiting:
            self._watching = False
            return
        timer = _timer_pending(loop)
        if self._progress != progress:
            idle, since = 0, loop.time()
        elif timer and loop.time() - since < STALL_SECONDS:
            idle = 0  # the timer may start the missing call: passes count from when it fired
        elif timer or idle >= STALL_PASSES:
            self._next = max(self._next, min(self._waiting))  # the earlier ones passed over
            self._wake()
            idle, since = 0, loop.time()
        if timer:  # look again a little later, not spinning while the loop waits for it
            loop.call_later(0.01, self._watch, loop, self._progress, idle, since)
        else:
            loop.call_soon(self._watch, loop, self._progress, idle + 1, since)


def _timer_pending(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a timer (an ``asyncio.sleep``, a ``wait`` with a timeout) is pending on
    ``loop``: asyncio's own loops list them in ``_scheduled``; for a loop that does not
    (uvloop), none is assumed and the watch counts passes alone."""
    scheduled = getattr(loop, "_scheduled", ())
    return any(not timer.cancelled() for timer in scheduled)
