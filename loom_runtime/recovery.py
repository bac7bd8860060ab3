"""Which executions a live worker should take over: unfinished ones whose owner is gone.

What :meth:`~loom_runtime.loom.Loom.recover` does with them, and why it is safe to run it
anywhere, any number of times, at once (ADR 0040):

* **Finding** is a read: one pass over the log's ownership events (who started, claimed,
  reopened, finished each execution) and one read of the worker registry. Two recoverers
  may find the same execution; nothing has happened yet.
* **Claiming** is an append, ``Resumed`` at the version the recoverer loaded the execution
  at. Of two recoverers that loaded the same version exactly one appends; the other's append
  is refused whole (a version conflict) and it moves on. A recoverer that loaded *after*
  another's claim sees a new owner, alive, and leaves it.
* **Resuming** answers every decision already in the log from the log, so work the dead
  worker finished is not done again; only decisions it never stored run live.

A worker wrongly taken for dead keeps running until its next append, which is refused
(the claim moved the stream past it): it stops, and the execution still completes once.

Liveness is only ever judged for owners that promised it by heart-beating. An execution whose
owner never registered (started outside a worker, or recorded before workers existed) may be
running right now in a process nobody can see, so it is taken only when asked
(``include_unowned``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from uuid import UUID

import msgspec

if TYPE_CHECKING:
    from loom_runtime.log import EventLog

HEARTBEAT_EVERY = 5.0
"""Seconds between a worker's beats."""
DEAD_AFTER = 30.0
"""Seconds without a beat after which a worker is taken for dead: six missed beats, so a
busy database or a long pause is not mistaken for a crash (a mistake costs a wasted run,
never a duplicate)."""
RECOVER_EVERY = 30.0
"""Seconds between a worker's recovery passes."""


class Unfinished(msgspec.Struct, frozen=True, kw_only=True):
    """An execution neither completed nor failed, and its owner as the scan saw it."""

    execution_id: UUID
    flow: str
    owner: str | None
    """A recoverer that loads a different owner leaves the execution (claimed since the scan)."""


def unfinished(log: EventLog) -> list[Unfinished]:
    """Every execution of ``log`` that is neither completed nor failed, oldest first, with its
    owner: the worker that started it or last claimed or reopened it (one pass, no decisions)."""
    from loom_runtime.execution import Execution  # here: the CLI imports this module's defaults

    ownership = (  # the events that start, move or end ownership; decisions do not
        Execution.Created.TOPIC,
        Execution.Resumed.TOPIC,
        Execution.Reopened.TOPIC,
        Execution.Completed.TOPIC,
        Execution.Failed.TOPIC,
    )
    flows: dict[UUID, str] = {}
    owners: dict[UUID, str | None] = {}
    for notification in log.notifications(topics=ownership):
        event = log.decode(notification)
        stream = event.originator_id
        if isinstance(event, Execution.Created):
            flows[stream] = event.flow
            owners[stream] = event.worker
        elif isinstance(event, Execution.Completed | Execution.Failed):
            owners.pop(stream, None)
        elif isinstance(event, Execution.Reopened) or stream in owners:  # or Resumed
            owners[stream] = event.worker
    return [
        Unfinished(execution_id=stream, flow=flows[stream], owner=owner)
        for stream, owner in owners.items()
    ]


def is_abandoned(owner: str | None, liveness: Mapping[str, bool], *, include_unowned: bool) -> bool:
    """Whether an execution owned by ``owner`` may be taken over: its owner registered and is
    no longer alive; an owner that is None or never registered only with ``include_unowned``.
    ``liveness`` maps each registered worker to whether it is alive."""
    if owner is None or owner not in liveness:
        return include_unowned
    return not liveness[owner]
