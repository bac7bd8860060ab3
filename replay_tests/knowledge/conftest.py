"""Knowledge tests: the trace of the corpus index's transactions that the decision-read tests
share."""

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_runtime import Loom

BEGIN = "BEGIN"
"""How a transaction's begin appears in :func:`trace`."""


@pytest.fixture
def trace(loom: Loom) -> Iterator[list[str]]:
    """The corpus index engine's transaction begins (:data:`BEGIN`) and statements, in order."""
    engine = corpus_index(loom).engine
    seen: list[str] = []

    def began(_conn: Any) -> None:
        seen.append(BEGIN)

    def executed(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):  # SQLite's own, counted above
            seen.append(" ".join(statement.split()))

    event.listen(engine, "begin", began)
    event.listen(engine, "before_cursor_execute", executed)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", executed)
        event.remove(engine, "begin", began)
