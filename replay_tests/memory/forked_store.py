"""A program that forks children from a process with a memory store opened from a URL, for
``test_fork_memory_store.py``.

Run by file path (the test tree has no packages)::

    python forked_store.py DB_URL CHILDREN RUNS

The parent opens the backend's store from DB_URL (the store creates and owns its engine) and
appends and searches once, so its pool holds a connection. Then it forks CHILDREN processes, as
``multiprocessing``'s fork start method does, and appends RUNS entries itself while they run.
Each child appends RUNS entries under a key of its own, finds each by search, closes the store
(as a worker's clean exit does) and exits 0, or 1 with the error on stderr. Once every child
has exited, the parent appends RUNS more: a child that closed its parent's connections would
fail these. It prints ONE JSON line: each child's exit status and how many entries each key
holds.
"""

from __future__ import annotations

import sys

import msgspec

from loom_memory import MemoryEntry, PostgresMemoryStore, SqliteMemoryStore
from loom_memory.sql import SqlMemoryStore
from replay_tests.forked_children import exit_statuses, fork_children


def _append(store: SqlMemoryStore, key: str, runs: int, *, search: bool) -> None:
    for n in range(runs):
        marker = f"{key.replace('-', '')}x{n}"
        store.append(key, [MemoryEntry(content=f"note {marker}", id=f"{key}-{n}")])
        if search and [e.id for e in store.search(key, marker)] != [f"{key}-{n}"]:
            raise AssertionError(f"{key}: entry {n} was not found by search")


def main(url: str, children: int, runs: int) -> None:
    backend = SqliteMemoryStore if url.startswith("sqlite") else PostgresMemoryStore
    store = backend(url)
    _append(store, "parent", 1, search=True)

    def child(n: int) -> None:
        _append(store, f"child{n}", runs, search=True)
        store.close()

    pids = fork_children(children, child)
    _append(store, "parent", runs, search=False)
    statuses = exit_statuses(pids)
    _append(store, "after", runs, search=True)
    held = {
        key: len(store.read(key))
        for key in ["parent", "after", *(f"child{c}" for c in range(children))]
    }
    store.close()
    print(msgspec.json.encode({"children": statuses, "held": held}).decode())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
