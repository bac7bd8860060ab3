"""The same rows' floor of the one-flow FULL arm writes exactly what loom stored, and says so
only when it did: it is read against loom's time, so a floor writing fewer rows or making
fewer commits than loom would flatter loom's ratio (ADR 0048)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks import group_commit, peers_durable
from benchmarks.harness import Stats
from benchmarks.stores import fresh_sqlite
from benchmarks.workload import FLOW, make_values, recording_flow
from loom_runtime import Loom


def _recorded(executions: int) -> tuple[group_commit.StoredRows, int]:
    values = make_values(group_commit.DECISIONS_PER_EXECUTION)
    with fresh_sqlite() as (url, path):
        with Loom(url, sqlite_synchronous="FULL") as loom:
            loom.flow(FLOW)(recording_flow(values))
            loom.run(FLOW, n=1)
            before = group_commit.last_event_id(path)
            with group_commit.counted(loom) as counts:
                for _ in range(executions):
                    loom.run(FLOW, n=group_commit.DECISIONS_PER_EXECUTION)
        return group_commit.StoredRows.read(path, before), counts["commits"]


def test_the_floor_writes_loom_s_rows_in_loom_s_commits() -> None:
    stored, commits = _recorded(2)
    # two executions: a start, 25 decisions and an end each, one commit apiece
    assert len(stored.events) == len(stored.links) == commits == 54
    assert stored.events_before and stored.links_before
    _, matched = group_commit.same_rows_seconds(stored, commits)
    assert matched


def test_a_floor_short_of_loom_s_commits_or_links_is_not_matched() -> None:
    stored, commits = _recorded(1)
    assert not group_commit.same_rows_seconds(stored, commits + 1)[1]
    unlinked = dataclasses.replace(stored, links=stored.links[:-1])
    with pytest.raises(ValueError):
        group_commit.same_rows_seconds(unlinked, commits)


def test_the_control_fails_when_any_sample_did_not_match() -> None:
    one = group_commit.arm(1, [], 0)
    results = {one.name: {"rows_floor_matched": Stats((1.0, 1.0, 1.0))}}
    assert group_commit.rows_floor_control(one, results).held
    results[one.name]["rows_floor_matched"] = Stats((1.0, 0.0, 1.0))
    assert not group_commit.rows_floor_control(one, results).held


def test_the_peers_targets_name_what_loom_s_row_shape_allows() -> None:
    """Each per-step target states the peer's time over the same rows' floor beside the rest."""
    results = {
        "loom FULL 10": {
            "record_ms": Stats((2.0,)),
            "replay_per_s": Stats((10_000.0,)),
            "rows_floor_ms": Stats((1.25,)),
        },
        "loom NORMAL 10": {"record_ms": Stats((0.5,))},
        "DBOS 10": {
            "record_ms": Stats((15.0,)),
            "replay_per_s": Stats((100.0,)),
            "fixed_ms": Stats((1_000.0,)),
        },
        "LangGraph 10": {"record_ms": Stats((10.0,)), "replay_per_s": Stats((100.0,))},
        f"{peers_durable.FLOOR} 10": {"record_ms": Stats((1.0,))},
    }
    dbos, langgraph, _ = peers_durable._targets(results, 10)
    assert "7.5x (loom FULL" in dbos.measured and not dbos.met
    assert "1.25 ms, 12.0x: the most loom's row shape allows" in dbos.measured
    assert "1.25 ms, 8.0x" in langgraph.measured


def test_work_given_for_each_transaction_runs_before_it_in_order() -> None:
    """The encryption section's recording floor calls each row's ciphers where a recording
    does, before that row's transaction: once per transaction, in the rows' order, and the
    floor still writes exactly loom's rows (at the synchronous level asked)."""
    stored, commits = _recorded(1)
    calls: list[tuple[int, int]] = []

    def before_each(index: int) -> None:
        calls.append((index, len(calls)))

    _, matched = group_commit.same_rows_seconds(
        stored, commits, synchronous="NORMAL", before_each=before_each
    )
    assert matched
    assert calls == [(index, index) for index in range(commits)]
