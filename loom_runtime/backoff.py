"""How a decision retries a transient failure: a number of attempts, paused with full jitter.

Used by ``ctx.decide(..., retry=Backoff(...))`` and by wrapped model clients (ADR 0025, 0026). Every
attempt is recorded in the decision's ``meta`` (:class:`Attempt`), for an audit to show how
often and for how long a call was retried; only the last attempt's outcome is the decision,
so a replay neither sleeps nor retries.

Why attempts and not a time budget (as :class:`~loom_runtime.retry.RetryPolicy` has for
contended writes): each attempt here is a paid call to someone else's service, so the number
of calls is what the caller wants to bound; the pause cap bounds the time.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

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


_RETRIED_STATUSES = frozenset({408, 409, 429})
_CHAIN_LIMIT = 16  # how far down ``raise ... from`` a cause is looked for


def transient(error: BaseException) -> bool:
    """Whether ``error`` is worth another attempt: the default ``retry_on`` of ``decide``.

    True for a timeout or a dropped connection (``TimeoutError``, ``ConnectionError``) and for
    an error carrying an HTTP status that asks to be retried (408, 409, 429, 5xx) as
    ``status_code`` or ``response.status_code``: the shape of httpx's, requests', OpenAI's and
    Anthropic's errors, recognised without importing any of them. SDKs translate the socket's
    error into their own (httpx's ``ConnectError``, OpenAI's ``APIConnectionError``), httpcore
    even ``from None``, so the errors it was raised from or during count too; the price is that
    an error raised while handling a timeout is retried as well (within ``attempts``).
    ``decide`` asks only about an ``Exception``: a ``KeyboardInterrupt`` or a cancelled task
    stops the run instead of being retried.
    """
    for cause in _causes(error):
        if isinstance(cause, TimeoutError | ConnectionError):
            return True
        status = status_of(cause)
        if status is not None and (status in _RETRIED_STATUSES or 500 <= status <= 599):
            return True
    return False


def status_of(error: BaseException) -> int | None:
    """The HTTP status ``error`` carries (``status_code``, else ``response.status_code``)."""
    for holder in (error, getattr(error, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def retry_after(error: BaseException) -> float | None:
    """The seconds the service asked to wait, from the ``retry-after-ms`` or ``retry-after``
    header (seconds or an HTTP date) of the response ``error`` carries; None if it did not ask."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    get = getattr(headers, "get", None)
    if not callable(get):
        return None
    try:
        millis = get("retry-after-ms")
        if isinstance(millis, str):
            with contextlib.suppress(ValueError):  # unusable: retry-after may still say
                asked_ms = _finite(float(millis) / 1000)
                if asked_ms is not None:
                    return asked_ms
        asked = get("retry-after")
        if not isinstance(asked, str):
            return None
        try:
            return _finite(float(asked))
        except ValueError:
            when = parsedate_to_datetime(asked)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (ValueError, TypeError, OverflowError):
        return None  # a header that says nothing usable: the planned pause is taken


def _finite(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what it was raised from or during, nearest first, each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _CHAIN_LIMIT:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
