"""`EmbeddingTable`: recorded vectors of one embedding model, addressed by text digest.

The table ``<prefix>embeddings`` holds ``(model, digest) -> vector``, float32 little endian:
one row per distinct text per model, whoever needs it (a vector store's entries, a corpus's
passages). The address is :func:`text_digest` of the text a store embeds for an entry,
:func:`~loom_memory.text.searchable_text`, so the same text written twice is embedded once.
A table only ever answers for its own model: rows of another model are never read.

With encryption on (a keyring on the engine), a second table, ``<prefix>subject_embeddings``,
holds ``(model, keyed digest, subject) -> vector`` for the texts of sealed subjects (ADR 0061):
the digest is keyed under the subject's data key, so it is unique to the subject, and the
subject column is what lets a forget event delete the subject's rows. The lookups read both
tables; a log without encryption never has the second one.

Every method takes the caller's connection: the table is written in the same transaction as
whatever needs the vectors (a store's rows, a projection's tracking position).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Index,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    delete,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from loom_memory.embedding_events import keyed_digest
from loom_memory.entry import MemoryEntry
from loom_memory.errors import EmbeddingModelChangedError
from loom_memory.text import searchable_text, tokenize
from loom_runtime import EncryptionOffError, MissingExtraError, create_missing, keyring_for

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

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


def _insert(conn: Connection, table: Table) -> Any:
    """An insert into ``table`` that leaves an address already held as it is."""
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    return insert(table).on_conflict_do_nothing()


def unit_vector(vector: NDArray[np.floating[Any]]) -> NDArray[np.float32] | None:
    """``vector`` scaled to length 1, or None for the zero vector (similar to nothing).

    In float64: cosine is scale-free, but a float32 norm overflowed for components near 1e19
    (every score 0) and underflowed near 1e-23 (every vector taken for the zero vector)."""
    wide = vector.astype(np.float64)
    norm = float(np.linalg.norm(wide))
    return None if norm == 0 else (wide / norm).astype(np.float32)


def _width_changed(model: str, stored: int, width: int) -> EmbeddingModelChangedError:
    return EmbeddingModelChangedError(
        f"vectors recorded for embedding model {model!r} have {stored} floats, but the "
        f"embedder of that name declares {width}: a model whose output width changed is "
        "another model, so give it another name (its `model`), and its vectors are recorded "
        "anew; or declare the width it had"
    )


class EmbeddingTable:
    """The vectors of ``model`` by text digest, in ``<table_prefix>embeddings`` (and, with
    encryption on, by subject and keyed digest in ``<table_prefix>subject_embeddings``)."""

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
        self.subject_table: Table | None = None
        """The sealed subjects' vectors; None on a log opened without encryption."""
        if keyring_for(engine) is not None:
            name = f"{table_prefix}subject_embeddings"
            # Keyed digests are unique to their subject, so lookups go by (model, digest);
            # the subject index serves a forget event's delete.
            self.subject_table = Table(
                name,
                metadata,
                Column("model", Text, nullable=False),
                Column("digest", Text, nullable=False),
                Column("subject", Text, nullable=False),
                Column("vector", LargeBinary, nullable=False),
                PrimaryKeyConstraint("model", "digest", "subject"),
                # At most 62 characters with the longest prefix (40): PostgreSQL cuts 63.
                Index(f"{table_prefix}subject_emb_by_subject", "subject"),
            )
        with engine.begin() as conn:
            self.created = bool(create_missing(conn, metadata.sorted_tables))
            """True when a table was missing: a projection into it starts again from 0."""

    @staticmethod
    def address(text: str, *, key: AESGCM | None = None) -> str:
        """The digest a text's vector is stored under: :func:`text_digest`, or with ``key``
        (a sealed subject's data key) :func:`~loom_memory.embedding_events.keyed_digest`."""
        return text_digest(text) if key is None else keyed_digest(key, text)

    @property
    def _tables(self) -> list[Table]:
        return [self.table] if self.subject_table is None else [self.table, self.subject_table]

    def missing(self, digests: Sequence[str], *, conn: Connection) -> list[str]:
        """The digests among ``digests`` with no vector of the model yet, in order."""
        held: set[str] = set()
        for table in self._tables:
            column = table.c
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
        rows = [
            {"model": self.model, "digest": digest, "vector": pack_vector(vector)}
            for digest, vector in vectors.items()
        ]
        conn.execute(_insert(conn, self.table), rows)

    def record_sealed(self, rows: Sequence[tuple[str, str, bytes]], *, conn: Connection) -> None:
        """Store sealed subjects' ``(subject, keyed digest, packed vector)`` rows; an address
        already held keeps its vector."""
        if not rows:
            return
        values = [
            {"model": self.model, "digest": digest, "subject": subject, "vector": vector}
            for subject, digest, vector in rows
        ]
        conn.execute(_insert(conn, self._subject_table()), values)

    def _subject_table(self) -> Table:
        if self.subject_table is None:
            raise EncryptionOffError(
                f"{self.table.name} was opened without encryption, so it has no table for "
                "sealed subjects' vectors: open the Loom with its master key (encryption=)"
            )
        return self.subject_table

    def forget(self, subjects: Sequence[str], *, conn: Connection) -> None:
        """Delete the model's vectors of ``subjects`` (their keys were destroyed)."""
        if self.subject_table is None or not subjects:
            return
        column = self.subject_table.c
        for start in range(0, len(subjects), _LOOKUP_BATCH):
            batch = list(subjects[start : start + _LOOKUP_BATCH])
            conn.execute(
                delete(self.subject_table).where(
                    column.model == self.model, column.subject.in_(batch)
                )
            )

    def unit_vectors(
        self, digests: Sequence[str], *, conn: Connection, width: int
    ) -> dict[str, NDArray[np.float32]]:
        """The unit vectors of ``digests`` that the table holds (zero vectors are left out),
        each of ``width`` floats, the reader's embedder's dimension.

        A vector is addressed by its model's name, not its width: an embedder whose width
        changed under the same name finds the old vectors "recorded", and stacking two widths
        failed deep in numpy. Such a vector is :class:`EmbeddingModelChangedError`."""
        found: dict[str, NDArray[np.float32]] = {}
        for table in self._tables:
            column = table.c
            for start in range(0, len(digests), _LOOKUP_BATCH):
                batch = list(digests[start : start + _LOOKUP_BATCH])
                query = select(column.digest, column.vector).where(
                    column.model == self.model, column.digest.in_(batch)
                )
                for digest, data in conn.execute(query):
                    if len(data) != 4 * width:
                        raise _width_changed(self.model, len(data) // 4, width)
                    unit = unit_vector(np.frombuffer(data, dtype="<f4").astype(np.float32))
                    if unit is not None:
                        found[digest] = unit
        return found

    def clear(self, *, conn: Connection) -> None:
        """Delete every vector of the model (a projection of the log resets this way); other
        models' vectors in the same tables are theirs."""
        for table in self._tables:
            conn.execute(delete(table).where(table.c.model == self.model))
