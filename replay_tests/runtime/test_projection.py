"""Tracked projections: exactly once, crash-safe per page, rebuildable up to a position."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import Column, Connection, Integer, String, Table, func, select

from loom_runtime import FlowContext, Loom
from loom_runtime.projection import SQLProjection, catch_up, rebuild


class DecisionRows(SQLProjection):
    """One row per recorded decision; can be told to raise at a given position."""

    topics = ("loom.execution.DecisionRecorded",)

    def __init__(self, loom: Loom, *, fail_at: int | None = None) -> None:
        super().__init__(loom.log.engine, name="decision-rows")
        self.fail_at = fail_at
        self.table = Table(
            "decision_rows",
            self.metadata,
            Column("position", Integer, primary_key=True),
            Column("key", String, nullable=False),
        )
        self.create_tables()

    def handle(self, conn: Connection, position: int, event: Any) -> None:
        if position == self.fail_at:
            raise RuntimeError(f"injected fault at {position}")
        conn.execute(self.table.insert().values(position=position, key=event.key))

    def clear(self, conn: Connection) -> None:
        conn.execute(self.table.delete())

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(self.table)).scalar_one())


@pytest.fixture
def recorded(loom: Loom) -> Loom:
    @loom.flow("f")
    def f(ctx: FlowContext) -> int:
        return sum(ctx.decide("k", lambda: 1) for _ in range(25))

    for _ in range(2):
        loom.run("f")
    return loom  # 2 x (created + 25 decisions + completed) = 54 events, 50 decisions


def test_catch_up_applies_every_event_once(recorded: Loom) -> None:
    """Catching up twice is a no-op the second time."""
    projection = DecisionRows(recorded)
    assert catch_up(recorded.log, projection, page_size=7) == 54
    assert catch_up(recorded.log, projection, page_size=7) == 54
    assert projection.count() == 50 and projection.position() == 54


def test_a_fault_mid_page_rolls_back_rows_and_position_together(recorded: Loom) -> None:
    """The page with the fault leaves no rows and no position; a re-run converges."""
    faulty = DecisionRows(recorded, fail_at=20)
    with pytest.raises(RuntimeError, match="injected"):
        catch_up(recorded.log, faulty, page_size=10)
    assert faulty.position() == 11 and faulty.count() == 10  # one full page (2..11) committed
    healed = DecisionRows(recorded)
    assert catch_up(recorded.log, healed, page_size=10) == 54
    assert healed.count() == 50


def test_rebuild_up_to_a_position_gives_the_state_as_of_then(recorded: Loom) -> None:
    """upto=P is inclusive; rebuilding to the head afterwards restores everything."""
    projection = DecisionRows(recorded)
    catch_up(recorded.log, projection)
    assert rebuild(recorded.log, projection, upto=10) == 10
    assert projection.count() == 9  # positions 2..10 are decisions
    assert rebuild(recorded.log, projection) == 54 and projection.count() == 50


def test_a_projector_that_lost_the_race_applies_nothing(recorded: Loom) -> None:
    """A page whose start is already applied (another projector won) is refused as a whole."""
    projection = DecisionRows(recorded)
    catch_up(recorded.log, projection, upto=30)
    stale_page = [
        (n.position, recorded.log.decode(n)) for n in recorded.log.notifications(after=20, upto=30)
    ]
    assert projection.apply(stale_page, after=20, upto=30) is False
    assert projection.count() == 27  # decisions 2..26 and 29..30


class ResetMeanwhile(DecisionRows):
    """A projector whose first page is applied just after another one reset the projection
    (a ``loom rebuild`` started in another process between this one's read and its write)."""

    def __init__(self, loom: Loom) -> None:
        super().__init__(loom)
        self.loom = loom
        self.reset_done = False

    def apply(self, events: Any, **page: Any) -> bool:
        if not self.reset_done:
            self.reset_done = True
            DecisionRows(self.loom).reset()
        return super().apply(events, **page)


def test_a_page_read_before_another_projector_s_reset_is_not_applied(recorded: Loom) -> None:
    """The page, read after position 20, was applied over the rows the reset had cleared and
    moved the position past them: decisions 2..20 were gone for good, the position said
    caught up. A page is applied only where it was read from; the catch-up then starts over
    from the reset."""
    catch_up(recorded.log, DecisionRows(recorded), upto=20)
    racing = ResetMeanwhile(recorded)
    assert catch_up(recorded.log, racing, page_size=10) == 54
    assert racing.count() == 50


def _set_tracked(loom: Loom, position: int | None) -> None:
    """Edit (or, with None, delete) the tracking row, as a hand or a partial restore would."""
    from sqlalchemy import text

    with loom.log.engine.begin() as conn:
        if position is None:
            conn.execute(text("DELETE FROM loom_tracking WHERE projection = 'decision-rows'"))
        else:
            conn.execute(
                text("UPDATE loom_tracking SET position = :p WHERE projection = 'decision-rows'"),
                {"p": position},
            )


def test_a_lost_tracking_row_starts_the_rows_over_too(
    recorded: Loom, caplog: pytest.LogCaptureFixture
) -> None:
    """Its rows kept, a projection whose tracking row was deleted started again at 0 and
    applied the whole log over them: duplicated rows, or (with a unique key, as the corpus's)
    an IntegrityError that kept it from opening. A tracking row made anew clears the rows,
    and says so (a projection made on a fresh database does not: the control)."""
    with caplog.at_level(logging.WARNING, logger="loom.runtime"):
        catch_up(recorded.log, DecisionRows(recorded))
        assert DecisionRows(recorded).count() == 50  # an ordinary reopen keeps its rows
        assert not caplog.records
        _set_tracked(recorded, None)
        reopened = DecisionRows(recorded)
    assert [r.getMessage() for r in caplog.records] == [
        "projection 'decision-rows' had tables but no tracking row (deleted, or the tables were "
        "filled outside the log): its rows are cleared and rebuilt from the log"
    ]
    assert catch_up(recorded.log, reopened) == 54
    assert reopened.count() == 50


def test_a_tracking_row_past_the_head_is_refused_not_trusted(recorded: Loom) -> None:
    """A position past the log's head (the row edited, or the log restored from an older
    backup than its read models) made every catch-up a no-op: the next writes were never
    read, and `loom doctor` said "at 1026 of 54", ok."""
    from loom_runtime.errors import LogCorruptError

    projection = DecisionRows(recorded)
    catch_up(recorded.log, projection)
    _set_tracked(recorded, 1026)
    with pytest.raises(LogCorruptError, match="past the log's head"):
        catch_up(recorded.log, projection)
    assert rebuild(recorded.log, projection) == 54 and projection.count() == 50


def test_a_rebuild_up_to_a_position_past_the_head_stops_at_the_head(recorded: Loom) -> None:
    """``upto`` past the head was stored as the position: the events appended later, up to
    it, were never applied (a write read back without it), or a later catch-up refused the
    position as past the head. It stops at the head, and ``upto`` must be a position."""
    projection = DecisionRows(recorded)
    assert rebuild(recorded.log, projection, upto=1_000) == 54
    assert projection.position() == 54

    @recorded.flow("g")
    def g(ctx: FlowContext) -> int:
        return int(ctx.decide("k", lambda: 1))

    recorded.run("g")  # events 55..57, decision at 56
    assert catch_up(recorded.log, projection) == 57
    assert projection.count() == 51
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(ValueError, match="upto"):
            rebuild(recorded.log, projection, upto=bad)  # type: ignore[arg-type]


def test_a_rebuild_refused_for_its_upto_keeps_the_rows(recorded: Loom) -> None:
    """``rebuild(upto=<not a position>)`` raised only after it had dropped the rows: the read
    model stood empty (a memory searched nothing) until something caught it up again, and
    a SQL store's tables are every process's. It is refused before anything is dropped."""
    projection = DecisionRows(recorded)
    catch_up(recorded.log, projection)
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(ValueError, match="upto"):
            rebuild(recorded.log, projection, upto=bad)  # type: ignore[arg-type]
        assert projection.count() == 50 and projection.position() == 54, bad
