"""Log time and wall time: which log position was "now" at a given moment?

Positions are the log's own clock (one global order); people ask in wall time ("what did the
agent know at 03:12?"). Each event carries the timestamp it was created at, and timestamps
grow with positions (a writer stamps its events just before it appends them). Concurrent
writers can invert neighbours by as long as one waited for the log's write lock: microseconds
on an idle log, up to the lock's wait (seconds) under contention on PostgreSQL, where an
append that timed out is retried with its first stamp. A moment inside such a window may be
answered with a neighbouring position. So the answer is a binary search over positions,
reading one event per step: O(log n) reads, no index to maintain.
"""

from __future__ import annotations

from datetime import datetime

from loom_runtime.errors import ConfigurationError
from loom_runtime.log import EventLog


def position_at(log: EventLog, when: datetime) -> int:
    """The highest log position whose event was recorded at or before ``when`` (0: none)."""
    if when.tzinfo is None:
        raise ConfigurationError(
            f"{when!r} has no timezone: give an aware datetime (e.g. with tzinfo=UTC) so the "
            "moment is unambiguous"
        )
    low, high = 0, log.position  # invariant: low is at or before `when`, high+1.. is after
    while low < high:
        middle = (low + high + 1) // 2
        stamped = log.event_at(middle)
        if stamped is not None and stamped.timestamp <= when:
            low = stamped.position  # positions may skip (PostgreSQL gaps): jump to the one read
        else:
            high = middle - 1
    return low
