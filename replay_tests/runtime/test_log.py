"""The log: one global order for every stream, WAL and the chosen synchronous setting."""

from __future__ import annotations

import pytest

from loom_runtime import FlowContext, Loom


def test_sqlite_runs_in_wal_with_synchronous_normal_by_default(sqlite_url: str) -> None:
    """ADR 0001: WAL, synchronous=NORMAL (1) on the log's own connections."""
    loom = Loom(sqlite_url)
    assert _pragma(loom, "journal_mode") == "wal"
    assert _pragma(loom, "synchronous") == 1


@pytest.mark.parametrize(("setting", "code"), [("FULL", 2), ("OFF", 0)])
def test_synchronous_is_configurable(sqlite_url: str, setting: str, code: int) -> None:
    """The durability trade-off is the caller's choice (sqlite_synchronous=...)."""
    with Loom(sqlite_url, sqlite_synchronous=setting) as loom:  # type: ignore[arg-type]
        assert _pragma(loom, "synchronous") == code


def _pragma(loom: Loom, name: str) -> object:
    """Read a PRAGMA through the log's own (eventsourcing) connection pool."""
    with loom.log.application.factory.datastore.transaction(commit=False) as cursor:  # type: ignore[attr-defined]
        cursor.execute(f"PRAGMA {name}")
        return cursor.fetchone()[0]


def test_executions_share_one_global_order(loom: Loom, db_url: str) -> None:
    """Two executions' events interleave in one notification sequence, contiguous from 1."""

    @loom.flow("f")
    def f(ctx: FlowContext, n: int) -> int:
        return ctx.decide("k", lambda: n)

    first = loom.run("f", n=1)
    second = loom.run("f", n=2)
    ids = [n.position for n in loom.log.notifications()]
    assert ids == list(range(1, 7))
    assert second.log_position == 3 > first.log_position == 0
    with Loom(db_url) as another_process_view:  # one application: one table, one sequence
        assert [n.position for n in another_process_view.log.notifications()] == ids


def test_notifications_page_through_the_whole_log(loom: Loom) -> None:
    """Paging continues from the last id seen, across many pages, and honours upto."""

    @loom.flow("f")
    def f(ctx: FlowContext) -> int:
        return sum(ctx.decide("k", lambda: 1) for _ in range(30))

    loom.run("f")
    assert [n.position for n in loom.log.notifications(page_size=7)] == list(range(1, 33))
    assert [n.position for n in loom.log.notifications(after=5, upto=9, page_size=2)] == [
        6,
        7,
        8,
        9,
    ]


def test_sqlalchemy_persistence_is_a_configuration_choice(db_url: str) -> None:
    """The same flow records and replays through eventsourcing-sqlalchemy."""
    with Loom(db_url, persistence="sqlalchemy") as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            return ctx.decide("k", lambda: "v")

        run = loom.run("f")
        assert loom.replay(run.execution_id).identical
        assert [n.position for n in loom.log.notifications()] == [1, 2, 3]


def test_sqlalchemy_persistence_honours_the_synchronous_setting(sqlite_url: str) -> None:
    """eventsourcing-sqlalchemy has no such option: loom sets it on each connection."""
    with Loom(sqlite_url, persistence="sqlalchemy", sqlite_synchronous="OFF") as loom:
        engine = loom.log.application.factory.datastore.engine  # type: ignore[attr-defined]
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 0
