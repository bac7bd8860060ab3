"""How a decision retries a transient failure: a number of attempts, paused with full jitter.

Used by ``ctx.decide(..., retry=Backoff(...))`` and by wrapped model clients (issue 13). Every
attempt is recorded in the decision's ``meta`` (:class:`Attempt`), for an audit to show how
often and for how long a call was retried; only the last attempt's outcome is the decision,
so a replay neither sleeps nor retries.

Why attempts and not a time budget (as :class:`~loom_runtime.retry.RetryPolicy` has for
contended writes): each attempt here is a paid call to someone else's service, so the number
of calls is what the caller wants to bound; the pause cap bounds the time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import msgspec

from loom_runtime.errors import ConfigurationError


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Up to ``attempts`` calls in all; before retry *n* a pause uniform in
    ``[0, min(max_pause, first_pause * 2**n))`` (full jitter), or the pause the service asked
    for (``retry-after``) when it asked, capped at ``max_pause``."""

    attempts: int = 4
    first_pause: float = 0.5
    max_pause: float = 20.0

    def __post_init__(self) -> None:
        pauses = (self.first_pause, self.max_pause)
        finite = all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in pauses
        )
        whole = isinstance(self.attempts, int) and not isinstance(self.attempts, bool)
        ordered = finite and 0 <= self.first_pause <= self.max_pause
        if not (whole and self.attempts >= 1 and ordered):
            raise ConfigurationError(
                "Backoff needs attempts >= 1 (an int) and finite seconds with 0 <= first_pause "
                f"<= max_pause, got attempts={self.attempts!r}, first_pause={self.first_pause!r}"
                f", max_pause={self.max_pause!r}"
            )

    def pauses(self, draw: Callable[[], float] = random.random) -> Iterator[float]:
        """The pause before each retry (``attempts - 1`` of them); ``draw`` is in [0, 1)."""
        cap = self.first_pause
        for _ in range(self.attempts - 1):
            yield draw() * cap
            cap = min(self.max_pause, cap * 2)

    def pause(self, planned: float, *, asked: float | None) -> float:
        """The pause to take: what the service asked for (capped), else the planned one."""
        if asked is not None and math.isfinite(asked) and asked >= 0:
            return min(asked, self.max_pause)
        return planned


class Attempt(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One failed attempt, as the decision's ``meta["attempts"]`` lists them.

    ``error`` is ``module:qualname`` of what was raised, or ``"http <status>"`` for a response
    that asked to be retried; ``message`` is its text; ``paused`` the seconds waited after it.
    """

    error: str
    message: str = ""
    paused: float = 0.0
