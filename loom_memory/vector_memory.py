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

With encryption on, a memory key's texts are addressed under the key instead (digest keyed,
vector sealed under its data key, as
:class:`~loom_memory.embedding_events.SubjectEmbeddingsRecorded`), so erasing the key erases
them (ADR 0061).

A write records only the texts whose address the log lacks: a passage unchanged across
revisions, or (encryption off) the same text under two keys, is embedded once. Opening the
memory on a store behind the log (a new store, or one with a new ``table_prefix`` for a new
model: ADR 0038) first records the missing vectors of every text the log's memory events
hold, with the store's model; that is indexing, and the only time the model sees old entries.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from sqlalchemy import Connection

from loom_memory.embedder import Embedder, checked_vectors
from loom_memory.embedding_events import (
    EmbeddingsRecorded,
    SubjectEmbeddingsRecorded,
    damaged,
    embeddings_stream,
    open_vectors,
    seal_vector,
)
from loom_memory.embedding_table import (
    EmbeddingTable,
    embedding_texts,
    pack_vector,
    unpack_vector,
)
from loom_memory.entry import MemoryEntry, decode_entry
from loom_memory.erasure import forget_destroyed, memory_subject, text_key, write_key
from loom_memory.errors import StoreConfigurationError, StoreNotOnLogDatabaseError
from loom_memory.event_sourced import EventSourcedMemory, in_a_replay
from loom_memory.events import MEMORY_TOPICS
from loom_memory.projection import SqlMemoryProjection, memory_event, opened_entries
from loom_memory.store import DEFAULT_SEARCH_LIMIT
from loom_memory.vector import VectorSqlStore
from loom_runtime import (
    Change,
    DomainEventProtocol,
    EncryptionOffError,
    ErasedError,
    EventLog,
    Forgotten,
    Keyring,
    Loom,
    Precondition,
    SQLProjection,
    SubjectErasedError,
    catch_up,
    keyring_for,
    rebuild,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

logger = logging.getLogger("loom.memory")

_VECTORS_PER_EVENT = 64
"""Vectors per logged event: a large batch is several events in one atomic append, so no
single stored row grows with the batch."""


class EmbeddingProjection(SQLProjection):
    """Projects the log's recorded embeddings of the table's model into an embedding table.

    Tracked as ``loom_embeddings:<table prefix>:<model>``: one table may hold several models'
    vectors (a corpus indexed by two), each projected and reset on its own.

    A sealed subject's vectors (:class:`SubjectEmbeddingsRecorded`) are opened before the
    page's transaction (on SQLite a key read inside it would wait on the lock the page holds)
    and skipped once the subject's key is destroyed; a forget event deletes the subject's
    rows. So a rebuild from position 0, which finds the key gone, ends where the live
    projection did, whether the vectors were recorded before the forget event or after it
    (a write that raced the erasure). ADR 0061.
    """

    topics = (EmbeddingsRecorded.TOPIC, SubjectEmbeddingsRecorded.TOPIC, Forgotten.TOPIC)

    def __init__(self, table: EmbeddingTable) -> None:
        name = f"loom_embeddings:{table.table_prefix}:{table.model}"
        super().__init__(table.engine, name=name)
        self.table = table
        self._opened: dict[int, list[bytes] | None] = {}
        self._held: list[tuple[str, str, bytes]] = []
        """The page's opened (subject, digest, vector) rows, written in one statement: one
        insert per event (a document each) was most of a corpus's sealed indexing."""
        self._last = -1
        self._warned: set[int] = set()
        """Positions of damaged events already warned of (``embedding_events.damaged``): a
        rebuild and a read-model check skip them again, and said so each time."""
        self.create_tables(rows_lost=table.created)

    def apply(
        self, events: Sequence[tuple[int, DomainEventProtocol[Any]]], *, after: int, upto: int
    ) -> bool:
        """Open the page's sealed vectors of the table's model, then apply the page in one
        transaction; a vector whose key is destroyed opens as None (skipped)."""
        with self._applying:  # the page's opened and held vectors are this object's state
            sealed = [
                (position, event)
                for position, event in events
                if isinstance(event, SubjectEmbeddingsRecorded) and event.model == self.table.model
            ]
            keyring = keyring_for(self.engine) if sealed else None
            if keyring is not None:
                # The keyring caches a key once opened: another process may have destroyed it
                # since, and vectors sealed just before that must not open here.
                keyring.forget_destroyed(event.subject for _, event in sealed)
            self._opened = {position: _opened(keyring, event) for position, event in sealed}
            skipped = [
                position
                for position, event in sealed
                if self._opened[position] is None
                and position not in self._warned
                and damaged(event)
            ]
            if skipped:
                self._warned.update(skipped)
                logger.warning(
                    "recorded vectors of model %r at log positions %s are not sealed texts "
                    "(damaged when stored) and were skipped: the texts they held count as not "
                    "embedded until they are embedded and recorded again",
                    self.table.model,
                    skipped,
                )
            self._last = sealed[-1][0] if sealed else -1
            try:
                return super().apply(events, after=after, upto=upto)
            finally:
                self._opened, self._held = {}, []

    def handle(self, conn: Connection, position: int, event: DomainEventProtocol[Any]) -> None:
        """Store the vectors of an event of the table's model; skip other models' events;
        delete the vectors of the subjects a forget event names."""
        if isinstance(event, EmbeddingsRecorded) and event.model == self.table.model:
            self.table.record(dict(zip(event.digests, event.vectors, strict=True)), conn=conn)
        elif isinstance(event, SubjectEmbeddingsRecorded) and event.model == self.table.model:
            opened = self._opened[position]
            if opened is not None:
                pairs = zip(event.digests, opened, strict=True)
                self._held += [(event.subject, digest, vector) for digest, vector in pairs]
            if position == self._last:
                self._write_held(conn)
        elif isinstance(event, Forgotten):
            self._write_held(conn)  # the subjects it names may be held
            self.table.forget(list(event.subjects), conn=conn)

    def _write_held(self, conn: Connection) -> None:
        self.table.record_sealed(self._held, conn=conn)
        self._held = []

    def clear(self, conn: Connection) -> None:
        """Delete every stored vector (all of them came from the log)."""
        self.table.clear(conn=conn)


def _opened(keyring: Keyring | None, event: SubjectEmbeddingsRecorded) -> list[bytes] | None:
    """A sealed event's packed vectors, or None once its subject's key is destroyed, or when
    one of them is not a sealed text (:func:`~loom_memory.embedding_events.damaged`)."""
    try:
        if damaged(event):
            if keyring is not None:
                keyring.key(event.subject)  # erased: nothing to warn of, nothing to embed
            return None
        return open_vectors(keyring, event)
    except ErasedError:
        return None


def record_embeddings(
    log: EventLog,
    projection: EmbeddingProjection,
    embedder: Embedder,
    texts: Mapping[str, str],
    *,
    subjects: Mapping[str, str] | None = None,
    precondition: Precondition | None = None,
) -> int:
    """Embed the texts (``digest -> text``) whose address the log lacks, log their vectors in
    one atomic append, and project them; return how many texts were embedded.

    ``subjects`` names the sealed subject of each keyed digest (the others are plain, ADR
    0061): their vectors are logged sealed under the subject's live key, one event per
    subject, so a write to an erased subject is :class:`~loom_runtime.SubjectErasedError`.
    ``precondition``: what the append must find (a keyless write's, ``write_key``)."""
    catch_up(log, projection)
    table = projection.table
    with table.engine.connect() as conn:
        missing = table.missing(list(texts), conn=conn)
    if not missing:
        return 0
    vectors = checked_vectors(embedder, [texts[digest] for digest in missing])
    # Rounded to float32 before logging: the log holds exactly what the table keeps.
    packed = dict(zip(missing, map(pack_vector, vectors), strict=True))
    owners = subjects or {}
    plain = [digest for digest in missing if digest not in owners]
    chunks = [
        plain[start : start + _VECTORS_PER_EVENT]
        for start in range(0, len(plain), _VECTORS_PER_EVENT)
    ]
    changes: list[Change] = [
        (
            EmbeddingsRecorded,
            {
                "model": embedder.model,
                "digests": chunk,
                "vectors": [unpack_vector(packed[digest]) for digest in chunk],
            },
        )
        for chunk in chunks
    ]
    changes += _sealed_changes(log, embedder.model, packed, owners)
    log.append_replanned(
        embeddings_stream(embedder.model),
        lambda _version: (changes, None),  # blind: the same vectors at any version
        what=f"the embeddings of {len(missing)} text(s) by {embedder.model!r}",
        precondition=precondition,
    )
    catch_up(log, projection)
    return len(missing)


def _sealed_changes(
    log: EventLog, model: str, packed: Mapping[str, bytes], owners: Mapping[str, str]
) -> list[Change]:
    """The events recording the keyed digests among ``packed``, sealed under their subjects'
    live keys (the key table read again, in one query: another process may have erased one)."""
    by_subject: dict[str, list[str]] = {}
    for digest in packed:
        if digest in owners:
            by_subject.setdefault(owners[digest], []).append(digest)
    keyring = keyring_for(log.engine) if by_subject else None
    if keyring is None:
        if by_subject:
            raise EncryptionOffError(
                "vectors keyed under a sealed subject need the log's keyring: open the Loom "
                "with its master key (encryption=)"
            )
        return []
    live = set(keyring.live(by_subject))
    changes: list[Change] = []
    for subject, digests in by_subject.items():
        # A subject found destroyed raises SubjectErasedError; a live one's key may be cached.
        key = keyring.key(subject) if subject in live else keyring.live_key(subject)
        for start in range(0, len(digests), _VECTORS_PER_EVENT):
            chunk = digests[start : start + _VECTORS_PER_EVENT]
            sealed = [seal_vector(key, subject, model, d, packed[d]) for d in chunk]
            changes.append(
                (
                    SubjectEmbeddingsRecorded,
                    {"model": model, "subject": subject, "digests": chunk, "vectors": sealed},
                )
            )
    return changes


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
        # Its model and dimension, before anything is logged: the model addresses every
        # vector appended, and one that is not text would never decode again.
        checked_vectors(store.embedder, [])
        store.embed_missing = False
        store.memory = name
        self._vector_store = store
        self._embeddings = EmbeddingProjection(store.vectors)
        self._log = loom.log
        catch_up(loom.log, self._embeddings)
        behind = SqlMemoryProjection(store, memory=name).position()
        if behind < loom.log.position:
            self._record_logged(name, after=behind)
        super().__init__(loom, store=store, name=name)

    @property
    def model(self) -> str:
        """The embedding model's identity."""
        return self._vector_store.model

    @property
    def min_score(self) -> float:
        """The store's floor."""
        return self._vector_store.min_score

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

    def _checked(self, key: str, entries: Sequence[MemoryEntry]) -> list[msgspec.Raw]:
        """Check an append or replace as :class:`EventSourcedMemory` does, then record the
        vectors its texts lack: a refused write never calls the model or logs a vector."""
        raw = super()._checked(key, entries)
        if not in_a_replay():  # a replay's write is left out: no vector to record, no model call
            self._record_for(key, entries, raw)
        return raw

    def _record_for(
        self, key: str, entries: Sequence[MemoryEntry], raw: Sequence[msgspec.Raw]
    ) -> None:
        """Record the vectors the texts of checked ``entries`` (encoded: ``raw``) lack, as the
        log will store them: redacted by the log's redactor (ADR 0012), as the projection
        reads them. Addressed by the caller's text, a secret in it included, the vector was
        not the one the projection looked up, and the memory was blocked for good. With
        encryption on, under the key's data key (made now if the key has none; an erased key
        is :class:`~loom_runtime.SubjectErasedError` before anything is appended)."""
        stored = list(entries)
        redactor = self._log.redactor
        if redactor is not None:
            for index, data in enumerate(raw):
                redacted = redactor.raw(data, path=f"entries[{index}]")
                if redacted is not data:
                    stored[index] = decode_entry(redacted)
        aead, guard = write_key(self._log, self.name, key)
        subject = memory_subject(self.name, key)
        self._record(*_addressed(embedding_texts(stored).values(), aead, subject), guard)

    def _record(
        self,
        texts: Mapping[str, str],
        subjects: Mapping[str, str],
        precondition: Precondition | None = None,
    ) -> None:
        """Record the vectors of ``texts`` the log lacks, with the store's model; the keyed
        digests among them under their ``subjects`` (ADR 0061)."""
        record_embeddings(
            self._log,
            self._embeddings,
            self._vector_store.embedder,
            texts,
            subjects=subjects,
            precondition=precondition,
        )

    def _record_logged(self, name: str, *, after: int) -> None:
        """Record the vectors the log lacks of memory ``name``'s texts logged after ``after``;
        read again if a key was erased meanwhile by another process (then left out)."""
        while True:
            try:
                self._record(*self._logged_texts(name, after=after))
                return
            except SubjectErasedError:
                continue

    def _logged_texts(self, name: str, *, after: int) -> tuple[dict[str, str], dict[str, str]]:
        """The embeddable texts of memory ``name``'s entries logged after position ``after``,
        by address, and the subject of each keyed address: a key with a live data key has
        its texts addressed under it, as :class:`VectorSqlStore` looks them up."""
        texts: dict[str, str] = {}
        subjects: dict[str, str] = {}
        keyring = keyring_for(self._log.engine)
        events = [
            memory_event(self._log.decode(record), name)
            for record in self._log.notifications(after=after, topics=MEMORY_TOPICS)
        ]
        forget_destroyed(keyring, events)
        for event in events:
            entries = None if event is None else opened_entries(keyring, event)
            if event is None or not entries:
                continue
            aead = text_key(keyring, name, event.key)
            subject = memory_subject(name, event.key)
            found, named = _addressed(embedding_texts(entries).values(), aead, subject)
            texts.update(found)
            subjects.update(named)
        return texts, subjects


def _addressed(
    found: Iterable[str], aead: AESGCM | None, subject: str
) -> tuple[dict[str, str], dict[str, str]]:
    """``found`` by address (plain digests without ``aead``, else keyed digests under it),
    and the ``subject`` of each keyed address."""
    texts = {EmbeddingTable.address(text, key=aead): text for text in found}
    return texts, ({} if aead is None else dict.fromkeys(texts, subject))
