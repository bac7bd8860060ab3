"""The corpus index passes the projection conformance kit (ADR 0022).

Events are written by a knowledge base on the log's database, which keeps its own corpus index
there. The index under test is a second one, in a second database, caught up from the same log:
a projection only needs the log to read and an engine to write to, and this way only the kit
moves it.

The knowledge base's own index (the first one, on the log's database) is the expected read
model: the same class, but caught up by loom's own reads, never by the kit's pages and
crashes. The index under test can be reopened over its database, and dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.corpus_index import CorpusIndex
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_runtime import EventLog, Loom, catch_up
from loom_runtime.projection_conformance import TrackedProjectionContract
from replay_tests.conftest import fresh_postgres_database

SCOPES = ("kit", "kit-other")


class CorpusHarness:
    """Syncs documents that are written, revised and removed; reads each scope's manifest,
    current passages and a search."""

    def __init__(self, loom: Loom, engine: Engine) -> None:
        self.loom = loom
        self.engine = engine
        self._projection = CorpusIndex(engine)

    @property
    def log(self) -> EventLog:
        return self.loom.log

    @property
    def projection(self) -> CorpusIndex:
        return self._projection

    def write(self, step: int) -> int:
        """Sync one scope: a stable document, one revised each step, one new (the previous
        new one removed). One event per document written or removed, and one for the sync."""
        scope = SCOPES[step % 2]
        docs = [
            Doc(id="stable", text="Restart the worker pool when the queue stalls."),
            Doc(id="revised", text=f"Revision {step}: page the on-call engineer.\n\nThen wait."),
            Doc(id=f"new-{step}", text=f"Step {step} notes about the queue."),
        ]
        result = open_knowledge_base(self.loom, scope).sync(docs, allow_mass_delete=True)
        return len(result.written) + len(result.removed) + 1

    def read_model(self) -> object:
        return _read(self._projection)

    def expected_read_model(self) -> object:
        """The knowledge base's own index, caught up as loom catches it up."""
        index = corpus_index(self.loom)
        catch_up(self.loom.log, index)
        return _read(index)

    def drop(self) -> None:
        self._projection.drop()
        self._projection = CorpusIndex(self.engine)

    def reopen(self) -> None:
        self._projection = CorpusIndex(self.engine)


def _read(index: CorpusIndex) -> object:
    """What a corpus index's readers see: each scope's manifest, passages and a search."""
    return {
        scope: (
            index.manifest(scope),
            index.read_passages(scope),
            index.search_passages(scope, "queue worker", limit=10),
        )
        for scope in SCOPES
    }


@pytest.fixture
def read_model_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A second database, of the log's kind, for the index under test."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'read-model.db'}"
    else:
        yield from fresh_postgres_database()


class TestCorpusIndexProjection(TrackedProjectionContract):
    @pytest.fixture
    def harness(self, loom: Loom, read_model_url: str) -> Iterator[CorpusHarness]:
        engine = create_engine(read_model_url)
        try:
            yield CorpusHarness(loom, engine)
        finally:
            engine.dispose()
