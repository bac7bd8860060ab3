"""The one retry policy for a write that lost a race or found the database busy (ADR 0019).

loom's stream writers are optimistic: read a stream's version, plan the events against the
state at that version, append after it. Under concurrency two things make an attempt fail
although nothing is wrong: another writer appended first (:class:`StreamConflictError`), or the
database was busy for longer than its own lock wait (SQLite "database is locked", PostgreSQL
``lock_timeout``, a serialisation failure or a deadlock victim). In both cases the database
guarantees the attempt wrote nothing, so the step is simply run again: a fresh read, a fresh
plan, a fresh append.

How long to wait between attempts, and for how long in all:

* **Exponential backoff with full jitter**: before retry *n* sleep a uniformly random time in
  ``[0, min(max_pause, first_pause * 2**n))``. Random, so that writers that collided do not
  all come back at the same instant and collide again (lockstep); growing, so that a crowd
  thins out by itself instead of hammering the lock.
* **A time budget, not an attempt count**: how many times a writer loses depends on how many
  others write and how fast, which the caller does not know; how long it may wait is what it
  does know. When the budget is spent the write raises :class:`WriteContentionError`, which
  says how long it tried and how often, and still means "nothing was written".

Only errors after which the database promises nothing was written are retried; anything else
(a broken connection during COMMIT, a bad event, a refusal by the caller's plan) propagates at
once.
"""

from __future__ import annotations

import math
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

from loom_runtime.errors import ConfigurationError, StreamConflictError, WriteContentionError

T = TypeVar("T")

_BUSY_SQLSTATES: Final = frozenset({"55P03", "40001", "40P01"})
"""PostgreSQL: lock_not_available (lock_timeout), serialization_failure, deadlock_detected."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a contended write waits: full-jitter exponential pauses within a time budget.

    ``budget`` is the time (seconds) a write may spend trying, attempts included: it gives up
    at the first contended failure whose next pause would end past the budget. An attempt in
    flight is never cut short, so a write can overrun the budget by one attempt.
    ``first_pause`` is the cap of the first pause and ``max_pause`` the cap of every pause. Pass
    one to ``Loom(..., write_retry=RetryPolicy(budget=120))``; ``budget`` is what to raise
    when many writers share one corpus scope or memory key and a write may wait longer.
    """

    budget: float = 30.0
    first_pause: float = 0.005
    max_pause: float = 0.5

    def __post_init__(self) -> None:
        values = (self.budget, self.first_pause, self.max_pause)
        numbers = all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
        if not (numbers and self.budget > 0 and 0 < self.first_pause <= self.max_pause):
            raise ConfigurationError(
                "RetryPolicy needs finite seconds with budget > 0 and 0 < first_pause <= "
                f"max_pause, got budget={self.budget!r}, first_pause={self.first_pause!r}, "
                f"max_pause={self.max_pause!r}: a write must be allowed to wait, and not forever"
            )

    def pauses(self, draw: Callable[[], float] = random.random) -> Iterator[float]:
        """The pause before each retry: uniform in [0, cap), cap doubling up to ``max_pause``.

        ``draw`` returns a float in [0, 1); tests pass their own to pin the sequence.
        """
        cap = self.first_pause
        while True:
            yield draw() * cap
            cap = min(self.max_pause, cap * 2)


DEFAULT_RETRY: Final = RetryPolicy()


def retrying(step: Callable[[], T], *, policy: RetryPolicy, what: str) -> T:
    """Run ``step`` until it returns, again after each contended failure, within the budget.

    ``step`` must be safe to run again after a contended failure: it re-reads whatever it
    depends on (the database rolled its attempt back). ``what`` names the write in the error.
    """
    started = time.monotonic()
    pauses = policy.pauses()
    attempts = 0
    while True:
        attempts += 1
        try:
            return step()
        except Exception as exc:
            if not is_contention(exc):
                raise
            pause = next(pauses)
            seconds = time.monotonic() - started
            if seconds + pause > policy.budget:
                raise WriteContentionError(
                    what=what, attempts=attempts, seconds=seconds, budget=policy.budget
                ) from exc
        time.sleep(pause)


def is_contention(exc: BaseException) -> bool:
    """Whether ``exc`` means "another writer was first or busy; nothing was written".

    Looks through the causes (``raise ... from``), because eventsourcing and SQLAlchemy wrap the
    driver's error: SQLite reports a busy database as ``OperationalError("database is locked")``,
    psycopg a lock timeout, serialisation failure or deadlock by its SQLSTATE.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, WriteContentionError):
            return False  # a budget already spent: retrying it would multiply the budget
        if isinstance(current, StreamConflictError):
            return True
        if isinstance(current, sqlite3.OperationalError) and is_busy_message(str(current)):
            return True
        if getattr(current, "sqlstate", None) in _BUSY_SQLSTATES:
            return True
        current = current.__cause__  # not __context__: an error raised while handling another
    return False


def is_busy_message(message: str) -> bool:
    """Whether a SQLite driver error's ``message`` says another connection held the lock."""
    return "database is locked" in message or "database is busy" in message
