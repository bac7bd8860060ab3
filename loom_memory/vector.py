"""Vector stores: SQL rows, embeddings addressed by (model, text digest), an in-process index.

`SqliteVectorStore` and `PostgresVectorStore` keep their entries exactly as the lexical
backends do (the same ``<prefix>entries`` table, so every required and optional verb, the id
round trip and atomic ``replace`` are the shared SQL code's) and add three tables:

* ``<prefix>embeddings`` - ``(model, digest) -> vector``: one row per distinct searchable
  text per model (:class:`~loom_memory.embedding_table.EmbeddingTable`), float32 little
  endian. Content-addressed, so a text written again (the same passage in a new revision, the
  same memory under two keys) is embedded once; an entry without terms gets no vector and is
  never a hit, as it is never a lexical one. With encryption on, the keys of an event-sourced
  memory have their texts' vectors under keyed digests instead, in
  ``<prefix>subject_embeddings``, so erasing a key erases them (ADR 0061).
* ``<prefix>vector_space`` - the one model (and width) the store was indexed with. Opening
  the store with another embedder raises :class:`EmbeddingModelChangedError`: a new model is
  a new index (a new ``table_prefix``), never vectors of two spaces ranked together.
* ``<prefix>vector_keys`` - a random token per key, replaced by a trigger on every insert and
  delete of that key's rows, whoever issues it (a verb, a projection's reset, a caller's own
  ``DELETE``). The in-process index of a key is valid exactly while its token is: a search
  reads one row to know, and a rolled-back write's token never comes back, so a cache filled
  inside a transaction that was rolled back is never reused.

Search is exact: cosine similarity of the query's vector with every vector of the key, hits
at or above the floor (``min_score``, required: it is a property of the model, see
:mod:`loom_memory.similarity`), best first, ties in append order, the top ``limit`` selected
before it is sorted. The index is one float32 numpy matrix per key (the ``vector`` extra): a
cache, rebuilt per key from the rows and their recorded vectors, never from the model.

Where vectors come from: on ``append``/``replace`` the store looks each text's address up
and embeds only the missing ones, BEFORE its write transaction (a network call must not hold
the database's write lock). A store projected from the log is switched to
``embed_missing=False`` by :class:`~loom_memory.vector_memory.EventSourcedVectorMemory`: every
vector it needs was recorded in the log before the entry, so a rebuild or an as-of read never
calls the model, and a missing one is an error, not a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    URL,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    MetaData,
    Table,
    Text,
    select,
)

from loom_memory.embedder import Embedder, checked_vectors, values_problem
from loom_memory.embedding_table import EmbeddingTable, embedding_texts, text_digest, unit_vector
from loom_memory.entry import MemoryEntry, encode_entries
from loom_memory.erasure import text_key
from loom_memory.errors import (
    EmbeddingModelChangedError,
    EmbeddingNotRecordedError,
    InvalidArgumentError,
)
from loom_memory.postgres import PostgresMemoryStore
from loom_memory.postgres_counts import replaced_functions
from loom_memory.sql import DEFAULT_TABLE_PREFIX, SqlMemoryStore
from loom_memory.sqlite import SqliteMemoryStore
from loom_memory.store import DEFAULT_SEARCH_LIMIT, check_key, check_search
from loom_memory.text import searchable_text
from loom_runtime import (
    MissingExtraError,
    create_missing,
    finite_real,
    keyring_for,
    serialise_ddl,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

try:
    import numpy as np
    from numpy.typing import NDArray
except ImportError as exc:  # the vector extra is not installed
    raise MissingExtraError(
        extra="vector", missing="numpy", needed_by="the vector stores (loom_memory.vector)"
    ) from exc


@dataclass(frozen=True)
class _KeyIndex:
    """One key's entries and their unit vectors (one float32 row each, in append order),
    valid while the key's token is ``token``."""

    token: str | None
    seqs: NDArray[np.int64]
    entries: list[tuple[MemoryEntry, dict[str, Any]]]
    matrix: NDArray[np.float32]


class VectorSqlStore(SqlMemoryStore):
    """A SQL memory store searched by cosine similarity of recorded embeddings (module doc)."""

    def __init__(
        self,
        bind: Engine | URL | str,
        *,
        embedder: Embedder,
        min_score: float,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        embed_missing: bool = True,
    ) -> None:
        checked_vectors(embedder, [])  # its model and dimension, before the space is written
        self.embedder = embedder
        self._min_score = _checked_floor(min_score)
        self.embed_missing = embed_missing
        """False for a store projected from the log: a missing vector is then an error."""
        self.memory: str | None = None
        """The event-sourced memory projected into this store (set by
        :class:`~loom_memory.vector_memory.EventSourcedVectorMemory`): with encryption on, a
        key of it with a data key has its texts' vectors under keyed digests (ADR 0061)."""
        self._index: dict[str, _KeyIndex] = {}
        metadata = MetaData()
        self.space = Table(
            f"{table_prefix}vector_space",
            metadata,
            Column("model", Text, nullable=False),
            Column("dimension", Integer, nullable=False),
        )
        self.key_tokens = Table(
            f"{table_prefix}vector_keys",
            metadata,
            Column("key", Text, primary_key=True),
            Column("token", Text, nullable=False),
        )
        super().__init__(bind, table_prefix=table_prefix)
        self.vectors = EmbeddingTable(self.engine, model=self.model, table_prefix=table_prefix)
        """The store's recorded vectors (``<prefix>embeddings``)."""
        with self._begin(None) as conn:
            created = create_missing(conn, metadata.sorted_tables)
            if created or self.created_tables:  # the triggers go and come with the tables
                serialise_ddl(conn)  # workers opening the store at once must not race
                for statement in self._token_triggers():
                    conn.exec_driver_sql(statement)
        self._check_space()

    @property
    def model(self) -> str:
        """The embedding model's identity (the space every stored vector is in)."""
        return self.embedder.model

    @property
    def min_score(self) -> float:
        """The floor: the least cosine similarity a hit may have."""
        return self._min_score

    # -- schema ------------------------------------------------------------------------------

    def _token_triggers(self) -> list[str]:
        rows, tokens = self.entries.name, self.key_tokens.name
        if self.engine.dialect.name == "postgresql":
            touch = f"{self.table_prefix}vector_touch"
            return [
                f"CREATE OR REPLACE FUNCTION {touch}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN INSERT INTO {tokens}(key, token) VALUES (CASE WHEN TG_OP = 'DELETE' "
                "THEN OLD.key ELSE NEW.key END, gen_random_uuid()::text) ON CONFLICT (key) "
                "DO UPDATE SET token = EXCLUDED.token; RETURN NULL; END $$",
                f"CREATE OR REPLACE TRIGGER {rows}_vector_touch AFTER INSERT OR DELETE ON {rows} "
                f"FOR EACH ROW EXECUTE FUNCTION {touch}()",
            ]
        return [
            f"CREATE TRIGGER IF NOT EXISTS {rows}_vector_{event.lower()} AFTER {event} ON {rows} "
            f"BEGIN INSERT OR REPLACE INTO {tokens}(key, token) "
            f"VALUES ({row}.key, hex(randomblob(16))); END"
            for event, row in (("INSERT", "new"), ("DELETE", "old"))
        ]

    def _drop_ddl(self) -> list[str]:
        tables = (self.vectors.table, self.vectors.subject_table, self.space, self.key_tokens)
        own = [f"DROP TABLE IF EXISTS {table.name}" for table in tables if table is not None]
        if self.engine.dialect.name == "postgresql":
            own.append(f"DROP FUNCTION IF EXISTS {self.table_prefix}vector_touch() CASCADE")
        self._index.clear()
        return [*super()._drop_ddl(), *own]

    def _check_space(self) -> None:
        """Record the store's model on first open; refuse any other model afterwards."""
        with self._begin(None) as conn:
            found = conn.execute(select(self.space.c.model, self.space.c.dimension)).first()
            if found is None:
                conn.execute(
                    self.space.insert().values(model=self.model, dimension=self.embedder.dimension)
                )
                return
        if (found.model, found.dimension) != (self.model, self.embedder.dimension):
            raise EmbeddingModelChangedError(
                f"the vector store {self.table_prefix}* was indexed with {found.model!r} "
                f"(dimension {found.dimension}), not {self.model!r} (dimension "
                f"{self.embedder.dimension}): vectors of two models do not compare. Open it "
                "with that model, or index the new one under a new table_prefix (rebuilt from "
                "the log for an event-sourced memory)"
            )

    # -- writes: resolve vectors first, then the shared SQL verbs ----------------------------

    def append(
        self,
        key: str,
        entries: Sequence[MemoryEntry],
        *,
        conn: Connection | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Add ``entries`` to the end of ``key``, embedding only texts not embedded before."""
        missing = self._missing_vectors(conn, key, entries)
        with self._begin(conn) as c:
            self.vectors.record(missing, conn=c)
            super().append(key, entries, conn=c, values=values)

    def replace(
        self, key: str, entries: Sequence[MemoryEntry], *, conn: Connection | None = None
    ) -> None:
        """Make ``entries`` the list at ``key``, embedding only texts not embedded before."""
        missing = self._missing_vectors(conn, key, entries)
        with self._begin(conn) as c:
            self.vectors.record(missing, conn=c)
            super().replace(key, entries, conn=c)

    def _missing_vectors(
        self, conn: Connection | None, key: str, entries: Sequence[MemoryEntry]
    ) -> dict[str, list[float]]:
        """Embed the texts of ``entries`` the store holds no vector for (checked first, so a
        bad batch never reaches the model)."""
        check_key(key)
        encode_entries(entries)
        texts = embedding_texts(entries)
        addresses = self._addresses(list(texts.values()), self._data_key(key))
        with self._begin(conn) as c:
            absent = set(self.vectors.missing(sorted({*texts, *addresses}), conn=c))
        missing = [
            digest
            for digest, keyed in zip(texts, addresses, strict=True)
            if digest in absent and keyed in absent
        ]
        if not missing:
            return {}
        if not self.embed_missing:
            raise EmbeddingNotRecordedError(
                f"{len(missing)} text(s) written to key {key!r} have no recorded "
                f"{self.model!r} embedding: this store is projected from the log and never "
                "calls the model; write through EventSourcedVectorMemory, which records them"
            )
        vectors = checked_vectors(self.embedder, [texts[digest] for digest in missing])
        return dict(zip(missing, vectors, strict=True))

    # -- search ------------------------------------------------------------------------------

    def search_annotated(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """The entries at ``key`` at least ``min_score`` similar to ``query``, best first."""
        found = self._scored(key, query, limit, conn=conn, where=where, floor=None)
        return [(entry, annotations) for entry, annotations, _ in found]

    def search_scored(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        min_score: float | None = None,
        conn: Connection | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """As ``search``, each hit with its cosine similarity; ``min_score`` replaces the floor."""
        found = self._scored(key, query, limit, conn=conn, where=None, floor=min_score)
        return [(entry, score) for entry, _, score in found]

    def search_by_vector(
        self,
        key: str,
        vector: Sequence[float],
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        min_score: float | None = None,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[tuple[MemoryEntry, float]]:
        """As :meth:`search_scored` for a query vector of the store's model (the model is not
        called: a caller that recorded the query's embedding replays without it)."""
        _, limit = check_search(key, "", limit)
        try:
            if isinstance(vector, str | bytes | bytearray):  # iterated, it is characters
                raise TypeError(type(vector).__name__)
            query = [float(value) for value in vector]
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgumentError(
                f"vector must be a sequence of floats, not {type(vector).__name__} ({exc})",
                parameter="vector",
            ) from None
        if len(query) != self.embedder.dimension:
            raise InvalidArgumentError(
                f"vector has {len(query)} floats; {self.model!r} vectors have "
                f"{self.embedder.dimension}",
                parameter="vector",
            )
        problem = values_problem(query)
        if problem is not None:
            raise InvalidArgumentError(
                f"vector {problem}: a query vector is a stored embedding's kind, and those are "
                "refused the same way",
                parameter="vector",
            )
        found = self._ranked(key, query, limit, conn=conn, where=where, floor=min_score)
        return [(entry, score) for entry, _, score in found]

    def _scored(
        self,
        key: str,
        query: str,
        limit: int,
        *,
        conn: Connection | None,
        where: ColumnElement[bool] | None,
        floor: float | None,
    ) -> list[tuple[MemoryEntry, dict[str, Any], float]]:
        terms, limit = check_search(key, query, limit)
        if not terms:
            return []
        [vector] = checked_vectors(self.embedder, [query])
        return self._ranked(key, vector, limit, conn=conn, where=where, floor=floor)

    def _ranked(
        self,
        key: str,
        query: list[float],
        limit: int,
        *,
        conn: Connection | None,
        where: ColumnElement[bool] | None,
        floor: float | None,
    ) -> list[tuple[MemoryEntry, dict[str, Any], float]]:
        least = self._min_score if floor is None else _checked_floor(floor)
        # In float64: cast to float32 first, a query of components near 1e-46 (in range once
        # scaled, as cosine is) was taken for the zero vector, and found nothing.
        unit = unit_vector(np.asarray(query, dtype=np.float64))
        if unit is None:
            return []
        data_key = self._data_key(key)  # read before the transaction, as a projection does
        with self._begin(conn) as c:
            index = self._key_index(c, key, data_key)
            admitted = None if where is None else self._admitted_seqs(c, key, where)
        scores = index.matrix @ unit
        keep = scores >= least
        if admitted is not None:
            keep &= np.isin(index.seqs, admitted)
        best = top_positions(scores, np.flatnonzero(keep), limit)
        return [(*index.entries[position], float(scores[position])) for position in best]

    def _admitted_seqs(
        self, conn: Connection, key: str, where: ColumnElement[bool]
    ) -> NDArray[np.int64]:
        rows = self.entries.c
        found = conn.execute(select(rows.seq).where(rows.key == key, where)).scalars()
        return np.fromiter(found, dtype=np.int64)

    def _data_key(self, key: str) -> AESGCM | None:
        """The data key ``key``'s texts are addressed under (:func:`text_key`); None for a
        store no event-sourced memory projects."""
        if self.memory is None:
            return None
        return text_key(keyring_for(self.engine), self.memory, key)

    def _addresses(self, texts: Sequence[str], data_key: AESGCM | None) -> list[str]:
        """Where each of ``texts`` is looked up first: its keyed digest under the key's
        ``data_key``, or its plain digest when the key has none. The plain digest is tried
        too: a key's entries written in clear before encryption was switched on have only
        that."""
        return [EmbeddingTable.address(text, key=data_key) for text in texts]

    def _key_index(self, conn: Connection, key: str, data_key: AESGCM | None) -> _KeyIndex:
        """The key's index: the cached one while its token holds, else rebuilt from the rows."""
        token = conn.execute(
            select(self.key_tokens.c.token).where(self.key_tokens.c.key == key)
        ).scalar_one_or_none()
        cached = self._index.get(key)
        if cached is not None and cached.token == token:
            return cached
        rows = self.entries.c
        found = conn.execute(
            select(rows.seq, rows.entry, *self.annotations)
            .where(rows.key == key)
            .order_by(rows.seq)
        ).all()
        entries = [self._annotated(row) for row in found]
        texts = [searchable_text(entry) for entry, _ in entries]
        plain = [text_digest(text) for text in texts]
        keyed = plain if data_key is None else self._addresses(texts, data_key)
        vectors = self.vectors.unit_vectors(
            sorted({*plain, *keyed}), conn=conn, width=self.embedder.dimension
        )
        units = [vectors.get(k, vectors.get(p)) for k, p in zip(keyed, plain, strict=True)]
        held = [n for n, unit in enumerate(units) if unit is not None]
        width = self.embedder.dimension
        index = _KeyIndex(
            token=token,
            seqs=np.array([found[n].seq for n in held], dtype=np.int64),
            entries=[entries[n] for n in held],
            matrix=np.array([units[n] for n in held], dtype=np.float32).reshape(len(held), width),
        )
        self._index[key] = index
        return index


def top_positions(
    scores: NDArray[np.float32], candidates: NDArray[np.intp], limit: int
) -> NDArray[np.intp]:
    """The best ``limit`` of ``candidates`` (positions in append order), best first, ties in
    append order: exactly a stable sort of every candidate cut at ``limit``.

    Sorting every candidate costs n log n; a search at 100,000 entries with a low floor keeps
    most of them. So the ``limit``-th best score is found first (``np.partition``, linear), only
    the candidates at or above it are sorted (every tie with it included, so the cut is the
    same), and the stable sort keeps ties in append order.
    """
    if len(candidates) > limit:
        kept = scores[candidates]
        threshold = np.partition(kept, len(kept) - limit)[len(kept) - limit]
        candidates = candidates[kept >= threshold]
    ordered: NDArray[np.intp] = candidates[np.argsort(-scores[candidates], kind="stable")][:limit]
    return ordered


def _checked_floor(min_score: object) -> float:
    """``min_score`` as a float, refused unless a finite number (the store's and a search's
    alike): a NaN floor admitted nothing (every search ``[]``, silently), and a string failed
    deep in numpy with its own error type."""
    floor = finite_real(min_score)
    if floor is None:
        raise InvalidArgumentError(
            f"min_score must be a finite number (a cosine floor, e.g. 0.3), got {min_score!r}",
            parameter="min_score",
        )
    return floor


class SqliteVectorStore(VectorSqlStore, SqliteMemoryStore):
    """A vector store whose rows and recorded embeddings live in SQLite."""


class PostgresVectorStore(VectorSqlStore, PostgresMemoryStore):
    """A vector store whose rows and recorded embeddings live in PostgreSQL (the index is
    in-process and exact, as on SQLite; no pgvector needed)."""

    def _search_ddl(self, *, created: set[str]) -> list[str]:
        """The store's search DDL and the key-token function, whose body an open compares with
        the server's like every trigger function's: a release that changes the body changes
        no table, and the triggers are created only with their tables (ADR 0054, amended
        "pgfunc"). PL/pgSQL checks a body's tables when it runs, so the function may be
        replaced here, before this store's own tables are created."""
        return [*super()._search_ddl(created=created), *replaced_functions(self._token_triggers())]
