"""ADR 0048: a SQLite writer chains from the heads it left, and only while no one else wrote.

An append reads the chain heads from the table unless its events got the id right after the
last one this writer chained (``KnownHeads``). These tests interleave writers on one file,
where heads kept without that proof would be stale, and check the chain with ``verify``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loom_runtime import StreamConflictError
from loom_runtime.log import LogSettings, Row, open_log
from loom_runtime.storage.application import EventsourcingLog
from loom_runtime.storage.chain import ChainTable


def _open(path: Path) -> EventsourcingLog:
    opened = open_log(LogSettings(f"sqlite:///{path}"))
    assert isinstance(opened, EventsourcingLog)
    return opened


@pytest.fixture
def two_logs(tmp_path: Path) -> Iterator[tuple[EventsourcingLog, EventsourcingLog]]:
    first, second = _open(tmp_path / "loom.db"), _open(tmp_path / "loom.db")
    yield first, second
    first.close()
    second.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per time an append read the heads from the table."""
    counted: list[int] = []
    original = ChainTable._heads

    def counting(self: ChainTable, cursor: Any, originators: list[object]) -> Any:
        counted.append(len(originators))
        return original(self, cursor, originators)

    monkeypatch.setattr(ChainTable, "_heads", counting)
    return counted


def _row(stream: uuid.UUID, version: int) -> Row:
    return Row(stream=stream, version=version, topic="test.Noted", state=b'{"n": %d}' % version)


def test_a_lone_writer_reads_a_streams_heads_once(
    two_logs: tuple[EventsourcingLog, EventsourcingLog], reads: list[int]
) -> None:
    """Appending again to a stream it appended to last, a writer reads no heads."""
    log, _ = two_logs
    stream = uuid.uuid4()
    for version in range(1, 6):
        log.insert_rows([_row(stream, version)])
    assert reads == [1]
    assert log.verify().ok


def test_appends_interleaved_by_two_writers_chain_as_one(
    two_logs: tuple[EventsourcingLog, EventsourcingLog], reads: list[int]
) -> None:
    """Each writer's heads are stale after the other's append: it reads them again, and the
    chain verifies (it would not if a writer chained from the heads it left)."""
    first, second = two_logs
    shared, own = uuid.uuid4(), uuid.uuid4()
    version = 0
    for _ in range(4):
        for log in (first, second):
            version += 1
            log.insert_rows([_row(shared, version)])
        first.insert_rows([_row(own, version)])
    assert len(reads) == 12  # every append found the other writer's append before it
    report = first.verify()
    assert report.ok, report
    assert second.verify().ok


def test_a_refused_append_leaves_the_next_one_chained(
    two_logs: tuple[EventsourcingLog, EventsourcingLog],
) -> None:
    """A conflict rolls back the lone append's transaction; what follows chains on."""
    log, _ = two_logs
    stream = uuid.uuid4()
    log.insert_rows([_row(stream, 1)])
    with pytest.raises(StreamConflictError):
        log.insert_rows([_row(stream, 2), _row(stream, 1)])
    log.insert_rows([_row(stream, 2), _row(stream, 3)])
    assert [row.version for row in log.rows(stream)] == [1, 2, 3]
    assert log.verify().ok
