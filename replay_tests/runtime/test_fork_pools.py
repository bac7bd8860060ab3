"""A process forked from one with an open ``Loom`` gets pools of its own (ADR 0048).

``multiprocessing`` forks on Linux by default, so a worker pool started after a ``Loom`` was
opened inherits it. A pooled connection inherited that way is a socket (on SQLite a file
handle) shared with the parent: on PostgreSQL the child's first append went out on the
parent's connection and failed ("prepared statement already exists"), and the two processes
then waited on each other's replies for ever. Each child must get fresh pools, and must not
close its parent's connections when it closes the Loom.

The scenario runs in a fresh interpreter (``forked_loom.py``), bounded by a timeout, since
the failure it guards against is a hang of the parent as well as of the child.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_tests.forking_program import run_forking_program

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
]

PROGRAM = Path(__file__).with_name("forked_loom.py")
CHILDREN = 2
RUNS = 5
TIMEOUT = 60  # seconds; the whole scenario takes a few


@pytest.mark.parametrize("persistence", ["builtin", "sqlalchemy"])
def test_forked_children_record_and_close_beside_their_parent(
    db_url: str, persistence: str
) -> None:
    """Children forked from a process with an open Loom record and replay with it and close
    it; the parent records meanwhile and afterwards; every execution is in one verified log."""
    report = run_forking_program(
        PROGRAM, db_url, str(CHILDREN), str(RUNS), persistence, timeout=TIMEOUT
    )
    assert report == {
        "children": [0] * CHILDREN,
        "executions": 1 + RUNS * (CHILDREN + 2),
        "verified": True if persistence == "builtin" else None,
    }
