"""A process forked from one holding a memory store opened from a URL gets a pool of its own.

A store given a URL creates and owns its SQLAlchemy engine. ``multiprocessing`` forks on Linux
by default, so a worker started after the store was opened inherits that engine's pooled
connections: sockets (on SQLite, file handles) shared with the parent. SQLAlchemy's rule for
a child is ``engine.dispose(close=False)`` ("Using Connection Pools with Multiprocessing or
os.fork()"); the Loom's own engines follow it (``test_fork_pools.py``), and a store's owned
engine must too. An engine passed in is the caller's, as SQLAlchemy leaves it.

The scenario runs in a fresh interpreter (``forked_store.py``), bounded by a timeout, since
the failure it guards against can be a hang of the parent as well as of the child.
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

PROGRAM = Path(__file__).with_name("forked_store.py")
CHILDREN = 2
RUNS = 20
TIMEOUT = 60  # seconds; the whole scenario takes a few


def test_forked_children_write_and_close_beside_their_parent(db_url: str) -> None:
    report = run_forking_program(PROGRAM, db_url, str(CHILDREN), str(RUNS), timeout=TIMEOUT)
    assert report == {
        "children": [0] * CHILDREN,
        "held": {
            "parent": 1 + RUNS,
            "after": RUNS,
            **{f"child{c}": RUNS for c in range(CHILDREN)},
        },
    }
