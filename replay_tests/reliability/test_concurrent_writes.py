"""Knowledge and memory writes do not fail because another process was writing the same stream.

Eight processes each make twenty knowledge writes (syncs of their own source alternating with
``put_doc`` of documents every process revises) and twenty memory appends, all to ONE corpus
stream and ONE memory key (:mod:`reliability_contention`), released at the same instant. Every
write must succeed (it waits and re-plans while others write, ADR 0019), and the log must hold
each reported write exactly once, with the read models equal to a serial replay of it and the
hash chain intact. On SQLite the losers also meet "database is locked"; on PostgreSQL the
table lock's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from itertools import pairwise
from pathlib import Path
from typing import Final

import msgspec
import pytest
from reliability_contention import KEY, Audit, WriterReport, audit, open_streams
from reliability_worker import finish, spawn, start_together

from loom_runtime import Loom

pytestmark = pytest.mark.slow

WORKERS: Final = 8
OPS: Final = 20  # per worker: 20 knowledge writes and 20 memory appends
TIMEOUT: Final = 120


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def contended_url(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[str]:
    """A fresh SQLite file, then (marked ``postgres``) a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    fresh: Callable[[], AbstractContextManager[str]] = request.getfixturevalue("postgres_database")
    with fresh() as url:
        yield url


def test_eight_processes_writing_one_stream_fail_nothing_lose_nothing_duplicate_nothing(
    contended_url: str, tmp_path: Path
) -> None:
    """8 x 20 contended syncs, put_docs and memory appends: 0 failures, each write logged once."""
    go = tmp_path / "go"
    with Loom(contended_url) as loom:
        open_streams(loom)  # the tables, so the race under test is writing, not CREATE TABLE
    writers = [
        spawn(contended_url, "write", "--worker", str(w), "--ops", str(OPS), "--go", str(go))
        for w in range(WORKERS)
    ]
    start_together(go, writers, timeout=TIMEOUT)
    reports: list[WriterReport] = []
    for writer in writers:
        outcome = finish(writer, timeout=TIMEOUT)
        assert outcome.status == 0, f"a writer exited {outcome.status}:\n{outcome.stderr[-3000:]}"
        reports.append(msgspec.convert(outcome.payload, WriterReport))

    with Loom(contended_url) as loom:
        verdict = audit(loom, reports)
        entries = [entry.content for entry in open_streams(loom)[1].read(KEY)]
    failures = [failure for report in reports for failure in report.failures]
    sound = Audit(
        writes=verdict.writes, failures=0, lost=0, duplicated=0, violations=[], chain_ok=True
    )
    assert (failures, verdict) == ([], sound)
    assert verdict.writes >= WORKERS * OPS * 3 // 2  # memory, put_doc, >= 1 doc per sync

    # It proved something only if the writers really raced: their appends interleave.
    owners = [label.split(":")[0] for label in entries]
    assert sum(a != b for a, b in pairwise(owners)) >= WORKERS * 4, owners
