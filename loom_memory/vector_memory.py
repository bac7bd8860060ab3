"""`EventSourcedVectorMemory`: an event-sourced memory whose embeddings are in the log too.

A vector store's answer depends on the model that embedded its entries. If only the store held
the vectors, a ``rebuild`` (or reading memory as of a position, or restoring a dropped store)
would have to call the model again: slow, impossible offline, and not the same answer if the
model behind a name changed. So every vector enters the log before the entry that needs it, as
:class:`~loom_memory.embedding_events.EmbeddingsRecorded`, addressed by ``(model, digest of
the text)``, and the store is two projections of the log:

* the embeddings projection (tracked as ``loom_embeddings:<prefix>:<model>``) copies recorded
  vectors of the store's model into ``<prefix>embeddings``;
* the memory projection (:class:`~loom_memory.projection.SqlMemoryProjection`) applies the
  memory events, looking every vector up there. The store is opened with
  ``embed_missing=False``, so a projection never calls the model: a vector the log lacks is
  :class:`~loom_memory.errors.EmbeddingNotRecordedError`.

A write records only the texts whose address the log lacks: a passage unchanged across
revisions, or the same text under two keys, is embedded once. Opening the memory on a store
behind the log (a new store, or one with a new ``table_prefix`` for a new model: ADR 0038)
first records the missing vectors of every text the log's memory events hold, with the
store's model; that is indexing, and the only time the model sees old entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from loom_memory.embedder import Embedder, checked_vectors
from loom_memory.embedding_events import EmbeddingsRecorded, embeddings_stream
from loom_memory.embedding_table import (
    EmbeddingTable,
    embedding_texts,
    pack_vector,
    unpack_vector,
)
from loom_memory.entry import MemoryEntry, check_identifiers, encode_entries
from loom_memory.erasure import forget_destroyed
from loom_memory.errors import StoreConfigurationError, StoreNotOnLogDatabaseError
from loom_memory.event_sourced import EventSourcedMemory
from loom_memory.events import MEMORY_TOPICS
from loom_memory.projection import SqlMemoryProjection, memory_event, opened_entries
from loom_memory.store import DEFAULT_SEARCH_LIMIT, check_key
from loom_memory.vector import VectorSqlStore
from loom_runtime import (
    Change,
    DomainEventProtocol,
    EventLog,
    Loom,
    SQLProjection,
    catch_up,
    keyring_for,
    rebuild,
)

_VECTORS_PER_EVENT = 64
"""Vectors per logged event: a large batch is several events in one atomic append, so no
single stored row grows with the batch."""


class EmbeddingProjection(SQLProjection):
    """Projects the log's recorded embeddings of the table's model into an embedding table.

    Tracked as ``loom_embeddings:<table prefix>:<model>``: one table may hold several models'
    vectors (a corpus indexed by two), each projected and reset on its own.
    """

    topics = (EmbeddingsRecorded.TOPIC,)

    def __init__(self, table: EmbeddingTable) -> None:
        name = f"loom_embeddings:{table.table_prefix}:{table.model}"
        super().__init__(table.engine, name=name)
        self.table = table
        self.create_tables(rows_lost=table.created)

    def handle(self, conn: Connection, position: int, event: DomainEventProtocol[Any]) -> None:
        """Store the vectors of an event of the table's model; skip other models' events."""
        if isinstance(event, EmbeddingsRecorded) and event.model == self.table.model:
            self.table.record(dict(zip(event.digests, event.vectors, strict=True)), conn=conn)

    def clear(self, conn: Connection) -> None:
        """Delete every stored vector (all of them came from the log)."""
        self.table.clear(conn=conn)


def record_embeddings(
    log: EventLog,
    projection: EmbeddingProjection,
    embedder: Embedder,
    texts: Mapping[str, str],
) -> int:
    """Embed the texts (``digest -> text``) whose address the log lacks, log their vectors in
    one atomic append, and project them; return how many texts were embedded."""
    catch_up(log, projection)
    table = projection.table
    with table.engine.connect() as conn:
        missing = table.missing(list(texts), conn=conn)
    if not missing:
        return 0
    vectors = checked_vectors(embedder, [texts[digest] for digest in missing])
    # Rounded to float32 before logging: the log holds exactly what the table keeps.
    exact = [unpack_vector(pack_vector(vector)) for vector in vectors]
    changes: list[Change] = [
        (
            EmbeddingsRecorded,
            {
                "model": embedder.model,
                "digests": missing[start : start + _VECTORS_PER_EVENT],
                "vectors": exact[start : start + _VECTORS_PER_EVENT],
            },
        )
        for start in range(0, len(missing), _VECTORS_PER_EVENT)
    ]
    log.append_replanned(
        embeddings_stream(embedder.model),
        lambda _version: (changes, None),  # blind: the same vectors at any version
        what=f"the embeddings of {len(missing)} text(s) by {embedder.model!r}",
    )
    catch_up(log, projection)
    return len(missing)


class EventSourcedVectorMemory(EventSourcedMemory):
    """An :class:`EventSourcedMemory` over a vector store, its embeddings recorded in the log."""

    def __init__(self, loom: Loom, *, store: VectorSqlStore, name: str = "memory") -> None:
        """Open memory ``name`` over ``store`` (which the memory then owns: it is set to
        never call the model itself), recording first any vector the log lacks."""
        if not isinstance(store, VectorSqlStore):
            raise StoreConfigurationError(
                f"EventSourcedVectorMemory needs a SqliteVectorStore or PostgresVectorStore, "
                f"not {type(store).__name__}; use EventSourcedMemory for a lexical store"
            )
        if store.engine is not loom.log.engine:
            raise StoreNotOnLogDatabaseError(
                f"{type(store).__name__} writes through {store.engine.url!r}, not the log's "
                "engine: construct it with loom.log.engine"
            )
        store.embed_missing = False
        self._vector_store = store
        self._embeddings = EmbeddingProjection(store.vectors)
        self._log = loom.log
        catch_up(loom.log, self._embeddings)
        behind = SqlMemoryProjection(store, memory=name).position()
        if behind < loom.log.position:
            self._record(self._logged_texts(name, after=behind))
        super().__init__(loom, store=store, name=name)

    @property
    def model(self) -> str:
        """The embedding model's identity."""
        return self._vector_store.model

    @property
    def min_score(self) -> float:
        """The store's floor."""
        return self._vector_store.min_score

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Record the vectors the log lacks, then append as :class:`EventSourcedMemory` does."""
        self._record_for(key, entries)
        super().append(key, entries)

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Record the vectors the log lacks, then replace as :class:`EventSourcedMemory` does."""
        self._record_for(key, entries)
        super().replace(key, entries)

    def search_scored(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        min_score: float | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """As ``search``, each hit with its cosine similarity (the query is embedded now)."""
        return self._vector_store.search_scored(key, query, limit=limit, min_score=min_score)

    def search_by_vector(
        self,
        key: str,
        vector: Sequence[float],
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        min_score: float | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """Search with a query vector recorded elsewhere: no model call."""
        return self._vector_store.search_by_vector(key, vector, limit=limit, min_score=min_score)

    def catch_up(self, *, upto: int | None = None) -> int:
        """Project recorded embeddings, then memory events (which look the vectors up)."""
        catch_up(self._log, self._embeddings, upto=upto)
        return super().catch_up(upto=upto)

    def rebuild(self, *, upto: int | None = None) -> int:
        """Rebuild both projections from the log, up to ``upto``; the model is never called."""
        rebuild(self._log, self._embeddings, upto=upto)
        return super().rebuild(upto=upto)

    def _record_for(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Check the write as the memory will, then record the vectors its texts lack."""
        check_key(key)
        encode_entries(entries)
        check_identifiers(self._log.redactor, key=key, entries=entries)
        self._record(embedding_texts(entries))

    def _record(self, texts: Mapping[str, str]) -> None:
        """Record the vectors of ``texts`` the log lacks, with the store's model."""
        record_embeddings(self._log, self._embeddings, self._vector_store.embedder, texts)

    def _logged_texts(self, name: str, *, after: int) -> dict[str, str]:
        """The embeddable texts of memory ``name``'s entries logged after position ``after``."""
        texts: dict[str, str] = {}
        keyring = keyring_for(self._log.engine)
        events = [
            memory_event(self._log.decode(record), name)
            for record in self._log.notifications(after=after, topics=MEMORY_TOPICS)
        ]
        forget_destroyed(keyring, events)
        for event in events:
            if event is not None:
                texts.update(embedding_texts(opened_entries(keyring, event) or []))
        return texts
