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
loop is due within :data:`STALL_SECONDS` (a flow's own ``asyncio.wait(timeout=...)`` before it
starts a hedging call), the missing call may still come, so the watch waits that long too;
so it does while other tasks of the loop are busy, and while a recorded call is computed
again live (a replay's ``live=`` kinds), until its answer comes.

A call the flow cancelled (a timeout around it) is stored only once the flow goes on, after
siblings that finished later; it is ranked where it was cancelled (:func:`completion_order`),
and on replay holds its turn until the flow's timeout cancels it again
(:meth:`RecordedOrder.hold`); one whose timeout fired together with an earlier one's live is
seen by the flow after it (:meth:`RecordedOrder.seen_in_turn`).

An answer's turn is not all: code acting on an answer may be a pass or two of the loop away
from the task that took it (``wait_for``'s own task, ``shield``, one more ``await``), and an
answer that came live well after it, to another task, must not be handed out before that code
has run. So a live run keeps, in each such answer's meta, how many passes after the one before
it the answer came (:class:`AnswerSpacing`, up to :data:`SPACED_PASSES`), and the replay hands
it out no sooner after that one (:func:`answer_spacing`).

ADR 0002 ("completion order", "a cancellation's place", "timers together", "answers spaced")
says why and what it cannot see (a call waiting on real I/O the log does not hold).
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from loom_runtime.execution import Decision

CANCELLED_AFTER = "cancelled_after_decisions"
"""The meta field of a call the flow cancelled: how many of the execution's decisions were
stored when it was cancelled (it is stored itself only once the flow goes on)."""

ANSWERED_AFTER = "answered_after_passes"
"""The meta field of an answer taken live by another task than the answer stored before it,
one or more passes of the event loop after it: how many (up to :data:`SPACED_PASSES`)."""

SPACED_PASSES = 8
"""The most passes of the event loop an answer is kept apart from the one before it: more than
asyncio takes to carry an answer from the task that took it to the code acting on it
(``wait_for``'s inner task, a ``shield``, a gather inside a gather). An answer that came later
live (after real I/O, many milliseconds later) is counted as this many."""

SETTLE_PASSES = 4
"""Passes of the event loop a call cancelled again waits before it counts as handed out:
asyncio takes up to three to turn a cancellation into the flow's ``TimeoutError``
(``wait_for``'s own task ends and wakes its waiter, which wakes the task that awaited it)."""

STALL_PASSES = 100
"""Passes of the event loop with nothing handed out (and no timer due) after which the
earliest waiting answer is handed out anyway. A woken task asks its next call within a few
passes (a queue's hand-over takes two), so a faithful replay never gets near it."""

STALL_SECONDS = 5.0
"""How far ahead a timer of the loop counts as one that may start the missing call, and how
long by the loop's clock the watch then waits for progress before it hands out the earliest
answer: a timer may belong to a task that never will (a heartbeat of the application that
replays, an ``asyncio.timeout`` around the whole flow), and a replay must end."""

FROZEN_AFTER = 0.05
"""CPU seconds the process spends while the loop's clock stays put before the watch calls
that clock frozen: longer than the coarsest clock's tick (15.6 ms)."""


class RecordedOrder:
    """Hands out the recorded answers of one replay (or resume) in their recorded order.

    Built from the decision keys in the order the log holds them. :meth:`turn` is asked by a
    caller that can wait (an awaited ``decide``, an async transport's, tool's or MCP call),
    which calls :meth:`took` once its wait is over (or cancelled); :meth:`handed_out` by one
    that cannot (``ctx.now()``, a sync client, a sync tool, perhaps on a worker thread), which
    gets its answer at once. Keys it was not built with (computed live, new) are never held
    back. Its state is the flow's event loop's (:meth:`bind`): a call from another thread is
    passed to that loop, and a turn asked on another thread's loop is answered at once.
    """

    def __init__(self, keys: list[str], *, spacing: Mapping[int, int] | None = None) -> None:
        self._keys = keys
        self._spacing = spacing or {}
        """By rank, how many passes of the loop after the answer ranked before it an answer
        may be handed out (:func:`answer_spacing`); most ranks have none."""
        self._held = -1
        """The rank whose turn has come but is held (:meth:`_spaced`), or -1."""
        self._rank: dict[str, int] | None = None
        """Each key's place, built when the first key is asked out of order (sequential
        code never asks one so: it is checked against ``_keys[_next]`` alone)."""
        self._handed = bytearray()  # by rank, built with ``_rank``
        self._members: frozenset[str] | None = None  # the keys, for :meth:`_recorded`
        self._next = 0
        """The lowest rank not handed out: every answer ranked below it has been."""
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._progress = 0
        """How many answers have been handed out: the watch's measure of progress."""
        self._watching = False
        self._gave_up = False
        """Whether the watch has given up on a turn: the replay diverges, and the watch no
        longer waits for timers or busy tasks."""
        self._live = 0
        """How many recorded calls are being computed again live (a replay's ``live=``
        kinds, a counterfactual): each answer will come, however long it takes."""
        self._own_timers: set[asyncio.TimerHandle] = set()
        """The timers of :meth:`hold`'s waits: not ones the watch waits for."""
        # The watch's: the progress it last saw, passes since, and when (loop clock and CPU);
        # the loop's clock last read, and the CPU time when it was last seen to move.
        self._seen = self._idle = 0
        self._since = self._last = self._cpu_since = self._moved = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None  # the loop's, from :meth:`bind` on

    def turn(self, key: str) -> asyncio.Future[None] | None:
        """None when ``key``'s answer may be handed out now (it is then counted handed out),
        else a future of the running loop that completes when its turn comes; the caller
        then calls :meth:`took` when its wait is over, however it ended."""
        if threading.get_ident() != self._thread:  # not on the flow's loop (a helper's
            self.handed_out(key)  # ``asyncio.run`` on a worker thread): it cannot wait
            return None
        if self._in_order(key):
            return None
        rank = self._ranks().get(key)
        if rank is None:
            return None
        if rank <= self._next and rank != self._held:  # its turn, or passed over by the watch
            self._hand(rank)  # answered at once
            return None
        return self._wait(rank)

    def seen_in_turn(
        self, key: str, together: Callable[[str], bool]
    ) -> asyncio.Future[None] | None:
        """What ``key``'s call, recorded as cancelled and now cancelled again, waits on before
        the flow sees its cancellation: the turn of the answers stored before it, when each
        of them is a cancellation ``together`` says fired with this one live (timers due at
        one moment, as ``as_completed`` sets them: they fire in the order their tasks
        started, which it takes from a set, so the replay's order is not the live one; the
        stored order is). None otherwise, or when its turn has come: a timeout that fired
        earlier or later live keeps the replay's own order, so a change to it shows (ADR
        0002, amended "timers together"). The waiting call is counted handed out by
        :meth:`settle`, not here."""
        if threading.get_ident() != self._thread:
            return None
        rank = self._ranks().get(key)
        if rank is None or rank <= self._next:
            return None
        handed = self._handed
        earlier = [self._keys[r] for r in range(self._next, rank) if not handed[r]]
        if not all(together(other) for other in earlier):
            return None
        waiting = self._wait(rank)
        waiting.add_done_callback(lambda _: self._waiting.pop(rank, None))
        return waiting

    def _wait(self, rank: int) -> asyncio.Future[None]:
        """A future of the running loop that completes when ``rank``'s turn comes, watched
        (:meth:`_watch`) so that a turn that never comes is given up on."""
        loop = asyncio.get_running_loop()
        waiting = self._waiting[rank] = loop.create_future()
        if not self._watching:
            self._watching = True
            self._seen, self._idle = self._progress, 0
            self._since = self._last = loop.time()
            self._cpu_since = self._moved = time.process_time()
            loop.call_soon(self._watch, loop)
        return waiting

    def bind(self) -> None:
        """Make the running loop, the flow's as its coroutine starts, the one whose state this
        is: a call from any other thread (or a loop of its own there) is passed to it."""
        self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()

    def took(self, key: str) -> None:
        """The wait :meth:`turn` gave ``key`` is over: its task has resumed with the answer
        (or was cancelled). Only now is it counted handed out, so a later answer asked while
        the woken task had not yet run waits for it."""
        rank = self._ranks().get(key)
        if rank is not None:
            self._waiting.pop(rank, None)
            self._hand(rank)

    def handed_out(self, key: str) -> None:
        """``key``'s answer was handed out now, by a caller that could not wait its turn."""
        if self._thread is not None and threading.get_ident() != self._thread:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self.handed_out, key)
            return
        if not self._in_order(key):
            rank = self._ranks().get(key)
            if rank is not None:
                self._hand(rank)

    def _in_order(self, key: str) -> bool:
        """Whether ``key`` is the next recorded one while none was asked out of order (it is
        then counted handed out): the path of sequential code, with nothing to wake."""
        following = self._next
        if (
            self._rank is None
            and following < len(self._keys)
            and self._keys[following] == key
            and following != self._held
        ):
            self._next = following + 1
            self._progress += 1
            if self._spacing:
                self._spaced()
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
        """Move past every answer handed out; wake the waiter whose turn that makes (it is
        counted handed out when its task has run: :meth:`took`)."""
        handed = self._handed
        moved = False
        while self._next < len(handed) and handed[self._next]:
            self._next += 1
            moved = True
        if moved and self._spacing:
            self._spaced()
        if self._next == self._held:
            return
        woken = self._waiting.get(self._next)
        if woken is not None and not woken.done():
            woken.set_result(None)

    def _spaced(self) -> None:
        """The turn of the answer ranked ``_next`` has come: when it came live a number of
        passes after the one before it, to another task, hold it that many passes of the
        loop (from now: the one before was just handed out), then wake its waiter. The watch
        giving up lifts the hold."""
        rank, loop = self._next, self._loop
        passes = self._spacing.get(rank)
        if not passes or loop is None or loop.is_closed() or self._gave_up:
            self._held = -1
            return
        self._held = rank

        def later(left: int) -> None:
            if self._held != rank:
                return
            if left > 1:
                loop.call_soon(later, left - 1)
                return
            self._held = -1
            self._wake()

        loop.call_soon(later, passes)

    def live(self, key: str) -> None:
        """``key``, a recorded call, is being computed again live: the answers recorded after
        it wait for it, however long it takes (:meth:`computed` when it is done)."""
        if self._recorded(key):
            self._live += 1

    def computed(self, key: str) -> None:
        """The live computation :meth:`live` announced is done (its answer, or its failure,
        not yet handed out: that is a :meth:`turn`; or :meth:`settle` for a cancellation,
        :meth:`handed_out` for an interrupt)."""
        if self._recorded(key):
            self._live -= 1

    def hold(self, key: str, bound: float, *, until: float | None = None) -> BoundedWait | None:
        """What a call recorded as cancelled waits on, unanswered, for the flow's timeout to
        cancel it again (then :meth:`settle`); it completes after ``bound`` seconds if
        nothing does (then :meth:`handed_out`: the replay took another path). Its turn is held
        meanwhile: the answers recorded after its cancellation (a sibling that finished after
        the timeout live) wait. None when the call is not on the flow's loop (it cannot hold
        its turn there: it counts as handed out at once).

        Its own timer is not one the watch waits for, nor does the watch wait for the call:
        what cancels it may be an answer ranked after it (a streamed hedge's winner, stored
        once its body was read, after the loser's cancellation), or nothing (code that no
        longer awaits it, a frozen clock), and the watch then gives up on its turn as on any
        other. A timeout of the flow due within :data:`STALL_SECONDS` is waited for.

        ``until`` (a ``time.perf_counter`` moment): past ``bound``, the wait goes on while a
        timer of the loop, none of this order's own, is due by then (:func:`step_timer`): a
        timeout set around a whole step, perhaps by another task after this wait began."""
        if threading.get_ident() != self._thread or not self._recorded(key):
            return None
        loop = asyncio.get_running_loop()
        own = self._own_timers
        more = None if until is None else step_timer(until, own)
        return bounded_wait(loop, bound, more=more, own=own)

    def settle(self, key: str) -> None:
        """``key``'s call was cancelled again by the flow's timeout, as live. It counts as
        handed out only :data:`SETTLE_PASSES` passes of the loop later: a sibling recorded
        after the cancellation must not resume before the flow has seen it (the sibling's
        answer came after the timeout live), and asyncio takes a few passes to deliver a
        cancellation to the code that awaited it. On another thread (a helper's own loop,
        which may close before those passes) it is handed out at once: a call there cannot
        wait its turn either."""
        if threading.get_ident() != self._thread:
            self.handed_out(key)
            return
        loop = asyncio.get_running_loop()

        def settled(passes: int) -> None:
            if passes:
                loop.call_soon(settled, passes - 1)
            else:
                self.handed_out(key)

        settled(SETTLE_PASSES)

    def _recorded(self, key: str) -> bool:
        """Whether ``key`` has a turn, asked without building :attr:`_rank` (which would end
        the in-order path of the sequential replay around a live call)."""
        if self._rank is not None:
            return key in self._rank
        if self._members is None:
            self._members = frozenset(self._keys)
        return key in self._members

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Once a pass of the loop while answers wait: wake the earliest of them when the
        missing answer cannot be on its way. It may be while a recorded call is computed
        again live (no limit), while a timer of the loop is due within
        :data:`STALL_SECONDS` (for that long by the loop's clock), or while other tasks of the
        loop are busy (for that long, by CPU time and the loop's clock: a queue pipeline
        yields many times between two calls; once a replay, as an application's own busy task
        is always ready); otherwise after :data:`STALL_PASSES` passes in a row with nothing
        handed out. A clock that stays put while the process spends :data:`FROZEN_AFTER` of
        CPU is frozen (freezegun): no timer of it can fire. Once the watch has given up, the
        replay is known to diverge, and timers are no longer waited for."""
        if not any(not waiting.done() for waiting in self._waiting.values()):
            self._watching = False
            return
        now, cpu = loop.time(), time.process_time()
        moves = now != self._last
        if moves:
            self._moved = cpu
        self._last = now
        frozen = cpu - self._moved > FROZEN_AFTER
        timer = not self._gave_up and not frozen and _timer_due(loop, now, self._own_timers)
        busy = bool(getattr(loop, "_ready", ()))  # asyncio's own loops: other callbacks due
        timer_left = timer and now - self._since < STALL_SECONDS
        busy_left = (  # once a replay: an application's own busy task is always ready
            busy
            and not self._gave_up
            and cpu - self._cpu_since < STALL_SECONDS
            and now - self._since < STALL_SECONDS
        )
        if self._progress != self._seen:
            self._seen, self._idle, self._since, self._cpu_since = self._progress, 0, now, cpu
        elif self._live or timer_left or busy_left:
            self._idle = 0  # the missing answer may be on its way
        elif timer or busy or self._idle >= STALL_PASSES:
            self._gave_up = True
            self._held = -1
            self._next = max(self._next, min(self._waiting))  # the earlier ones passed over
            self._wake()
            self._idle, self._since, self._cpu_since = 0, now, cpu
        else:
            self._idle += 1
        # Waiting for a timer or a live call, look again a little later rather than spin; but
        # not while the clock stands still (frozen, a later look would never come).
        if (timer or self._live) and moves:
            loop.call_later(0.01, self._watch, loop)
        else:
            loop.call_soon(self._watch, loop)


def _complete(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)


class BoundedWait(asyncio.Future[None]):
    """A future :func:`bounded_wait` completes; ``timer`` is its bound's timer, ``frozen``
    whether it completed because the clock stood still rather than because the bound passed
    (no code's doing: a replay must not report it as a change of the flow)."""

    timer: asyncio.TimerHandle
    frozen: bool = False


def bounded_wait(
    loop: asyncio.AbstractEventLoop,
    bound: float,
    *,
    more: Callable[[], float | None] | None = None,
    own: set[asyncio.TimerHandle] | None = None,
) -> BoundedWait:
    """A future completed after ``bound`` seconds of ``loop``'s clock, or as soon as that
    clock is seen frozen: standing still while the process spends :data:`FROZEN_AFTER` of
    CPU (freezegun), when no timer of the loop can fire.

    What a call recorded as cancelled waits on during a replay (ADR 0026): for the flow's own
    timeout to cancel it again, else its bound. Under a frozen clock neither can come, and
    the replay hung; it now takes the bound as passed (the replay took another path). A
    moving clock is seen at the first look, a pass of the loop after this call, and nothing
    more is looked at.

    ``more``, asked as the bound passes, says how much longer to wait (None: no longer), and
    is asked again then. ``own`` holds the wait's timer while it is scheduled (a watch's
    set of timers it must not wait for)."""
    waiting = BoundedWait(loop=loop)

    def expired() -> None:
        if own is not None:
            own.discard(waiting.timer)
        longer = None if more is None or waiting.done() else more()
        if longer is None:
            _complete(waiting)
        else:
            schedule(longer)

    def schedule(seconds: float) -> None:
        waiting.timer = loop.call_later(seconds, expired)
        if own is not None:
            own.add(waiting.timer)

    def over(_: asyncio.Future[None]) -> None:
        waiting.timer.cancel()
        if own is not None:
            own.discard(waiting.timer)

    schedule(bound)
    waiting.add_done_callback(over)
    started, cpu = loop.time(), time.process_time()

    def look() -> None:
        if waiting.done() or loop.time() != started:
            return
        if time.process_time() - cpu > FROZEN_AFTER:
            waiting.frozen = True
            _complete(waiting)
        else:
            loop.call_soon(look)

    loop.call_soon(look)
    return waiting


def _timer_due(loop: asyncio.AbstractEventLoop, now: float, own: set[asyncio.TimerHandle]) -> bool:
    """Whether a timer (an ``asyncio.sleep``, a ``wait`` with a timeout) of ``loop`` fires
    within :data:`STALL_SECONDS`: asyncio's own loops list them in ``_scheduled``; for a loop
    that does not (uvloop), none is assumed and the watch counts passes alone. A timer due
    later (an ``asyncio.timeout(300)`` around the whole flow) is not waited for."""
    scheduled = getattr(loop, "_scheduled", ())
    # A heap: its head is the earliest timer, cancelled ones included. Past the window, none
    # is due (asked once a pass while answers wait: a scan of 10,000 far ``wait_for``
    # timeouts each pass made a replay handing out one answer a pass quadratic).
    if not scheduled or scheduled[0].when() - now > STALL_SECONDS:
        return False
    return any(
        not timer.cancelled() and timer.when() - now <= STALL_SECONDS and timer not in own
        for timer in scheduled
    )


def step_timer(
    until: float, own: set[asyncio.TimerHandle] | frozenset[asyncio.TimerHandle] = frozenset()
) -> Callable[[], float | None]:
    """What a replay's wait for a cut to come again asks each time its bound passes
    (:func:`bounded_wait`'s ``more``): how much longer to wait, or None.

    The wait goes on until the last timer of the running loop due by ``until`` (a
    ``time.perf_counter`` moment), and 0.02 s more, a timer of ``own`` aside; asked again
    when that passes. Any timer counts: a timeout set around a whole step is one, a
    watchdog that polls a deadline makes a new one each tick, and a heartbeat's ticks look
    alike, so a replay whose code no longer times the call out may wait until ``until``,
    the live run's own time at the cut (a regression review found that counting only the
    timers pending as the bound first passed made every replay of an unchanged flow cut by
    a polling watchdog diverge). A loop that does not list its timers (uvloop) is waited on
    until ``until``, as any timer may be there. What a call or a read recorded as cut by a
    timeout around a whole step waits for on replay, since nothing else can cut it again
    (ADR 0026, amended "cut at")."""

    def more() -> float | None:
        left = until - time.perf_counter()
        if left <= 0:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        scheduled = getattr(loop, "_scheduled", None)
        if scheduled is None:
            return left
        now = loop.time()
        # One already due but not yet run (the loop runs it next) counts too: a watchdog
        # polling at the margin's period re-arms just as the wait looks again.
        due = [
            timer.when() - now
            for timer in scheduled
            if not timer.cancelled() and timer not in own and timer.when() - now <= left
        ]
        return None if not due else min(max(max(due), 0.0) + 0.02, left)

    return more


def completion_order(keys: list[str], decisions: Mapping[str, Decision]) -> list[str]:
    """``keys`` (an execution's decisions in the order they were stored), with each call the
    flow cancelled moved back to where it was cancelled: after the first
    ``meta[CANCELLED_AFTER]`` of them, before any stored after its cancellation (two cancelled
    at one point keep their stored order). A cancellation is stored when the flow next asks
    something, so a sibling that finished after the timeout was stored before it, and handed
    out first on replay.

    Only failures are looked at (a cancellation is one; failures are few, so an async replay
    decodes no meta of a decision that succeeded). The meta is untrusted (a bundle's): a
    point that is not a count of decisions stored up to the call's own is ignored, and the
    call keeps its stored place; a wrong order is at worst a divergence the watch lets end.
    """
    moved: dict[str, int] = {}
    for index, key in enumerate(keys):
        decision = decisions[key]
        if decision.error_type is None or decision.meta is None:
            continue
        try:
            meta = msgspec.json.decode(decision.meta)
        except (msgspec.DecodeError, RecursionError):
            continue
        point = meta.get(CANCELLED_AFTER) if isinstance(meta, dict) else None
        # At its own place (the first cancellation of a point) it stays there, but ranks
        # with the others cancelled at that point, in stored order, not after them.
        if type(point) is int and 0 <= point <= index:
            moved[key] = point
    if not moved:
        return keys
    place = {key: index for index, key in enumerate(keys)}

    def rank(key: str) -> tuple[int, int, int]:
        # Moved to just before the decision stored at its point (the first stored after it).
        point = moved.get(key)
        return (place[key], 1, 0) if point is None else (point, 0, place[key])

    return sorted(keys, key=rank)


@functools.cache
def _field_reader(name: str) -> tuple[bytes, msgspec.json.Decoder[Any]]:
    """The mark that shows meta may hold field ``name``, and a decoder of that field alone
    (any other is skipped unparsed), made once per field."""
    field = msgspec.defstruct(f"_{name}", [(name, object, None)])
    return f'"{name}"'.encode(), msgspec.json.Decoder(field)


def meta_number(meta: msgspec.Raw | None, name: str) -> int | float | None:
    """The number a decision's ``meta`` holds as ``name``, read as untrusted (a bundle's):
    None when it has none, does not decode, or holds anything but an int or a finite float
    (never a bool). Shared by the fields a replay's order reads (:data:`ANSWERED_AFTER`,
    the cut time of ``context.CUT_AT``)."""
    if meta is None:
        return None
    mark, decoder = _field_reader(name)
    if mark not in bytes(meta):
        return None
    try:
        value = getattr(decoder.decode(meta), name)
    except (msgspec.DecodeError, RecursionError):
        return None
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return value
    return None


def answer_spacing(keys: list[str], decisions: Mapping[str, Decision]) -> dict[int, int]:
    """By rank in ``keys`` (a replay's order), the passes of the loop after the answer ranked
    before it that each answer's meta says it came live (:data:`ANSWERED_AFTER`); only an
    answer that has the field. The meta is untrusted (a bundle's): anything but a whole
    number from 1 up is ignored, and more than :data:`SPACED_PASSES` is taken as that many,
    so a crafted one delays an answer by a few passes at most."""
    spacing: dict[int, int] = {}
    for rank, key in enumerate(keys):
        passes = meta_number(decisions[key].meta, ANSWERED_AFTER) if rank else None
        if type(passes) is int and passes > 0:
            spacing[rank] = min(passes, SPACED_PASSES)
    return spacing


class AnswerSpacing:
    """Live, in an async flow's run: how many passes of the event loop each answer came after
    the answer stored before it, when it was already asked as that one was handed out, to
    another task (:meth:`stamp`).

    Counted by one callback of the loop at a time, which counts a pass and calls itself
    again, up to :data:`SPACED_PASSES` after the last answer (so the loop never spins for
    long). Needing no spacing: an answer asked only after the one before it was handed out
    (the code that asked it ran after that one, and does on replay too: sequential code, even
    each call in a ``wait_for`` of its own), one the same task took, and one of the same
    pass. What the flow stores as it goes on, after the fact (a cancellation,
    :attr:`aside`), is no answer it was handed.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._passes = 0
        self._counting = False
        self._taker: asyncio.Task[Any] | None = None
        self._stamps = 0
        """Answers handed out so far."""
        self._asked: dict[str, int] = {}
        """Keys asked and not yet answered, each with ``_stamps`` as it was asked."""
        self.aside = False
        """True while the flow stores what it cancelled (not an answer it was handed)."""

    def bind(self) -> None:
        """Count the running loop's passes: the flow's, as its coroutine starts."""
        self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()
        self._taker, self._passes, self._counting = None, 0, False

    def asked(self, key: str) -> None:
        """The flow asks ``key`` now (on its loop; anywhere else nothing is counted)."""
        if threading.get_ident() == self._thread:
            self._asked[key] = self._stamps

    def stamp(self, key: str) -> int | None:
        """``key``'s answer is handed to the running task now: the passes since the answer
        before it, when it was asked before that one was handed out, another task took that
        one, and they came in different passes; else None. None too off the flow's loop (a
        sync tool on a worker thread), which counts nothing."""
        loop = self._loop
        if loop is None or threading.get_ident() != self._thread or loop.is_closed():
            return None
        asked = self._asked.pop(key, None)
        if self.aside:
            return None
        task = asyncio.current_task(loop)
        passes, taker, stamps = self._passes, self._taker, self._stamps
        self._passes, self._taker, self._stamps = 0, task, stamps + 1
        if not self._counting:
            self._counting = True
            loop.call_soon(self._count)
        if asked is None or asked == stamps or task is taker or not passes:
            return None
        return passes

    def _count(self) -> None:
        self._passes += 1
        if self._passes < SPACED_PASSES and self._loop is not None:
            self._loop.call_soon(self._count)
        else:
            self._counting = False


def spaced_meta(meta: msgspec.Raw | None, passes: int) -> msgspec.Raw:
    """``meta`` (a decision's, as stored: a JSON object or None) with :data:`ANSWERED_AFTER`
    first. One the caller gave a field of that name is decoded and the field replaced: a
    member stored twice is what a bundle's reader refuses."""
    field = b'{"%s":%d' % (ANSWERED_AFTER.encode(), passes)
    body = bytes(meta) if meta is not None else b"{}"
    if body[:1] != b"{":  # not an object (never stored by loom): kept as it is
        return msgspec.Raw(body)
    if _field_reader(ANSWERED_AFTER)[0] in body:
        given = msgspec.json.decode(body)
        return msgspec.Raw(msgspec.json.encode({**given, ANSWERED_AFTER: passes}))
    rest = body[1:].lstrip()
    return msgspec.Raw(field + (b"}" if rest[:1] == b"}" else b"," + rest))
