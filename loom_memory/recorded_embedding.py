"""A query's embedding as a recorded decision: a replay needs no model.

A vector search depends on the query's vector, and so on the model that made it. Recorded
through the flow's ``decide`` (kind ``"embedding"``, key ``embedding:<model>``, the model and
the text as its input), the vector is in the log: a replay returns it without calling the
model, and a replay asking another question (or another model) reports the changed input.
Passage vectors are recorded differently, as events addressed by text
(:mod:`loom_memory.vector_memory`), because a store's projection, not a flow, needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from loom_memory.embedder import Embedder, checked_vectors
from loom_memory.errors import InvalidArgumentError

R = TypeVar("R")


def embedding_key(model: str) -> str:
    """The decision key of a recorded query embedding by ``model`` (the text is its input)."""
    return f"embedding:{model}"


def embed_query(embedder: Embedder, query: str, *, decide: Callable[..., R]) -> R:
    """The vector of ``query`` through ``decide`` (e.g. ``ctx.decide``): what ``decide``
    returns, the vector or, from an async flow, an awaitable of it."""
    if not callable(decide):
        raise InvalidArgumentError(
            f"embed_query needs decide=ctx.decide, not {decide!r}: the vector is recorded so a "
            "replay needs no model; call embedder.embed([query]) outside a flow",
            parameter="decide",
        )
    if not isinstance(query, str):
        raise InvalidArgumentError(
            f"query must be a str, got {type(query).__name__}", parameter="query"
        )

    def compute() -> list[float]:
        [vector] = checked_vectors(embedder, [query])
        return vector

    request: dict[str, Any] = {"model": embedder.model, "text": query}
    return decide(
        embedding_key(embedder.model), compute, input=request, type=list[float], kind="embedding"
    )
