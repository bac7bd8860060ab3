"""The embedding projections of a log's database, for ``loom rebuild`` and ``loom doctor``.

Found by their tracking names, ``loom_embeddings:<table prefix>:<model>`` (a prefix is an SQL
identifier, so the first ``:`` after it starts the model, which may hold ``:`` itself). The
projection module needs numpy (the ``vector`` extra); it is imported only when a database
tracks one, so ``loom rebuild`` of a log without vectors runs without numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loom_runtime import EventLog, Unopened, open_each, tracked_names

if TYPE_CHECKING:
    from loom_memory.vector_memory import EmbeddingProjection


def embedding_projections(
    log: EventLog, *, unopened: Unopened | None = None
) -> list[EmbeddingProjection]:
    """One :class:`~loom_memory.vector_memory.EmbeddingProjection` per tracked table and model
    (the ``loom.projections`` entry point); one that cannot be opened here is told to
    ``unopened`` by its tracking name, and the others are still returned."""
    tracked = []
    for name in tracked_names(log.engine):
        kind, _, rest = name.partition(":")
        prefix, _, model = rest.partition(":")
        if kind == "loom_embeddings" and prefix and model:
            tracked.append((name, prefix, model))
    if not tracked:
        return []
    from loom_memory.embedding_table import EmbeddingTable  # imported here: it needs numpy
    from loom_memory.vector_memory import EmbeddingProjection

    def opener(prefix: str, model: str) -> Callable[[], EmbeddingProjection]:
        return lambda: EmbeddingProjection(
            EmbeddingTable(log.engine, model=model, table_prefix=prefix)
        )

    return open_each(((name, opener(prefix, model)) for name, prefix, model in tracked), unopened)
