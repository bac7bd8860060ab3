"""`EmbeddingTable`: recorded vectors of one embedding model, addressed by text digest.

The table ``<prefix>embeddings`` holds ``(model, digest) -> vector``, float32 little endian:
one row per distinct text per model, whoever needs it (a vector store's entries, a corpus's
passages). The address is :func:`text_digest` of the text a store embeds for an entry,
:func:`~loom_memory.text.searchable_text`, so the same text written twice is embedded once.
A table only ever answers for its own model: rows of another model are never read.

Every method takes the caller's connection: the table is written in the same transaction as
whatever needs the vectors (a store's rows, a projection's tracking position).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    delete,
    inspect,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from loom_memory.entry import MemoryEntry
from loom_memory.text import searchable_text, tokenize
from loom_runtime import MissingExtraError, serialise_ddl

try:
    import numpy as np
    from numpy.typing import NDArray
except ImportError as exc:  # the vector extra is not installed
    raise MissingExtraError(
        extra="vector", missing="numpy", needed_by="vector search (loom_memory.vector)"
    ) from exc

_LOOKUP_BATCH = 500
"""Digests per ``IN (...)`` lookup: far below every driver's bound-parameter limit."""


def text_digest(text: str) -> str:
    """The address of a text's embedding within one model: SHA-256 of its UTF-8, hex."""
    return hashlib.sha256(text.encode()).hexdigest()


def pack_vector(vector: Sequence[float]) -> bytes:
    """A vector as stored: float32, little endian (the same bytes on every platform)."""
    return struct.pack(f"<{len(vector)}f", *vector)


def unpack_vector(data: bytes) -> list[float]:
    """The floats of a stored vector."""
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def embedding_texts(entries: Sequence[MemoryEntry]) -> dict[str, str]:
    """The distinct texts ``entries`` are embedded under, by digest (entries without terms
    have none: like a lexical backend, nothing can match them)."""
    texts = (searchable_text(entry) for entry in entries)
    return {text_digest(text): text for text in texts if tokenize(text)}


def unit_vector(vector: NDArray[np.float32]) -> NDArray[np.float32] | None:
    """``vector`` scaled to length 1, or None for the zero vector (similar to nothing)."""
    norm = float(np.linalg.norm(vector))
    return None if norm == 0 else (vector / norm).astype(np.float32)


class EmbeddingTable:
    """The vectors of ``model`` by text digest, in ``<table_prefix>embeddings``."""

    def __init__(self, engine: Engine, *, model: str, table_prefix: str) -> None:
        self.engine = engine
        self.model = model
        self.table_prefix = table_prefix
        metadata = MetaData()
        self.table = Table(
            f"{table_prefix}embeddings",
            metadata,
            Column("model", Text, nullable=False),
            Column("digest", Text, nullable=False),
            Column("vector", LargeBinary, nullable=False),
            PrimaryKeyConstraint("model", "digest"),
        )
        with engine.begin() as conn:
            serialise_ddl(conn)  # workers opening the table at once must not race
            self.created = not inspect(conn).has_table(self.table.name)
            """True when the table was missing: a projection into it starts again from 0."""
            metadata.create_all(conn, checkfirst=True)

    def missing(self, digests: Sequence[str], *, conn: Connection) -> list[str]:
        """The digests among ``digests`` with no vector of the model yet, in order."""
        held: set[str] = set()
        column = self.table.c
        for start in range(0, len(digests), _LOOKUP_BATCH):
            batch = list(digests[start : start + _LOOKUP_BATCH])
            query = select(column.digest).where(
                column.model == self.model, column.digest.in_(batch)
            )
            held.update(conn.execute(query).scalars())
        return [digest for digest in digests if digest not in held]

    def record(self, vectors: Mapping[str, Sequence[float]], *, conn: Connection) -> None:
        """Store ``digest -> vector``; an address already held keeps its vector."""
        if not vectors:
            return
        insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        rows = [
            {"model": self.model, "digest": digest, "vector": pack_vector(vector)}
            for digest, vector in vectors.items()
        ]
        conn.execute(insert(self.table).on_conflict_do_nothing(), rows)

    def unit_vectors(
        self, digests: Sequence[str], *, conn: Connection
    ) -> dict[str, NDArray[np.float32]]:
        """The unit vectors of ``digests`` that the table holds (zero vectors are left out)."""
        found: dict[str, NDArray[np.float32]] = {}
        column = self.table.c
        for start in range(0, len(digests), _LOOKUP_BATCH):
            batch = list(digests[start : start + _LOOKUP_BATCH])
            query = select(column.digest, column.vector).where(
                column.model == self.model, column.digest.in_(batch)
            )
            for digest, data in conn.execute(query):
                unit = unit_vector(np.frombuffer(data, dtype="<f4").astype(np.float32))
                if unit is not None:
                    found[digest] = unit
        return found

    def clear(self, *, conn: Connection) -> None:
        """Delete every vector of the model (a projection of the log resets this way); other
        models' vectors in the same table are theirs."""
        conn.execute(delete(self.table).where(self.table.c.model == self.model))
