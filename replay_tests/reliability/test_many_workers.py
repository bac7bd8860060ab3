"""Many workers: real processes recording, syncing and projecting at once.

Eight recorders on PostgreSQL (four on SQLite) each run twenty executions, half of them
``pipeline`` (whose recorded retrieval catches the corpus projection up from inside a decide,
so every recorder is also a corpus projector) and half ``fanout`` (``asyncio.gather``). Meanwhile
one process syncs the corpus round after round (revisions, shrinking and growing documents,
removals), and two tail processes race each other catching one :class:`SeenEvents` projection
up in small pages while everything is being written: the tracking race of the notes, live.

Afterwards, from the parent:

* no lost or duplicated event: the executions in the log are exactly the ones the recorders
  reported, each once, with versions 1..n and exactly one Completed;
* every execution replays identically here, with the flows registered and nothing live;
* the tailed projection holds every event exactly once, equal to a rebuild and to the log,
  so it never skipped an id that committed late and never applied a page twice;
* the corpus, caught up, equals a rebuild of the dropped index, and is consistent.

The two-workers-resuming-one-execution race is ``test_processes.py``'s, already parametrised
over both backends by ``db_url``; it is not repeated here.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Final

import pytest
from reliability_checks import (
    Report,
    SeenEvents,
    check_corpus_converges,
    check_order,
    check_seen,
    read_log,
)
from reliability_worker import Outcome, finish, spawn, start_together
from reliability_workload import FLOWS, corpus_round, knowledge_base, register_flows

from loom_runtime import Loom
from loom_runtime.execution import Execution

pytestmark = pytest.mark.slow

WORKERS: Final = {"postgresql": 8, "sqlite": 4}
EXECUTIONS: Final = 20  # per worker
ROUNDS: Final = 12  # corpus syncs
TIMEOUT: Final = 150


def _ok(outcome: Outcome, what: str) -> Outcome:
    assert outcome.status == 0, f"{what} exited {outcome.status}:\n{outcome.stderr[-3000:]}"
    return outcome


def test_recorders_a_syncer_and_two_tails_at_once_lose_and_duplicate_nothing(
    db_url: str, tmp_path: Path
) -> None:
    """Concurrent workers leave a log with every event once, replayable, projected exactly."""
    backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    go, stop = tmp_path / "go", tmp_path / "stop"
    with Loom(db_url) as loom:
        # Created here so every worker starts writing at once (concurrent first use is tested
        # on its own in test_invariants.py); the race under test is writing.
        SeenEvents(loom.log.engine, name="tail")
        knowledge_base(loom).refresh()
    tails = [
        spawn(db_url, "tail", "--name", "tail", "--stop", str(stop), "--go", str(go))
        for _ in range(2)
    ]
    syncer = spawn(db_url, "sync", "--rounds", str(ROUNDS), "--go", str(go))
    recorders = [
        spawn(db_url, "record", "--count", str(EXECUTIONS), "--go", str(go))
        for _ in range(WORKERS[backend])
    ]
    start_together(go, [*tails, syncer, *recorders], timeout=TIMEOUT)
    reported = [_ok(finish(r, timeout=TIMEOUT), "a recorder").payload for r in recorders]
    synced = _ok(finish(syncer, timeout=TIMEOUT), "the syncer").payload
    stop.touch()
    tailed = [_ok(finish(t, timeout=TIMEOUT), "a tail").payload for t in tails]

    with Loom(db_url) as loom:
        register_flows(loom)
        report = Report()
        events = read_log(loom, report)
        check_order(events, report)
        check_seen(loom, SeenEvents(loom.log.engine, name="tail"), report)
        check_corpus_converges(loom, report)
        assert report.violations == []

        ids = [execution_id for ids in reported for execution_id in ids]
        topics = Counter((event.stream, event.topic) for event in events)
        created = {stream for stream, topic in topics if topic == Execution.Created.TOPIC}
        assert len(ids) == len(set(ids)) == WORKERS[backend] * EXECUTIONS
        assert created == set(ids), "an execution was lost, or one nobody reported appeared"
        assert all(topics[(i, Execution.Completed.TOPIC)] == 1 for i in ids)
        assert {summary.flow for summary in loom.executions()} == set(FLOWS)
        diverged = [str(r) for r in map(loom.replay, ids) if not r.identical]
        assert diverged == []

        final = {record.id for record in knowledge_base(loom).list_docs()}
        assert final == {doc.id for doc in corpus_round(ROUNDS - 1)}
    assert len(synced) == ROUNDS and any(result["removed"] for result in synced)

    # The test proved something only if the writers really overlapped: their executions
    # interleave in the log, and the tails advanced many times while they were writing.
    owner = {execution_id: n for n, ids in enumerate(reported) for execution_id in ids}
    order = [owner[e.stream] for e in events if e.topic == Execution.Created.TOPIC]
    switches = sum(a != b for a, b in pairwise(order))
    assert switches >= WORKERS[backend] * 4, f"the recorders barely overlapped: {order}"
    # A tail that advanced in two rounds found the log grown since its own last catch-up: it
    # ran while the others wrote. (A fixed count of rounds measured speed, not overlap: each
    # round also refreshes the corpus, and with faster appends the writing ends in fewer rounds.)
    # One such tail is the proof: both track one projection, so one may find every page
    # already taken by the other (CI saw 0 and 12 advances).
    assert max(tail["advances"] for tail in tailed) >= 2, tailed
    if backend == "sqlite":  # a rolled-back insert gives its id back; PostgreSQL's may not
        positions = [event.position for event in events]
        assert positions == list(range(1, len(positions) + 1))
