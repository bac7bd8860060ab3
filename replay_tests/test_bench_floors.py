"""A scaling target is judged beside the same ratio of its floor, measured in the same run: a
target the floor itself cannot reach on this machine is reported as floor-bound, with the
ceiling, never as met and never as loom's miss alone."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from unittest.mock import patch

from benchmarks import corpus, group_commit, scaleout
from benchmarks.corpus import SCOPE, SOURCE, base_docs
from benchmarks.harness import Arm, Snapshots, Stats, _copy_sqlite, floor_verdict
from benchmarks.workload import make_values
from loom_knowledge import open_knowledge_base
from loom_runtime import Loom


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


def test_the_put_doc_floor_in_place_writes_what_put_doc_writes_where_it_writes_it(
    tmp_path: Path,
) -> None:
    """The floor under ``put_doc`` into a corpus writes into a copy of that corpus, under the
    key its passage store uses, the rows and counts ``put_doc`` writes: after it, the copy's
    index holds exactly what the corpus's own index holds after ``put_doc`` of the same
    documents (rows under one key, the same terms counted at the same positions)."""
    docs = base_docs(24)
    built, spare = docs[:20], docs[20:]
    path = tmp_path / "corpus.db"
    with Loom(f"sqlite:///{path}") as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(built, source=SOURCE)
        snapshots = Snapshots()
        snapshots.keep("corpus", path)
        head = loom.log.position
        floor = corpus._floor_arm(
            spare, per_document=True, counts=True, into=corpus._Into("corpus", head, 20)
        )
        with (
            patch.object(corpus, "SNAPSHOTS", snapshots),
            _kept_copy(tmp_path / "floor.db") as copy,
        ):
            assert floor.measure()["docs_per_s"] > 0
        for doc in spare:
            kb.put_doc(doc, source=SOURCE)
    assert _counts(copy) == _counts(path)


@contextmanager
def _kept_copy(kept: Path) -> Iterator[Path]:
    """The file the floor writes, copied to ``kept`` before its scratch directory goes."""
    real = corpus.fresh_sqlite

    @contextmanager
    def keeping() -> Iterator[tuple[str, Path]]:
        with real() as (url, path):
            yield url, path
            _copy_sqlite(path, kept)

    with patch.object(corpus, "fresh_sqlite", keeping):
        yield kept


def _counts(path: Path) -> tuple[list[tuple[object, ...]], ...]:
    """The index's keys and its counts by position, as a recount would compare them."""
    with closing(sqlite3.connect(path)) as connection:
        return tuple(
            connection.execute(sql).fetchall()
            for sql in (
                "SELECT DISTINCT key FROM loom_kb_entries",
                "SELECT * FROM loom_kb_terms_at ORDER BY 1, 2, 3, 4",
                "SELECT * FROM loom_kb_rows_at ORDER BY 1, 2, 3",
                "SELECT * FROM loom_kb_current_terms ORDER BY 1, 2",
                "SELECT * FROM loom_kb_current_rows ORDER BY 1",
            )
        )
