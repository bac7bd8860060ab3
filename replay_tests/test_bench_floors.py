"""A scaling target is judged beside the same ratio of its floor, measured in the same run: a
target the floor itself cannot reach on this machine is reported as floor-bound, with the
ceiling, never as met and never as loom's miss alone."""

from __future__ import annotations

from benchmarks import group_commit, scaleout
from benchmarks.harness import Arm, Stats, floor_verdict
from benchmarks.workload import make_values


def test_the_verdict_is_met_floor_bound_or_missed() -> None:
    assert floor_verdict(6.5, 6.0, 2.0) == "met"
    assert floor_verdict(1.4, 6.0, 2.25) == "floor-bound (ceiling 2.25x)"
    assert floor_verdict(1.4, 6.0, 7.0) == "MISSED"
    assert floor_verdict(5.99, 6.0, 6.0) == "MISSED"


def test_the_group_commit_table_sets_loom_against_the_bare_writers_scaling() -> None:
    def stats(*values: float) -> Stats:
        return Stats(values)

    one = Arm("builtin, SQLite, FULL, 1 flow", dict)
    many = Arm("builtin, SQLite, FULL, 8 flows", dict)
    results = {
        one.name: {"per_s": stats(1_000.0), "grouped_floor_per_s": stats(5_000.0)},
        many.name: {"per_s": stats(1_500.0), "grouped_floor_per_s": stats(20_000.0)},
    }
    table = group_commit.scaling_table(one, many, results)
    assert table.rows == ((">= 6x", "1.50x", "4.00x", "floor-bound (ceiling 4.00x)"),)
    results[many.name]["grouped_floor_per_s"] = stats(35_000.0)
    assert group_commit.scaling_table(one, many, results).rows[0][3] == "MISSED"


def test_one_bare_writer_commits_alone_and_every_row_is_stored() -> None:
    values = make_values(group_commit.DECISIONS_PER_EXECUTION)
    seconds, per_commit = group_commit._bare_grouped_seconds(values, 1, 30)
    assert per_commit == 1
    assert seconds > 0
    seconds, per_commit = group_commit._bare_grouped_seconds(values, 4, 30)
    assert per_commit >= 1  # the count check inside raises if a row of the 120 went missing


def test_the_postgresql_table_sets_loom_against_the_bare_calls_scaling() -> None:
    results = {
        "PostgreSQL, 1 worker": {"per_s": Stats((500.0,)), "floor_per_s": Stats((2_000.0,))},
        "PostgreSQL, 8 workers": {"per_s": Stats((600.0,)), "floor_per_s": Stats((3_000.0,))},
    }
    table = scaleout._scaling_table(results)
    assert table.rows == ((">= 4x", "1.20x", "1.50x", "floor-bound (ceiling 1.50x)"),)
