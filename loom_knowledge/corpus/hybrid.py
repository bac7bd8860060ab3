"""`HybridRetriever`: vector and hybrid retrieval over a knowledge base, recorded like lexical.

Lexical retrieval (BM25) misses a question phrased in other words than the passage; a dense
embedding finds it but misses rare exact terms (an error code, a flag). Hybrid fuses the two
rankings by reciprocal rank (:func:`~loom_memory.reciprocal_rank_fusion`): BM25 scores and
cosines do not add, ranks do.

What is recorded, and where:

* passage vectors are events in the log (:func:`~loom_memory.record_embeddings`), addressed by
  ``(model, digest of the passage's searchable text)``: a passage unchanged across revisions
  is embedded once, and they are projected into ``loom_kb_embeddings``, which a rebuild
  restores without the model; with encryption on, a sealed document's are recorded under the
  document (digest keyed and vector sealed under its data key, ADR 0061), projected into
  ``loom_kb_subject_embeddings`` and deleted there when the document is erased;
* the query's vector is a decision (:func:`~loom_memory.embed_query`, kind ``embedding``);
* the passages returned are a decision under the scope's retrieval key, as
  :meth:`KnowledgeBase.retrieve <loom_knowledge.KnowledgeBase.retrieve>` records them, with the
  mode, model and floor in its input: a replay needs neither the corpus nor the model, and a
  replay asked in another mode reports a changed input.

A knowledge base opened with an embedder (``open_knowledge_base(loom, scope, embedder=,
min_score=)``) holds one of these and answers ``kb.retrieve(..., mode=)`` through it; build
one yourself to query a second model over the same corpus (a new index, never a mix).

The candidates of every mode are the knowledge base's own passages: the current ones, or
those current at a log position (``as_of``), so history holds for vector and hybrid exactly
as for lexical, and a vector search never sees a superseded revision. Passages whose vectors
are not recorded yet are embedded (and recorded) before ranking: indexing, which never
happens in a replay. Vector ranking is exact cosine with the retriever's floor, ties by
(document id, passage index), so a corpus ranks as a fresh corpus of its current documents
would, whatever order its history wrote them in. A filter
(:mod:`loom_knowledge.corpus.retrieval`) masks the passages before the top ``limit`` are
taken, so it never leaves fewer hits than match; hybrid fuses the two rankings each filtered
to its full depth. Hybrid's lexical half is the store's BM25 answer computed from a
:class:`~loom_knowledge.corpus.term_index.TermIndex` of the same held passages (ADR 0052): the
store scores rows in SQL, too slowly for 50-deep rankings at 100,000 passages.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec

from loom_runtime import (
    ErasedError,
    MissingExtraError,
    SubjectErasedError,
    finite_real,
    keyring_for,
)

try:
    import numpy as np
    from numpy.typing import NDArray
except ImportError as exc:  # the vector extra is not installed
    raise MissingExtraError(
        extra="vector",
        missing="numpy",
        needed_by="vector and hybrid retrieval (open_knowledge_base(..., embedder=))",
    ) from exc

from loom_knowledge.corpus.corpus_index import INDEX_TOPICS, TABLE_PREFIX
from loom_knowledge.corpus.erasure import document_subject
from loom_knowledge.corpus.keys import retrieve_key
from loom_knowledge.corpus.knowledge_base import DEFAULT_RETRIEVE_LIMIT, KnowledgeBase
from loom_knowledge.corpus.retrieval import (
    FilterValue,
    MetaFilter,
    MetaIndex,
    Mode,
    check_arguments,
    check_filter,
    filtered,
    retrieval_input,
)
from loom_knowledge.corpus.term_index import Counts, TermIndex, term_counts
from loom_knowledge.domain.passage_entry import PassageContent, format_passage_id
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import InvalidArgumentError, InvalidOptionError
from loom_memory import (
    Embedder,
    EmbeddingProjection,
    EmbeddingTable,
    MemoryEntry,
    Tokenizer,
    checked_vectors,
    embed_query,
    reciprocal_rank_fusion,
    record_embeddings,
    searchable_text,
    tokenize,
    top_positions,
    unit_vector,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

DEFAULT_CANDIDATES: Final = 50
"""How deep each ranking goes before fusion: fusing only the top ``limit`` of each would drop
a passage ranked 5th by both, which is exactly the one hybrid exists to find."""
MATRICES_KEPT: Final = 4
"""As-of positions whose stacked vectors a retriever keeps (an audit pages through a few)."""


@dataclass(frozen=True)
class Stacked:
    """One corpus state as a query reads it: ``held``, the passages that have a vector, by
    (document id, passage index), with their unit vectors stacked in ``matrix``; ``passages``,
    every passage, and ``terms``, their :class:`TermIndex` (None: ask the store); ``metas``,
    the held passages' meta, for filters."""

    held: list[Passage]
    matrix: NDArray[np.float32]
    passages: list[Passage]
    terms: TermIndex | None
    metas: MetaIndex


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Filter = dict[str, list[FilterValue]] | None
"""A filter as :func:`~loom_knowledge.corpus.retrieval.check_filter` returns it."""


def passage_text(passage: Passage) -> str:
    """The text a passage is embedded as: what the lexical index searches (ADR 0007)."""
    content = PassageContent(text=passage.text, title=passage.title, meta=passage.meta)
    return searchable_text(MemoryEntry(content=msgspec.to_builtins(content), timestamp=_EPOCH))


def _identity(passage: Passage) -> tuple[str, int, int]:
    return (passage.doc_id, passage.index, passage.revision)


class HybridRetriever:
    """Lexical, vector and hybrid retrieval over ``kb`` with ``embedder`` (module docstring)."""

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        embedder: Embedder,
        min_score: float,
        candidates: int = DEFAULT_CANDIDATES,
    ) -> None:
        floor = finite_real(min_score)
        if floor is None:  # a NaN floor admitted nothing: every vector search [], silently
            raise InvalidOptionError(
                f"min_score must be a finite number (the model's cosine floor, e.g. 0.3), got "
                f"{min_score!r}"
            )
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
            raise InvalidOptionError(f"candidates must be a positive int, got {candidates!r}")
        # The embedder's model and dimension, checked by loom_memory before anything is
        # recorded: the model addresses every vector logged, and one that is not text (5,
        # None) would be appended at the first vector search and never decode again.
        checked_vectors(embedder, [])
        self.kb = kb
        self.embedder = embedder
        self.min_score = floor
        self.candidates = candidates
        self._projection: EmbeddingProjection | None = None
        # Both maps only grow and never go stale: a passage (doc, index, revision) always has
        # the same text, and a (model, digest) always the same recorded vector.
        self._digests: dict[tuple[str, int, int], str] = {}
        self._units: dict[str, NDArray[np.float32]] = {}
        # Term counts by the same digest (a text always has the same terms), numbered in a
        # vocabulary that only grows: a restack after a change tokenizes only new texts.
        self._vocabulary: dict[str, int] = {}
        self._counts: dict[str, Counts] = {}
        self._counted_by = ""
        # The corpus at a log position changes only when a document is erased (it leaves
        # every view), so its passages and their unit vectors are stacked once per position
        # and last erasure: a query reads and stacks nothing while no corpus or forget event
        # has been appended since (the current corpus), or no erasure (an as-of position).
        self._matrices: dict[tuple[int, int], Stacked] = {}
        self._current: tuple[int, Stacked] | None = None

    @property
    def _embeddings(self) -> EmbeddingProjection:
        """The projection of recorded vectors, created on first use: a replay, which answers
        from the log, never creates (or touches) its table."""
        if self._projection is None:
            engine = self.kb.loom.log.engine
            table = EmbeddingTable(engine, model=self.embedder.model, table_prefix=TABLE_PREFIX)
            self._projection = EmbeddingProjection(table)
        return self._projection

    def index(self, passages: Sequence[Passage] | None = None) -> int:
        """Record the vectors of ``passages`` (default: the current ones) that the log lacks;
        return how many texts were embedded."""
        chosen = self.kb.passages() if passages is None else passages
        keys = self._document_keys({p.doc_id for p in chosen})
        texts: dict[str, str] = {}
        subjects: dict[str, str] = {}
        for passage in chosen:
            identity = _identity(passage)
            if identity in self._digests and self._digests[identity] in self._units:
                continue
            text = passage_text(passage)
            if passage.doc_id not in keys:
                # Erased since it was listed: no vector, and a name no vector has (the term
                # counts are cached by it until the forget event removes the passage).
                self._digests[identity] = f"erased:{passage.doc_id}:{passage.index}"
                continue
            key = keys[passage.doc_id]
            digest = EmbeddingTable.address(text, key=key)
            self._digests[identity] = digest
            if tokenize(text):
                texts[digest] = text
                if key is not None:
                    subjects[digest] = document_subject(self.kb.scope, passage.doc_id)
        try:
            embedded = record_embeddings(
                self.kb.loom.log, self._embeddings, self.embedder, texts, subjects=subjects
            )
        except SubjectErasedError:
            return self.index(chosen)  # erased meanwhile by another process: left out now
        table = self._embeddings.table
        with table.engine.connect() as conn:
            self._units.update(
                table.unit_vectors(sorted(texts), conn=conn, width=self.embedder.dimension)
            )
        return embedded

    def _document_keys(self, doc_ids: set[str]) -> dict[str, AESGCM | None]:
        """The data key of each document the scope's vectors are recorded under: None for a
        document stored in clear (no key, or a log without encryption); an erased document
        is left out. One read of the key table for the live keys (another process may have
        destroyed a cached one)."""
        keyring = keyring_for(self.kb.loom.log.engine)
        if keyring is None:
            return dict.fromkeys(doc_ids)
        subjects = {document_subject(self.kb.scope, doc_id): doc_id for doc_id in doc_ids}
        live = set(keyring.live(subjects))
        keyring.forget([subject for subject in subjects if subject not in live])
        keys: dict[str, AESGCM | None] = {}
        for subject, doc_id in subjects.items():
            try:
                keys[doc_id] = keyring.key(subject)
            except ErasedError as error:
                if error.position is None:  # never sealed: recorded in clear as before
                    keys[doc_id] = None
        return keys

    def search(
        self,
        query: str,
        *,
        mode: Mode = "hybrid",
        limit: int = DEFAULT_RETRIEVE_LIMIT,
        as_of: int | None = None,
        filter: MetaFilter | None = None,
    ) -> list[Passage]:
        """Search WITHOUT recording (operators, audits, as-of); a flow uses :meth:`retrieve`."""
        check_arguments(query, mode, limit)
        checked = check_filter(filter)
        if mode == "lexical":
            return self._lexical(query, limit, as_of, checked)
        [vector] = checked_vectors(self.embedder, [query]) if tokenize(query) else [[]]
        return self._ranked(query, vector, mode, limit, as_of, checked)

    def retrieve(
        self,
        query: str,
        *,
        decide: Callable[..., Any],
        mode: Mode = "hybrid",
        limit: int = DEFAULT_RETRIEVE_LIMIT,
        filter: MetaFilter | None = None,
    ) -> Any:
        """Retrieve through ``decide`` (``ctx.decide`` of a plain ``def`` flow): the query's
        vector and the passages are both recorded, so a replay needs no corpus and no model."""
        check_arguments(query, mode, limit)
        checked = check_filter(filter)
        if mode == "lexical":
            return self.kb.retrieve(query, decide=decide, limit=limit, filter=checked)
        if not callable(decide):
            raise InvalidArgumentError(
                f"retrieve needs decide=ctx.decide, not {decide!r}: use search() outside a flow"
            )
        vector: Any = embed_query(self.embedder, query, decide=decide) if tokenize(query) else []
        if inspect.isawaitable(vector):
            if inspect.iscoroutine(vector):
                vector.close()  # never awaited: close it rather than leave a warning
            raise InvalidArgumentError(
                f"a {mode} retrieval records two decisions in turn (the query's vector, then "
                "the passages) and needs a plain def flow's ctx.decide; from an async flow "
                "use mode='lexical' or retrieve in a plain def sub-flow"
            )
        return decide(
            retrieve_key(self.kb.scope),
            lambda: self._ranked(query, vector, mode, limit, None, checked),
            input=retrieval_input(
                self.kb.scope,
                query,
                limit,
                checked,
                mode=mode,
                model=self.embedder.model,
                min_score=self.min_score,
            ),
            type=list[Passage],
            kind="retrieval",
        )

    def _lexical(
        self, query: str, limit: int, as_of: int | None, filter: Filter, *, refreshed: bool = False
    ) -> list[Passage]:
        """BM25's answer; ``refreshed``: the corpus was just brought to the head (a hybrid
        query catches up once)."""
        if as_of is None:
            if refreshed:
                return self.kb._search_lexical(query, limit=limit, filter=filter)
            return self.kb.search(query, limit=limit, filter=filter)
        return self.kb.as_of(as_of).search(query, limit=limit, filter=filter)

    def _ranked(
        self,
        query: str,
        vector: Sequence[float],
        mode: Mode,
        limit: int,
        as_of: int | None,
        filter: Filter,
    ) -> list[Passage]:
        depth = limit if mode == "vector" else max(limit, self.candidates)
        # One catch-up per query, whatever the modes read: both halves see the same corpus.
        head = self.kb.refresh() if as_of is None else None
        by_vector = self._by_vector(vector, depth, as_of, filter, head)
        if mode == "vector":
            return by_vector
        stacked = self._stacked(as_of, head)
        if stacked.terms is None:
            by_terms = self._lexical(query, depth, as_of, filter, refreshed=True)
        else:
            by_terms = _held_lexical(stacked, self._tokenizer(), query, depth, filter)
        return reciprocal_rank_fusion([by_terms, by_vector], identity=_identity, limit=limit)

    def _by_vector(
        self,
        vector: Sequence[float],
        limit: int,
        as_of: int | None,
        filter: Filter,
        head: int | None = None,
    ) -> list[Passage]:
        """The best ``limit`` passages (current, or current at ``as_of``) at or above the floor
        that pass ``filter``: masked before the top ``limit`` are taken, so it never cuts them.
        ``head``: the log position the corpus was just brought to (None: bring it now)."""
        query = unit_vector(np.asarray(vector, dtype=np.float32)) if len(vector) else None
        if query is None:
            return []
        stacked = self._stacked(as_of, head)
        held = stacked.held
        if not held:
            return []
        scores = stacked.matrix @ query
        wanted = scores >= self.min_score
        if filter is not None:
            passing = np.zeros(len(held), bool)
            passing[stacked.metas.rows(filter)] = True
            wanted &= passing
        return [held[n] for n in top_positions(scores, np.flatnonzero(wanted), limit)]

    def _stacked(self, as_of: int | None, head: int | None = None) -> Stacked:
        """The passages of the corpus (current, or at ``as_of``) that have a vector, and their
        unit vectors stacked in the same order; stacked again only when the corpus changed
        (``head``: the log position the corpus was just brought to; None: bring it now)."""
        if as_of is not None:
            # Keyed by the last erasure too: a document erased since leaves the past as well.
            self.kb.refresh()
            key = (as_of, max(self.kb._index.erasures(self.kb.scope).values(), default=0))
            if key not in self._matrices:
                if len(self._matrices) >= MATRICES_KEPT:
                    del self._matrices[next(iter(self._matrices))]
                self._matrices[key] = self._stack(self.kb.as_of(as_of).passages())
            return self._matrices[key]
        if head is None:
            head = self.kb.refresh()
        if self._current is not None:
            checked, stacked = self._current
            if checked == head:
                return stacked
            changes = self.kb.loom.log.notifications(
                after=checked, upto=head, topics=INDEX_TOPICS, page_size=1
            )
            if next(iter(changes), None) is None:
                self._current = (head, stacked)
                return stacked
        self._current = (head, self._stack(self.kb.passages()))
        return self._current[1]

    def _tokenizer(self) -> Tokenizer:
        """The tokenizer of the store that holds this scope's passages (a stemmed scope has a
        store of its own), so the term index ranks with the terms the store would."""
        return self.kb._index.passage_store(self.kb.stemmer).tokenizer

    def _stack(self, passages: list[Passage]) -> Stacked:
        """Stacked by (document id, passage index), not in the order history wrote them: the
        stable sort of the scores then breaks ties as a fresh corpus would. The term index
        covers every passage, with or without a vector: each one counts in BM25's ``N``."""
        self.index(passages)
        held = sorted(
            (p for p in passages if self._digests[_identity(p)] in self._units),
            key=lambda p: (p.doc_id, p.index),
        )
        tokenizer = self._tokenizer()
        if tokenizer.identity != self._counted_by:
            # Counts are of one tokenizer's terms: a scope whose stemmer was read from the log
            # after this retriever counted is counted again, never mixed.
            self._counted_by, self._vocabulary, self._counts = tokenizer.identity, {}, {}
        for passage in passages:
            digest = self._digests[_identity(passage)]
            if digest not in self._counts:
                indexed = tokenizer.tokenize(passage_text(passage))
                self._counts[digest] = term_counts(indexed, self._vocabulary)
        terms = TermIndex.build(
            [format_passage_id(p.doc_id, p.index) for p in passages],
            [self._counts[self._digests[_identity(p)]] for p in passages],
            self._vocabulary,
        )
        if not held:
            return Stacked([], np.empty((0, 0), dtype=np.float32), passages, terms, MetaIndex([]))
        matrix = np.stack([self._units[self._digests[_identity(p)]] for p in held])
        return Stacked(held, matrix, passages, terms, MetaIndex([p.meta for p in held]))


def _held_lexical(
    stacked: Stacked, tokenizer: Tokenizer, query: str, limit: int, filter: Filter
) -> list[Passage]:
    """The store's lexical answer (``kb.search``), ranked by the corpus's term index: the same
    query terms, the same uncapped ranking read by the same ``filtered()``, so the same
    passages in order."""
    assert stacked.terms is not None
    terms, index = tokenizer.query_terms(query), stacked.terms
    return filtered(
        lambda depth: [stacked.passages[row] for row in index.search(terms, depth)],
        limit,
        filter,
    )
