"""Two threads of one process applying one SQL projection at once (ADR 0051, "threads").

A memory's projection and an embedding table's projection are one object each, shared by
every thread that reads through them (each read catches up first). Both keep the page being
applied on the object: the entries or vectors opened before its transaction, and for the
embeddings the rows held until the page's last sealed event. The tracking row orders two
threads' transactions in the database, but a second thread preparing its page while the
first was inside one replaced that state under it. The corpus index had the same hazard and
the PostgreSQL soak found it there; these tests make it happen here, on both backends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_memory import EmbeddingProjection, EmbeddingTable, EventSourcedMemory, HashingEmbedder
from loom_memory.conformance import entry
from loom_memory.projection import SqlMemoryProjection
from loom_runtime import Loom, SQLProjection, catch_up, rebuild
from replay_tests.knowledge.test_document_erasure import KEY
from replay_tests.knowledge.test_document_erasure_embeddings import table_rows
from replay_tests.memory.test_projection_conformance import (
    MEMORY,
    SqlMemoryHarness,
    _sql_projection,
)

PAUSE = 1.0
"""How long the first thread waits, inside its page, for the second to start its own."""


def _race(log: Any, projection: SQLProjection, page_state: Callable[[], object]) -> None:
    """Catch ``projection`` up from two threads: the first pauses inside its page's
    transaction, at its first event, until the second has prepared a shorter page (its
    ``page_state`` changed) or ``PAUSE`` passed. Raises what either thread raised."""
    handle = projection.handle
    first_state: list[object] = []
    inside = threading.Event()

    def paused_handle(conn: Any, position: int, event: Any) -> None:
        if not first_state:
            first_state.append(page_state())
            inside.set()
            waited = time.monotonic() + PAUSE
            while page_state() is first_state[0] and time.monotonic() < waited:
                time.sleep(0.01)
        handle(conn, position, event)

    errors: list[BaseException] = []

    def run(**kwargs: Any) -> None:
        try:
            catch_up(log, projection, **kwargs)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    projection.handle = paused_handle  # type: ignore[method-assign]
    first = threading.Thread(target=run)
    first.start()
    assert inside.wait(timeout=30)
    second = threading.Thread(target=run, kwargs={"page_size": 2})
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    assert not first.is_alive() and not second.is_alive()
    assert errors == []


@pytest.mark.waits  # PAUSE: the first thread holds its page
def test_two_threads_applying_one_memory_projection_leave_what_one_would(loom: Loom) -> None:
    writer = EventSourcedMemory(loom, name=MEMORY)
    for step in range(4):
        writer.append(f"k{step % 2}", [entry(f"step {step}", id=f"{step}")])
        writer.replace("b", [entry(f"replaced at {step}", id=f"{step}.r")])
    projection = _sql_projection(loom)
    harness = SqlMemoryHarness(loom, projection)

    _race(loom.log, projection, lambda: projection._opened)

    assert projection.position() == loom.log.position
    raced = harness.read_model()
    rebuild(loom.log, projection)
    assert harness.read_model() == raced
    unapplied = SqlMemoryProjection(
        type(projection.store)(loom.log.engine, table_prefix="no_"), memory=MEMORY
    )
    assert raced != SqlMemoryHarness(loom, unapplied).read_model()  # the writes were projected


@pytest.mark.waits  # PAUSE: the first thread holds its page
def test_two_threads_applying_one_embedding_projection_leave_what_one_would(db_url: str) -> None:
    embedder = HashingEmbedder(dimension=64)
    with Loom(db_url, encryption=KEY) as loom:
        kb = open_knowledge_base(loom, "ops", embedder=embedder, min_score=0.1)
        for batch in range(3):
            kb.sync(
                [
                    Doc(id=f"d{batch}.{n}", title=f"Doc {n}", text=f"Text {batch} {n} of the rota.")
                    for n in range(2)
                ],
                source=f"s{batch}",
            )
            kb.search(f"rota {batch}", mode="vector")  # records this batch's vectors
        table = EmbeddingTable(loom.log.engine, model=embedder.model, table_prefix="raced_")
        projection = EmbeddingProjection(table)

        _race(loom.log, projection, lambda: projection._opened)

        assert projection.position() == loom.log.position
        raced = table_rows(table)
        assert raced  # the vectors were projected
        rebuild(loom.log, projection)
        assert table_rows(table) == raced
