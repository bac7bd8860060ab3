"""The one retry policy of contended writes (ADR 0019): jittered backoff within a time budget."""

from __future__ import annotations

import sqlite3
import threading
import time
from itertools import islice
from pathlib import Path

import pytest
from eventsourcing.persistence import OperationalError

from loom_runtime import (
    ConfigurationError,
    LogEvent,
    Loom,
    RetryPolicy,
    StreamConflictError,
    WriteContentionError,
)
from loom_runtime.retry import is_contention, retrying
from loom_runtime.stream import Change, stream_id


class Counted(LogEvent):
    TOPIC = "test.retry.Counted"
    n: int


def test_pauses_are_full_jitter_under_a_doubling_cap() -> None:
    """Pause n is draw * min(max_pause, first_pause * 2**n): random, growing, bounded."""
    policy = RetryPolicy(first_pause=0.01, max_pause=0.05)
    assert list(islice(policy.pauses(lambda: 0.5), 5)) == [0.005, 0.01, 0.02, 0.025, 0.025]
    assert list(islice(policy.pauses(lambda: 0.0), 3)) == [0.0, 0.0, 0.0]


def test_two_writers_draw_different_pauses() -> None:
    """Writers that collided do not come back in lockstep: their pauses differ."""
    first, second = RetryPolicy().pauses(), RetryPolicy().pauses()
    assert list(islice(first, 8)) != list(islice(second, 8))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": 0},
        {"budget": float("inf")},
        {"budget": True},
        {"first_pause": 0},
        {"first_pause": 1.0, "max_pause": 0.5},
    ],
)
def test_a_policy_that_cannot_wait_or_waits_forever_is_refused(kwargs: dict[str, float]) -> None:
    """No budget, an endless one, a non-number or a cap below the first pause is refused."""
    with pytest.raises(ConfigurationError, match="RetryPolicy needs"):
        RetryPolicy(**kwargs)


def test_loom_refuses_a_write_retry_that_is_not_a_policy(tmp_path: Path) -> None:
    """``write_retry`` takes a RetryPolicy (a number would silently mean nothing)."""
    with pytest.raises(ConfigurationError, match="write_retry"):
        Loom(f"sqlite:///{tmp_path / 'loom.db'}", write_retry=30)  # type: ignore[arg-type]


def _locked() -> OperationalError:
    try:
        raise sqlite3.OperationalError("database is locked")
    except sqlite3.OperationalError as exc:
        try:
            raise OperationalError(str(exc)) from exc
        except OperationalError as wrapped:
            return wrapped


class _LockTimeout(Exception):
    sqlstate = "55P03"


def test_contention_is_a_lost_race_a_busy_database_or_a_lock_timeout() -> None:
    """Retried: a conflict, SQLite busy (wrapped), a PostgreSQL lock timeout; nothing else."""
    assert is_contention(StreamConflictError("moved"))
    assert is_contention(_locked())
    assert is_contention(_LockTimeout())
    assert not is_contention(sqlite3.OperationalError("no such table: x"))
    assert not is_contention(ValueError("refused by the plan"))
    spent = WriteContentionError(what="w", attempts=3, seconds=1.0, budget=1.0)
    assert not is_contention(spent)


def test_an_error_raised_while_handling_a_conflict_is_not_contention() -> None:
    """Only ``raise ... from`` causes count, not the exception being handled at the time."""
    try:
        try:
            raise StreamConflictError("moved")
        except StreamConflictError:
            raise ValueError("a real refusal") from None
    except ValueError as exc:
        assert not is_contention(exc)


def test_a_step_is_run_again_until_it_succeeds() -> None:
    """Two lost races, then success: the result of the third attempt is returned."""
    outcomes: list[Exception | None] = [StreamConflictError("a"), _locked(), None]

    def step() -> int:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return 42

    assert retrying(step, policy=RetryPolicy(), what="a test write") == 42
    assert outcomes == []


def test_a_refusal_is_not_retried() -> None:
    """An error that is not contention propagates from the first attempt."""
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise ValueError("the plan refused")

    with pytest.raises(ValueError, match="the plan refused"):
        retrying(step, policy=RetryPolicy(), what="a test write")
    assert calls == [1]


def test_the_budget_bounds_the_time_and_the_error_says_how_long_and_what_next() -> None:
    """After ``budget`` seconds the typed error names the write, attempts, time and a remedy."""

    def step() -> None:
        raise StreamConflictError("moved")

    started = time.monotonic()
    with pytest.raises(WriteContentionError) as raised:
        retrying(step, policy=RetryPolicy(budget=0.3, max_pause=0.05), what="a write to 'x'")
    took = time.monotonic() - started
    error = raised.value
    # No pause is planned past the budget; the upper bound is loose because a loaded machine
    # overruns sleeps (it proves the retrying stopped, not how promptly).
    assert 0.3 - 0.05 <= took < 0.3 + 2.0
    assert error.attempts > 3 and error.seconds <= took
    assert isinstance(error, StreamConflictError)  # old handlers still catch it
    assert isinstance(error.__cause__, StreamConflictError)
    message = str(error)
    assert f"a write to 'x' was refused {error.attempts} times" in message
    assert "nothing was written" in message and "RetryPolicy(budget=" in message


def test_append_replanned_plans_again_on_the_version_that_won(loom: Loom) -> None:
    """A writer that lost is handed the new version and plans from it; each event lands once."""
    stream = stream_id("counted")
    seen: list[int] = []

    def plan(version: int) -> tuple[list[Change], None]:
        seen.append(version)
        if len(seen) == 1:  # another writer appends between this read and this append
            loom.log.append_replanned(
                stream, lambda v: ([(Counted, {"n": v + 1})], None), what="rival"
            )
        return [(Counted, {"n": version + 1})], None

    loom.log.append_replanned(stream, plan, what="writer")
    assert seen == [0, 1]
    assert loom.log.stream_version(stream) == 2
    assert [e.n for e in loom.log.events(stream)] == [1, 2]  # type: ignore[attr-defined]


def test_an_empty_plan_appends_nothing(loom: Loom) -> None:
    """A plan with no events is a write that decided there is nothing to do."""
    assert loom.log.append_replanned(stream_id("empty"), lambda v: ([], None), what="noop") == (
        [],
        None,
    )
    assert loom.log.position == 0


@pytest.mark.waits  # the lock is held for 1.5 s
def test_a_write_that_finds_sqlite_locked_waits_and_succeeds(tmp_path: Path) -> None:
    """Another connection holding the write lock past the busy timeout delays, never fails."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, lock_timeout=0.1) as loom:
        stream = stream_id("locked")
        loom.log.position  # noqa: B018 - the tables, before the lock is taken
        holder = sqlite3.connect(
            tmp_path / "loom.db", isolation_level=None, check_same_thread=False
        )
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(1.5, holder.rollback)  # longer than the 1 s busy timeout
        release.start()
        started = time.monotonic()
        try:
            positions, _ = loom.log.append_replanned(
                stream, lambda v: ([(Counted, {"n": v + 1})], None), what="a locked write"
            )
        finally:
            release.join()
            holder.close()
        assert time.monotonic() - started > 1.0  # it really met the lock
        assert positions == [1] and loom.log.stream_version(stream) == 1
