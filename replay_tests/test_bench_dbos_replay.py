"""DBOS's replay is timed as DBOS's own work, with its fixed wait measured apart.

A DBOS fork is dispatched by DBOS's internal queue, polled about once a second, and
``get_result`` polls the result once a second: a fork's wall clock was ~1,014 ms for 1, 10
and 100 steps alike, so "replay N x faster than DBOS" timed a sleep at every size but the
largest. DBOS has no replay path without that queue (its crash recovery re-enqueues on the
same queue). So the replay is timed as the fork call (copying the recorded steps) plus the
forked workflow's body, first line to return, and a 1-step fork in the same sample gives the
fixed latency a caller waits however short the replay, stated beside it (ADR 0048, amended).
"""

from __future__ import annotations

import pytest

from benchmarks import peers_durable
from benchmarks.harness import InstrumentError, Stats
from benchmarks.workload import make_values


def test_dbos_s_own_work_is_the_fork_call_and_the_body_without_the_waits_between() -> None:
    # the fork call 10 ms, the queue's poll until 0.9 s, the body 0.4 s, the result's poll
    work = peers_durable._dbos_work_seconds(
        called=0.0, forked=0.01, entered=0.9, returned=1.3, done=2.0
    )
    assert work == pytest.approx(0.41)
    # the queue dequeued the fork while its call was still returning: counted once
    work = peers_durable._dbos_work_seconds(
        called=0.0, forked=0.02, entered=0.015, returned=0.5, done=1.0
    )
    assert work == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("entered", "returned", "done"),
    [
        (0.0, 0.0, 2.0),  # the body never ran in the fork (its stamps were cleared before it)
        (-1.0, -0.5, 2.0),  # stamps older than the fork: the recording's, not the replay's
        (0.9, 2.5, 2.0),  # the body returned after the result was seen
    ],
)
def test_stamps_not_of_this_fork_stop_the_run(entered: float, returned: float, done: float) -> None:
    with pytest.raises(InstrumentError):
        peers_durable._dbos_work_seconds(
            called=0.001, forked=0.01, entered=entered, returned=returned, done=done
        )


def _results(replay_per_s: float, fixed_ms: float) -> dict[str, dict[str, Stats]]:
    return {
        "loom FULL 10": {
            "record_ms": Stats((2.0,)),
            "replay_per_s": Stats((200_000.0,)),
            "rows_floor_ms": Stats((1.25,)),
        },
        "loom NORMAL 10": {"record_ms": Stats((0.5,))},
        "DBOS 10": {
            "record_ms": Stats((15.0,)),
            "replay_per_s": Stats((replay_per_s,)),
            "replay_wall_ms": Stats((1_014.0,)),
            "fixed_ms": Stats((fixed_ms,)),
            "fixed_work_ms": Stats((14.0,)),
        },
        "LangGraph 10": {"record_ms": Stats((10.0,)), "replay_per_s": Stats((100.0,))},
        f"{peers_durable.FLOOR} 10": {"record_ms": Stats((1.0,))},
    }


def test_the_replay_target_is_judged_on_dbos_s_work_and_states_the_fixed_wait() -> None:
    *_, replay = peers_durable._targets(_results(2_500.0, 1_012.0), 10)
    assert replay.measured.startswith("80.0x (10 steps")
    assert "1,012 ms" in replay.measured
    assert replay.met
    *_, replay = peers_durable._targets(_results(5_000.0, 1_012.0), 10)
    assert replay.measured.startswith("40.0x") and not replay.met


def test_the_dbos_table_states_the_work_rate_and_the_fixed_latency_side_by_side() -> None:
    table = peers_durable._dbos_table(_results(2_500.0, 1_012.0), [10], 3)
    assert table.rows == (("10", "2,500/s (2,500-2,500)", "1,014 ms", "1,012 ms", "14.0 ms"),)


@pytest.mark.slow
def test_a_dbos_sample_times_its_replay_without_the_polls() -> None:
    """A real sample: the 3-step fork's wall is about a second of polling, its own work a
    small part of it, and the 1-step fork's wall (the fixed latency) of the same order."""
    pytest.importorskip("dbos")
    sample = peers_durable._dbos(make_values(3))
    work_ms = 1_000 * 3 / sample["replay_per_s"]
    assert work_ms < sample["replay_wall_ms"] / 2
    assert sample["fixed_work_ms"] < sample["fixed_ms"] / 2
    assert sample["fixed_ms"] > 500  # the queue's and the result's polls, about a second
    assert sample["calls"] == 0
