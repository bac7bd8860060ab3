"""ADR 0048 (amended 2026-12-01, fsync1): at ``synchronous=FULL`` one recorded decision is one
transaction of four statements on the held writer, and nothing else on any connection.

At FULL every ``COMMIT`` is an fsync and one sequential flow waits for each, so a second
commit, a ``PRAGMA`` or a read on another connection per decision would cost the flow a wait
or a wake-up per decision. What an execution adds once (its start and end events, the new
stream's chain heads, its seal's check) is left out by comparing two executions that differ
only in their number of decisions.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from loom_runtime import FlowContext, Loom

PER_DECISION = Counter(
    {"BEGIN": 1, "INSERT INTO stored_events": 1, "INSERT INTO loom_chain": 1, "COMMIT": 1}
)
"""The least a chained, versioned decision commits: its event, its chain link, one commit."""


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement any SQLite connection opened from now on runs, first words only."""
    statements: list[str] = []
    connect = sqlite3.connect

    def tracing(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)
        connection.set_trace_callback(lambda sql: statements.append(" ".join(sql.split()[:3])))
        return connection

    monkeypatch.setattr(sqlite3, "connect", tracing)
    monkeypatch.setattr(sqlite3.dbapi2, "connect", tracing)  # SQLAlchemy's pysqlite calls this
    yield statements


def _statements(loom: Loom, statements: list[str], decisions: int) -> Counter[str]:
    statements.clear()
    loom.run("f", n=decisions)
    return Counter(statements)


def _decide_n(ctx: FlowContext, n: int) -> int:
    for index in range(n):
        ctx.decide(f"step-{index}", partial(str, index))
    return n


def test_a_decision_adds_one_commit_of_its_two_rows_and_nothing_else(
    tmp_path: Path, traced: list[str]
) -> None:
    """Five more decisions in an execution add exactly five ``BEGIN``/event ``INSERT``/chain
    ``INSERT``/``COMMIT`` transactions: no other statement, on any connection."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", sqlite_synchronous="FULL") as loom:
        loom.flow("f")(_decide_n)
        loom.run("f", n=1)  # the schema and every connection, before counting
        three = _statements(loom, traced, 3)
        eight = _statements(loom, traced, 8)
    added = eight - three
    assert added == Counter({statement: 5 * n for statement, n in PER_DECISION.items()})
    assert three - eight == Counter()  # nothing the shorter execution ran more of


def test_no_pragma_or_checkpoint_runs_while_recording(tmp_path: Path, traced: list[str]) -> None:
    """Durability and journal settings are set once per connection, never per append: each
    would be another statement (a checkpoint, another fsync) on a decision's path."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", sqlite_synchronous="FULL") as loom:
        loom.flow("f")(_decide_n)
        loom.run("f", n=1)
        recorded = _statements(loom, traced, 5)
    assert not [statement for statement in recorded if statement.startswith("PRAGMA")]
    assert recorded["COMMIT"] == 5 + 2  # the decisions, and the execution's start and end
