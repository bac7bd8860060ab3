"""One body for a sync and an async path: a step generator, driven now or awaited.

``Loom.run``/``arun``, ``resume``/``aresume``, ``replay``/``areplay`` and ``ctx.decide`` in
sync and async flows do the same thing except at one point: a value (a flow's coroutine, an
async ``compute``'s awaitable) that the async path awaits and the sync path must settle
itself (run the coroutine on a new event loop, or refuse it). So each is written once, as a
generator that yields a :class:`Pending` at that point and receives the settled value back
(or has the failure thrown in, so its own ``try`` sees it exactly where a direct call would
have raised). :func:`drive` runs it synchronously with a ``settle`` function;
:func:`adrive` awaits. The same shape as DBOS's ``Outcome`` (``Immediate``/``Pending``),
reduced to the one suspension point loom has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Pending(NamedTuple):
    """A value that must be awaited before the step can go on, and what it is (for errors)."""

    what: str
    awaitable: Awaitable[Any]


Steps = Generator[Pending, Any, T]
"""A step body: yields :class:`Pending` values, receives them settled, returns the result."""


def drive(steps: Steps[T], settle: Callable[[Pending], Any]) -> T:
    """Run ``steps`` to its result now, settling each pending value with ``settle``."""
    try:
        pending = next(steps)
        while True:
            try:
                settled = settle(pending)
            except BaseException as exc:  # thrown in: the step's own handlers decide
                pending = steps.throw(exc)
            else:
                pending = steps.send(settled)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def adrive(steps: Steps[T]) -> T:
    """Run ``steps`` to its result, awaiting each pending value."""
    try:
        pending = next(steps)
        while True:
            try:
                settled = await pending.awaitable
            except BaseException as exc:
                pending = steps.throw(exc)
            else:
                pending = steps.send(settled)
    except StopIteration as stop:
        result: T = stop.value
        return result


def loop_running() -> bool:
    """Whether an event loop runs in this thread: where :func:`drive` cannot settle an async
    flow's coroutine (a new loop cannot run inside a running one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
