"""The checker can fail: each invariant is shown to catch the fault it exists for.

The crash harness and the many-workers test pass only if :func:`check_log` and
:func:`check_seen` find nothing. That means something only if they DO find a planted orphan
passage, a missing passage, a duplicated Completed, a recorded decision recomputed on resume,
and a projection that skipped or doubled an event. Each control starts from a clean workload
(which must check clean: the positive control) and plants exactly one fault.

The last two tests pin bugs found while building the many-workers test: several processes
opening one PostgreSQL log, or first using a projection, at the same time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Final

import msgspec
import pytest
from reliability_checks import Report, SeenEvents, check_log, check_seen
from reliability_worker import run
from reliability_workload import SCENARIOS, knowledge_base, register_flows
from sqlalchemy import text

from loom_knowledge.corpus.corpus_index import CorpusIndex
from loom_runtime import Loom
from loom_runtime.context import Recorder
from loom_runtime.projection import catch_up

TIMEOUT: Final = 60


@pytest.fixture
def worked(db_url: str) -> Iterator[Loom]:
    """A log holding both scenarios' work (corpus revisions and removals, three executions)."""
    with Loom(db_url) as loom:
        for scenario in SCENARIOS.values():
            scenario(loom)
        yield loom


def _violations(loom: Loom) -> list[str]:
    return check_log(loom).violations


def _execute(loom: Loom, statement: str, **params: object) -> None:
    with loom.log.engine.begin() as conn:
        conn.execute(text(statement), params)


def test_a_clean_log_checks_clean(worked: Loom) -> None:
    """Positive control: the workload itself violates nothing, and the checker looked."""
    report = check_log(worked)
    assert report.violations == []
    assert report.stats["executions"] == 3 and report.stats["passages"] > 0


def test_an_orphan_passage_is_caught(worked: Loom) -> None:
    """A passage row no manifest row counts (a half-removed document) is reported."""
    knowledge_base(worked).refresh()
    index = CorpusIndex(worked.log.engine)
    [entry] = index.store.read("knowledge:ops")[:1]
    index.store.append("knowledge:ops", [msgspec.structs.replace(entry, id="ghost#0")])
    assert "as the crash left it: orphan passage ghost#0 under knowledge:ops" in _violations(worked)


def test_a_document_missing_a_passage_is_caught(worked: Loom) -> None:
    """A listed document whose passage row is gone (a half-written revision) is reported."""
    knowledge_base(worked).refresh()
    _execute(worked, "DELETE FROM loom_kb_entries WHERE entry_id = :id", id="doc1#0")
    violations = _violations(worked)
    assert any("document listed without passage doc1#0" in v for v in violations), violations
    assert any("differs from a rebuild" in v for v in violations), violations


def test_a_duplicated_completed_is_caught(worked: Loom) -> None:
    """An execution with two Completed events (a double completion) is reported."""
    [first, *_] = worked.executions()
    execution = worked.execution(first.execution_id)
    execution.complete(output=msgspec.Raw(b'"again"'))
    worked.log.save(execution)
    assert f"execution {first.execution_id} completed 2 times" in _violations(worked)


@pytest.mark.slow  # SIGKILLs a worker subprocess
def test_a_recorded_decision_recomputed_on_resume_is_caught(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume that ignores the log and computes a recorded key again is reported."""
    killed = run(db_url, "crash", "execution", "decide.appended:4", timeout=TIMEOUT)
    assert killed.killed, killed.stderr
    monkeypatch.setattr(Recorder, "lookup", lambda self, slot: None)  # the planted bug
    with Loom(db_url) as loom:
        register_flows(loom)
        violations = _violations(loom)
    assert any("recomputed recorded decisions ['plan', 'step0']" in v for v in violations), (
        violations
    )
    assert any("changed recorded decisions" in v for v in violations), violations


@pytest.mark.parametrize("fault", ["skip", "double"])
def test_a_projection_that_skipped_or_doubled_an_event_is_caught(worked: Loom, fault: str) -> None:
    """The tail check reports an event the projection never applied, or applied twice."""
    seen = SeenEvents(worked.log.engine, name="planted")
    catch_up(worked.log, seen)
    table = f"rel_seen_{seen.name}"
    if fault == "skip":
        _execute(worked, f"DELETE FROM {table} WHERE position = 3")
        expected = "projection planted skipped positions [3]"
    else:
        _execute(worked, f"INSERT INTO {table} SELECT * FROM {table} WHERE position = 3")
        expected = "projection planted applied [3] twice"
    report = Report()
    check_seen(worked, seen, report)
    assert report.violations == [expected]


# -- concurrent opening and first use (PostgreSQL raced here before schema.serialise_ddl) --------


@pytest.mark.slow
def test_processes_opening_one_existing_log_at_once_all_succeed(db_url: str) -> None:
    """Twelve processes opening one existing log at the same instant, six times, all succeed."""
    with Loom(db_url) as loom:
        _ = loom.log.position  # the tables exist: what races is opening, not creating
    raced = run(db_url, "open-race", "--processes", "12", "--rounds", "6", timeout=TIMEOUT)
    assert raced.status == 0, raced.stderr
    assert raced.payload == {"failures": 0, "attempts": 72}, raced.stderr[-2000:]


@pytest.mark.slow  # twelve Looms at once
def test_workers_using_the_corpus_first_at_once_all_succeed(db_url: str) -> None:
    """Twelve workers whose first corpus use coincides all get a usable index, five times."""
    looms = [Loom(db_url) for _ in range(12)]
    try:
        for loom in looms:
            _ = loom.log.position
        for _ in range(5):
            assert _at_once([partial(CorpusIndex, loom.log.engine) for loom in looms])
            CorpusIndex(looms[0].log.engine).drop()  # the next round is a first use again
    finally:
        for loom in looms:
            loom.close()


def _at_once(calls: list[Callable[[], object]]) -> bool:
    """Run the calls in threads released together; True if none raised.

    Threads suffice here (unlike for opening the log): each call is its own database session,
    and the check-then-create window is wide enough that a barrier makes them collide.
    """
    barrier = threading.Barrier(len(calls))
    errors: list[BaseException] = []

    def call(function: Callable[[], object]) -> None:
        barrier.wait()
        try:
            function()
        except Exception as exc:  # collected, so every thread is joined before failing
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(function,)) for function in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    return not errors
