"""A datetime made under freezegun encodes as the same datetime made without it.

Core review of 6 December: ``enc_hook`` stored freezegun's ``FakeDatetime`` (a subclass
msgspec refuses) as ``isoformat()``, ``+00:00``, where msgspec writes a real datetime's UTC
as ``Z``: a recording made under ``freeze_time`` (a test's) replayed by ``loom replay`` or
in CI, without it, reported every such input changed.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, timezone

import pytest
from freezegun import freeze_time

from loom_runtime import FlowContext, Loom
from loom_runtime.codec import encode

MOMENT = datetime(2025, 12, 1, 9, 30, 15, 250_000, tzinfo=UTC)


@pytest.mark.parametrize(
    "made",
    [
        lambda: datetime.now(UTC),
        lambda: datetime.now(timezone(timedelta(hours=2))),
        lambda: datetime.now(),  # naive
        lambda: date.today(),
        lambda: {"at": [datetime.now(UTC).time(), datetime.now(UTC).timetz()]},
    ],
    ids=["utc", "offset", "naive", "date", "times"],
)
def test_frozen_and_real_values_encode_alike(made: object) -> None:
    with freeze_time(MOMENT):
        frozen = made()  # type: ignore[operator]
    real = _real(frozen)
    assert bytes(encode(frozen, path="v")) == bytes(encode(real, path="v"))


def _real(value: object) -> object:
    """``value`` rebuilt of the built-in types, as a process without freezegun makes it."""
    if isinstance(value, dict):
        return {key: _real(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_real(item) for item in value]
    if isinstance(value, datetime):
        return datetime.fromisoformat(value.isoformat())
    if isinstance(value, date):
        return date.fromisoformat(value.isoformat())
    if isinstance(value, time):
        return time.fromisoformat(value.isoformat())
    return value


def test_a_run_recorded_under_freeze_time_replays_identically_without_it(loom: Loom) -> None:
    clock = [lambda: datetime.now(UTC)]  # frozen when recording; the real moment on replay

    @loom.flow("f")
    def f(ctx: FlowContext) -> str:
        return ctx.decide("page", lambda: "paged", input={"at": clock[0]()})

    with freeze_time(MOMENT):
        run = loom.run("f")
    clock[0] = lambda: MOMENT
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()


def test_an_offset_in_seconds_is_stored_as_a_real_datetime_s_under_freeze_time() -> None:
    """Regression reviews: msgspec's decoder refuses an offset in seconds (a historical
    local-mean-time zone, +00:19:32), so a first rebuild failed to encode it, and a second
    stored its ISO text where a real datetime is written with its offset in minutes: a
    recording under freeze_time replayed elsewhere as changed. Both now write the same."""
    from zoneinfo import ZoneInfo

    amsterdam = ZoneInfo("Europe/Amsterdam")
    real = bytes(encode(datetime(1900, 1, 1, 12, tzinfo=amsterdam), path="v"))
    with freeze_time(MOMENT):
        from datetime import datetime as frozen_datetime

        frozen = frozen_datetime(1900, 1, 1, 12, tzinfo=amsterdam)
        assert type(frozen).__name__ == "FakeDatetime"
        assert bytes(encode(frozen, path="v")) == real
