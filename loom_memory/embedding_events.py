"""The event that puts embeddings in the log: vectors a model returned, by text digest.

One stream per model, ``embeddings:<model>``: writers only append (blind, retried on
contention), and the address of a vector is ``(model, digest)``, never the stream version.
Vectors are stored as float32-exact JSON numbers, so what a projection stores is bit for bit
what the log holds. ``model`` and ``digests`` are identifiers: never redacted (a rewritten
digest would address another text), refused if one looked like a secret (ADR 0012).
"""

from __future__ import annotations

from uuid import UUID

from loom_runtime import LogEvent, stream_id


class EmbeddingsRecorded(LogEvent):
    """``model`` embedded the texts whose SHA-256 digests are ``digests`` as ``vectors``."""

    TOPIC = "loom.memory.EmbeddingsRecorded"
    IDENTIFIERS = ("model", "digests")
    model: str
    digests: list[str]
    vectors: list[list[float]]


def embeddings_stream(model: str) -> UUID:
    """The stream of one embedding model's recorded vectors."""
    return stream_id(f"embeddings:{model}")
