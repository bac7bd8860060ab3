"""The embedding projections of a log's database, for ``loom rebuild`` and ``loom doctor``.

Found by their tracking names, ``loom_embeddings:<table prefix>:<model>`` (a prefix is an SQL
identifier, so the first ``:`` after it starts the model, which may hold ``:`` itself). The
projection module needs numpy (the ``vector`` extra); it is imported only when a database
tracks one, so ``loom rebuild`` of a log without vectors runs without numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loom_runtime import EventLog, tracked_names

if TYPE_CHECKING:
    from loom_memory.vector_memory import EmbeddingProjection


def embedding_projections(log: EventLog) -> list[EmbeddingProjection]:
    """One :class:`~loom_memory.vector_memory.EmbeddingProjection` per tracked table and model
    (the ``loom.projections`` entry point)."""
    tracked = []
    for name in tracked_names(log.engine):
        kind, _, rest = name.partition(":")
        prefix, _, model = rest.partition(":")
        if kind == "loom_embeddings" and prefix and model:
            tracked.append((prefix, model))
    if not tracked:
        return []
    from loom_memory.embedding_table import EmbeddingTable  # imported here: it needs numpy
    from loom_memory.vector_memory import EmbeddingProjection

    return [
        EmbeddingProjection(EmbeddingTable(log.engine, model=model, table_prefix=prefix))
        for prefix, model in tracked
    ]
