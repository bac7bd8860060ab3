"""``KnowledgeBase``: a mutable corpus whose every change is an event in the log.

A corpus is written by appending events to its scope's stream (``knowledge:<scope>``) and read
from :class:`~loom_knowledge.corpus.corpus_index.CorpusIndex`, a tracked projection of those events.
Deleting every index table loses nothing: the next read rebuilds it from the log.

Writers follow one pattern: read the stream's version, bring the projection up to date, decide
(with the same pure classifier for ``sync`` and ``plan_sync``), then append every event of the
decision in ONE transaction after that version. If another writer got there first the append is
refused whole and the decision is made again on the new state, so two writers never interleave
half-syncs. Refusals (ownership, the mass-delete guard, bad documents) happen before anything is
appended.

Retrieval is recorded: :meth:`KnowledgeBase.retrieve` requires ``decide`` and stores the
passages by CONTENT, so a replay reproduces them after the corpus is gone. It answers in three
modes: ``lexical`` (BM25, always), ``vector`` and ``hybrid`` (when the scope was opened with an
embedder, through :class:`~loom_knowledge.corpus.hybrid.HybridRetriever`), each with an
optional filter on the documents' meta (:mod:`loom_knowledge.corpus.retrieval`).

A scope may be created with a Snowball stemmer (``open_knowledge_base(..., stemmer="english")``,
the ``stem`` extra): its first write opens its stream with
:class:`~loom_knowledge.corpus.events.TokenizerChosen`, and from then on the log says how it is
indexed, so a rebuild, an as-of view and another process need no configuration (ADR 0046).
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Final, TypeVar
from uuid import UUID

import msgspec

from loom_knowledge.corpus.corpus_index import TABLE_PREFIX, CorpusIndex
from loom_knowledge.corpus.erasure import (
    documents_live,
    prepare_keys,
    refuse_erased,
    seal_written,
)
from loom_knowledge.corpus.events import (
    CorpusReconciled,
    DocumentRemoved,
    DocumentWritten,
    TokenizerChosen,
)
from loom_knowledge.corpus.keys import retrieve_key, stream_name
from loom_knowledge.corpus.retrieval import (
    FilterValue,
    MetaFilter,
    Mode,
    check_arguments,
    check_filter,
    filtered,
    retrieval_input,
)
from loom_knowledge.domain.chunking import Chunker, pack_paragraphs, storable_passages
from loom_knowledge.domain.fingerprint import fingerprinter_for
from loom_knowledge.domain.passage_entry import PassageContent
from loom_knowledge.domain.reconcile import (
    DEFAULT_MAX_REMOVAL_FRACTION,
    check_allow_mass_delete,
    check_max_removal_fraction,
    ensure_writable,
    reconcile,
)
from loom_knowledge.domain.types import (
    MAX_REPEATED_BYTES,
    MAX_SCOPE_BYTES,
    Doc,
    DocRecord,
    Passage,
    SyncPlan,
    SyncResult,
    check_doc,
    encoded_meta,
)
from loom_knowledge.errors import (
    CorpusIdentifierSecretError,
    EmbedderRequiredError,
    ImportedExecutionError,
    InvalidArgumentError,
    InvalidDocumentError,
    InvalidOptionError,
    KnowledgeBaseOptionsError,
    UnrecordedRetrievalError,
)
from loom_memory import (
    EntryNotSerialisableError,
    MemoryEntry,
    StoreConfigurationError,
    Tokenizer,
    check_term_bytes,
    embedding_projections,
)
from loom_runtime import (
    Change,
    EventLog,
    Loom,
    MissingExtraError,
    SecretRefusedError,
    Unopened,
    catch_up,
    current_context,
    position_at,
    rebuild,
    recorder,
    stream_id,
    text_problem,
    write_keyring,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from loom_knowledge.corpus.hybrid import HybridRetriever
    from loom_memory import Embedder
    from loom_runtime import Precondition

R = TypeVar("R")
D = TypeVar("D")
Decided = tuple[list[Change], D]
"""What a write's decision returns: the changes to append, and what the write answers."""
Revisions = Callable[[Sequence[str]], dict[str, int]]
"""The revision each given document is written at next, read in the decision's transaction."""

DEFAULT_RETRIEVE_LIMIT: Final = 4


class _Recorded(Enum):
    RECORDED = "recorded"


RECORDED_STEMMER: Final = _Recorded.RECORDED
"""``open_knowledge_base``'s default ``stemmer``: the one the scope was created with (read from
its stream in the log), or none for a scope that does not exist yet. Distinct from ``None``,
which asks for a plain scope and is refused on a stemmed one."""

logger = logging.getLogger("loom.knowledge")
"""Each sync's summary at INFO (written, unchanged, removed, retained)."""


class CorpusAsOf:
    """One scope as it was at a log position: which documents, at which revisions, and an
    unrecorded search of the passages current then (for audits, not for flows), in every mode
    the knowledge base answers."""

    def __init__(
        self,
        index: CorpusIndex,
        scope: str,
        position: int,
        *,
        vectors: HybridRetriever | None = None,
        stemmer: str | None = None,
    ) -> None:
        self.scope = scope
        self.position = position
        self._index = index
        self._vectors = vectors
        self._stemmer = stemmer

    def list_docs(self) -> list[DocRecord]:
        """The documents live at this position, at the revision they had then."""
        return list(self._index.manifest_at(self.scope, self.position).values())

    def erased(self) -> dict[str, int]:
        """The documents of this scope that were erased (ADR 0055), at any position, with the
        position of the forget event that erased each: their passages show in no view, of
        the past either, so this is where a view says "erased at P" in place of their text."""
        return self._index.erasures(self.scope)

    def passages(self) -> list[Passage]:
        """Every passage current at this position, in index order."""
        return self._index.read_passages(self.scope, as_of=self.position, stemmer=self._stemmer)

    def search(
        self,
        query: str,
        *,
        limit: int = DEFAULT_RETRIEVE_LIMIT,
        mode: Mode = "lexical",
        filter: MetaFilter | None = None,
    ) -> list[Passage]:
        """Search the corpus as it was (NOT recorded: this is for audit), ranking exactly as
        a fresh corpus of the documents current then would, in every mode."""
        check_arguments(query, mode, limit)
        checked = check_filter(filter)
        if mode == "lexical":
            return _lexical(
                self._index,
                self.scope,
                query,
                limit,
                checked,
                as_of=self.position,
                stemmer=self._stemmer,
            )
        vectors = _require_vectors(self._vectors, self.scope, mode)
        return vectors.search(query, mode=mode, limit=limit, filter=checked, as_of=self.position)

    def retrieve(
        self,
        query: str,
        *,
        limit: int = DEFAULT_RETRIEVE_LIMIT,
        mode: Mode = "lexical",
        filter: MetaFilter | None = None,
    ) -> list[Passage]:
        """:meth:`search` under the name an audit reads it by (the view records nothing).

        Refused inside a running flow, outside a decision's ``compute``: there it would read
        as :meth:`KnowledgeBase.retrieve`, the recorded verb, and record nothing: a relevance
        search in a flow is recorded through ``decide``, and the unrecorded one is spelled
        ``search``, where a reader sees it (ADR 0010).
        """
        if current_context() is not None and recorder(f"retrieval:{self.scope}") is not None:
            raise UnrecordedRetrievalError(
                f"an as-of view of knowledge scope {self.scope!r} was asked to retrieve inside "
                "a flow, where it records nothing: record it with "
                "kb.retrieve(query, decide=ctx.decide), or call .search(...) to search the "
                "past corpus unrecorded knowingly"
            )
        return self.search(query, limit=limit, mode=mode, filter=filter)


class KnowledgeBase:
    """One scope's corpus: upsert, remove, reconcile, list and (recorded) retrieve."""

    def __init__(
        self,
        loom: Loom,
        scope: str,
        *,
        chunker: Chunker,
        max_removal_fraction: float,
        embedder: Embedder | None = None,
        min_score: float | None = None,
        stemmer: str | _Recorded | None = RECORDED_STEMMER,
    ) -> None:
        self.loom = loom
        self.scope = scope
        self.chunker = chunker
        self._fingerprinter = fingerprinter_for(chunker)
        """How documents are fingerprinted here: their content, under an algorithm that names
        the chunker, so a scope opened with another one re-cuts its documents."""
        self.max_removal_fraction = max_removal_fraction
        self._stream = stream_id(stream_name(scope))
        self._stemmer_given = stemmer is not RECORDED_STEMMER
        self._stemmer = None if isinstance(stemmer, _Recorded) else _check_stemmer(scope, stemmer)
        """The scope's stemmer: the log's once :attr:`_settled`; until then (a scope not yet
        written) the one its first write will record."""
        self._settled = False
        self._settle()
        self._passed_ids: set[str] = set()
        """Document ids the log's redactor passed (``_check_doc_id``)."""
        self._vectors: HybridRetriever | None = None
        if embedder is not None:
            # Imported here: numpy (the vector extra) is needed only by a vector scope.
            from loom_knowledge.corpus.hybrid import HybridRetriever

            if min_score is None:
                raise InvalidOptionError(
                    f"knowledge scope {scope!r} was given an embedder without min_score: pass "
                    "the model's cosine floor (e.g. 0.1 for HashingEmbedder), below which a "
                    "passage is not a hit; without one an unrelated question returns passages"
                )
            self._vectors = HybridRetriever(self, embedder=embedder, min_score=min_score)
        elif min_score is not None:
            raise InvalidOptionError(
                f"knowledge scope {scope!r} was given min_score={min_score!r} without an "
                "embedder: the floor is the embedder's; pass both, or neither"
            )

    @property
    def embedder(self) -> Embedder | None:
        """The model the vector and hybrid modes embed with (None: lexical only)."""
        return None if self._vectors is None else self._vectors.embedder

    @property
    def min_score(self) -> float | None:
        """The embedder's cosine floor: a passage scoring below it is not a vector hit."""
        return None if self._vectors is None else self._vectors.min_score

    @property
    def stemmer(self) -> str | None:
        """The Snowball stemmer the scope's passages are indexed and searched with (None:
        plain terms), as its stream in the log records it."""
        if not self._settled:
            self._settle()
        return self._stemmer

    @property
    def fingerprint_algorithm(self) -> str:
        """What this knowledge base records beside each document's fingerprint: the hash and,
        for a chunker with an identity, the chunker. A document recorded under another is
        written again, re-cut, at its next sync (ADR 0010, amended "rechunk")."""
        return self._fingerprinter.algorithm

    def _settle(self) -> None:
        """Read the scope's stemmer from the log if the scope exists, refusing a different one
        asked for explicitly; a scope not written yet stays unsettled (another process may
        create it first)."""
        first = next(iter(self.loom.log.events(self._stream, limit=1)), None)
        if first is None:
            return
        recorded = first.stemmer if isinstance(first, TokenizerChosen) else None
        if self._stemmer_given and recorded != self._stemmer:
            raise _stemmer_refused(self.scope, recorded=recorded, asked=self._stemmer)
        self._stemmer = recorded
        self._settled = True

    @property
    def _index(self) -> CorpusIndex:
        """The corpus read models, created on first use: a replay that only calls
        :meth:`retrieve` never touches (or re-creates) a table."""
        return corpus_index(self.loom)

    # -- writing ------------------------------------------------------------------------------

    def put_doc(self, doc: Doc, *, source: str | None = None) -> DocRecord:
        """Upsert ``doc``: a changed document becomes a new revision whose passages replace the
        old ones (they stop retrieving; a shorter revision leaves no orphans). An unchanged one
        writes nothing. A document another source owns is refused (SourceConflictError)."""
        _check_doc(doc)
        check_doc(doc)  # again: see _plan
        _check_source(source)
        self._check_doc_id(doc.id, path="doc.id")
        _check_identifier(self.loom, source, path="source")

        def decide(
            manifest: Mapping[str, DocRecord], next_revisions: Revisions
        ) -> Decided[DocRecord]:
            record = manifest.get(doc.id)
            ensure_writable(doc_id=doc.id, record=record, source=source)
            digest = self._fingerprinter.digest(doc)
            if record is not None and (record.fingerprint_algorithm, record.fingerprint) == (
                self._fingerprinter.algorithm,
                digest,
            ):
                return [], record
            revision = next_revisions([doc.id])[doc.id]
            change = self._written(doc, digest, source, revision, self._passages(doc))
            return [change], _written_record(change)

        # The record the appended event writes, as the projection will file it: read back
        # from the manifest it would cost a read transaction per document.
        return self._write(decide, only=[doc.id])

    def remove_doc(self, doc_id: str, *, source: str | None = None) -> bool:
        """Remove ``doc_id`` and its passages; False (and nothing written) if it is absent."""
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise InvalidOptionError(f"doc_id must be a non-blank string, not {doc_id!r}")
        _check_text("doc_id", doc_id)
        _check_source(source)

        def decide(manifest: Mapping[str, DocRecord], _: Revisions) -> Decided[bool]:
            record = manifest.get(doc_id)
            if record is None:
                return [], False
            ensure_writable(doc_id=doc_id, record=record, source=source)
            return [self._removed(record)], True

        return self._write(decide, only=[doc_id])

    def sync(
        self,
        docs: Sequence[Doc],
        *,
        source: str | None = None,
        allow_mass_delete: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> SyncResult:
        """Reconcile ``source``'s documents against ``docs``, the COMPLETE set (destructive).

        Writes what changed, leaves what did not, removes what the source dropped, and reports
        other sources' documents as ``retained``. One event records the reconcile; an
        unchanged source appends exactly that one event and writes nothing else.

        Indexing the written passages is most of a large sync's time, so ``progress`` (a bar's
        callback) is called as it goes with (events of this sync indexed, events it appended):
        one per document written or removed, plus the reconcile's; rising, ending at the total.
        """
        _check_docs(docs)
        _check_source(source)
        check_allow_mass_delete(allow_mass_delete)

        def decide(
            manifest: Mapping[str, DocRecord], next_revisions: Revisions
        ) -> Decided[SyncResult]:
            plan, cut = self._plan(
                manifest, docs, source=source, allow_mass_delete=allow_mass_delete
            )
            self._refuse_secrets(plan, cut)
            prepare_keys(self.loom, self.scope, [w.doc.id for w in plan.writes])
            revisions = next_revisions([w.doc.id for w in plan.writes])
            changes = [
                self._written(w.doc, w.fingerprint, source, revisions[w.doc.id], passages)
                for w, passages in zip(plan.writes, cut, strict=True)
            ]
            changes += [self._removed(manifest[doc_id]) for doc_id in plan.removed]
            result = plan.result
            changes.append(
                (
                    CorpusReconciled,
                    {
                        "scope": self.scope,
                        "source": source,
                        "written": list(result.written),
                        "unchanged": list(result.unchanged),
                        "removed": list(result.removed),
                        "retained": list(result.retained),
                    },
                )
            )
            return changes, result

        synced = self._write(decide, progress=progress)
        logger.info(
            "knowledge scope %r, source %r synced: %d written, %d unchanged, %d removed, "
            "%d retained",
            self.scope,
            source,
            len(synced.written),
            len(synced.unchanged),
            len(synced.removed),
            len(synced.retained),
        )
        return synced

    def plan_sync(
        self, docs: Sequence[Doc], *, source: str | None = None, allow_mass_delete: bool = False
    ) -> SyncResult:
        """What :meth:`sync` would do, through the same classifier; writes nothing. A plan that
        would write an erased document is refused as the sync would be
        (:class:`~loom_runtime.SubjectErasedError`)."""
        _check_docs(docs)
        _check_source(source)
        check_allow_mass_delete(allow_mass_delete)
        self.refresh()
        manifest = self._index.manifest(self.scope)
        plan, cut = self._plan(manifest, docs, source=source, allow_mass_delete=allow_mass_delete)
        written = [write.doc.id for write in plan.writes]
        refuse_erased(self.loom, self.scope, written, self._index.erasures(self.scope))
        self._refuse_secrets(plan, cut)
        return plan.result

    def _refuse_secrets(self, plan: SyncPlan, cut: list[list[str]]) -> None:
        """Raise :class:`~loom_runtime.SecretRefusedError` for a document the plan writes
        whose title, meta or passages hold what the log's redactor refuses: the append would
        refuse the whole sync, and a dry run had planned it as written. Checked by the plan
        and the sync alike, before anything is appended, so both name the document (the
        append's own refusal names only the event's field, which in a folder of thousands
        does not say which file to fix). A redacting redactor stores it with a marker, but
        refuses meta whose keys would be one key once redacted (``RedactedKeysCollideError``,
        in any mode), so the meta alone is checked then: a title or passages cannot collide,
        and redacting them twice would cost every sync (ADR 0012, amended "colliding meta").
        Checked without counting (:meth:`~loom_runtime.Redactor.check`): the write counts."""
        redactor = self.loom.log.redactor
        if redactor is None:
            return
        refusing = redactor.mode == "refuse"
        for write, passages in zip(plan.writes, cut, strict=True):
            fields = (("title", write.doc.title), ("meta", write.doc.meta), ("passages", passages))
            for name, value in fields:
                if value is None or (name != "meta" and not refusing):
                    continue
                try:
                    redactor.check(value, path=f"{DocumentWritten.TOPIC}.{name}")
                except SecretRefusedError as refused:
                    where = f"{refused.path} of document {write.doc.id!r}"
                    raise type(refused)(pattern=refused.pattern, path=where) from None

    # -- reading ------------------------------------------------------------------------------

    def list_docs(self) -> list[DocRecord]:
        """The live documents, by id."""
        self.refresh()
        return list(self._index.manifest(self.scope).values())

    def passages(self) -> list[Passage]:
        """Every current passage, in index order (documents in ingest order, then by index)."""
        self.refresh()
        return self._index.read_passages(self.scope, stemmer=self.stemmer)

    def retrieve(
        self,
        query: str,
        *,
        decide: Callable[..., R],
        limit: int = DEFAULT_RETRIEVE_LIMIT,
        mode: Mode = "lexical",
        filter: MetaFilter | None = None,
    ) -> R:
        """Search the corpus through ``decide`` (e.g. ``ctx.decide``), so the passages are
        recorded by content under the scope's retrieval key with the query and limit as input.

        ``mode`` is ``"lexical"`` (BM25), ``"vector"`` (cosine over the embedder's vectors,
        above its floor) or ``"hybrid"`` (both fused by reciprocal rank); the last two need a
        scope opened with ``embedder=`` and ``min_score=`` (:class:`EmbedderRequiredError`
        otherwise) and a plain ``def`` flow, since the query's vector is a decision too. The
        default stays lexical whatever the scope was opened with: adding an embedder must not
        change what existing flows record. ``filter`` keeps only passages whose document's
        meta matches (``{"team": "sre"}``, ``{"team": ["sre", "dba"]}``; the grammar is in
        :mod:`loom_knowledge.corpus.retrieval`) and still returns ``limit`` of them when that
        many match.

        Returns what ``decide`` returns: the passages, or an awaitable of them from an async
        flow's ``ctx.decide``. A replay answers from the log with the corpus and the model
        gone, and a changed query, limit, mode or filter is a divergence.
        """
        if not callable(decide):
            raise InvalidArgumentError(
                f"retrieve needs decide=ctx.decide (the flow's context), not {decide!r}: the "
                "passages are recorded so a replay can answer without the corpus; use "
                "kb.search(query) for a search that is not part of an execution"
            )
        check_arguments(query, mode, limit)
        checked = check_filter(filter)
        if mode != "lexical":
            vectors = _require_vectors(self._vectors, self.scope, mode)
            return vectors.retrieve(  # type: ignore[no-any-return]
                query, decide=decide, mode=mode, limit=limit, filter=checked
            )
        # The query is the decision's input, never its key: the log redacts it there (a
        # question quoting a password is retrieved, not refused), and a replay asked another
        # question reports the changed input with a diff (loom_knowledge.corpus.keys).
        return decide(
            retrieve_key(self.scope),
            lambda: self.search(query, limit=limit, filter=checked),
            input=retrieval_input(self.scope, query, limit, checked),
            type=list[Passage],
            kind="retrieval",
        )

    def search(
        self,
        query: str,
        *,
        limit: int = DEFAULT_RETRIEVE_LIMIT,
        mode: Mode = "lexical",
        filter: MetaFilter | None = None,
    ) -> list[Passage]:
        """Search the current corpus WITHOUT recording it (for operators and audits), in any
        mode and with any filter :meth:`retrieve` takes; a vector mode embeds the query live.

        A flow must use :meth:`retrieve`: an unrecorded search cannot be replayed.
        """
        check_arguments(query, mode, limit)
        checked = check_filter(filter)
        if mode != "lexical":
            vectors = _require_vectors(self._vectors, self.scope, mode)
            return vectors.search(query, mode=mode, limit=limit, filter=checked)
        self.refresh()
        return _lexical(self._index, self.scope, query, limit, checked, stemmer=self.stemmer)

    def _search_lexical(
        self, query: str, *, limit: int, filter: dict[str, list[FilterValue]] | None
    ) -> list[Passage]:
        """:meth:`search` in lexical mode, without catching up first: for a caller that has
        just called :meth:`refresh` (hybrid search), so one query catches up once.

        ``filter`` is a checked one (:func:`~loom_knowledge.corpus.retrieval.check_filter`).
        """
        check_arguments(query, "lexical", limit)
        return _lexical(self._index, self.scope, query, limit, filter, stemmer=self.stemmer)

    def as_of(self, when: int | datetime) -> CorpusAsOf:
        """A read-only view of this corpus as it was at log position (or moment) ``when``.

        History is a filter over the same index, so the view ranks with the same scorer as a
        current search and costs the same.
        """
        self.refresh()
        head = self.loom.log.position
        position = position_at(self.loom.log, when) if isinstance(when, datetime) else when
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= head:
            raise InvalidOptionError(
                f"as_of needs a log position from 0 to {head} or an aware datetime, not {when!r}"
            )
        return CorpusAsOf(
            self._index, self.scope, position, vectors=self._vectors, stemmer=self.stemmer
        )

    def seen_by(self, execution_id: UUID | str) -> CorpusAsOf:
        """The corpus as the execution saw it when it started (its recorded log position).

        A fork starts where it was forked: the retrievals it inherited were made by its
        parent, earlier, so what they saw is ``seen_by(parent_id)`` (the audit says so).

        An execution imported from a bundle is refused (:class:`ImportedExecutionError`): its
        recorded position is the exporting log's, and this log's corpus there is another."""
        execution = self.loom.execution(execution_id)
        imported = self.loom.imported(execution.id)
        if imported is not None:
            raise ImportedExecutionError(
                execution_id=str(execution.id),
                position=execution.log_position,
                exported_at=imported.exported_at,
            )
        return self.as_of(execution.log_position)

    def refresh(self, *, progress: Callable[[int, int], None] | None = None) -> int:
        """Bring the manifest and passage index up to the head of the log; returns the position.

        ``progress`` is called after each page applied with (log position reached, head).
        """
        return catch_up(self.loom.log, self._index, progress=progress)

    def rebuild(self) -> int:
        """Drop the corpus read models (every scope) and rebuild them from the log."""
        return rebuild(self.loom.log, self._index)

    # -- internals ----------------------------------------------------------------------------

    def _plan(
        self,
        manifest: Mapping[str, DocRecord],
        docs: Sequence[Doc],
        *,
        source: str | None,
        allow_mass_delete: bool,
    ) -> tuple[SyncPlan, list[list[str]]]:
        """The plan, and the checked passages (:meth:`_passages`) of each document it writes."""
        _check_identifier(self.loom, source, path="source")
        for index, doc in enumerate(docs):
            _check_doc(doc)
            self._check_doc_id(doc.id, path=f"docs[{index}].id")
        plan = reconcile(
            manifest=manifest,
            docs=docs,
            source=source,
            fingerprinter=self._fingerprinter,
            max_removal_fraction=self.max_removal_fraction,
            allow_mass_delete=allow_mass_delete,
        )
        # A document the plan writes is checked again, not trusted to be as it was made: its
        # meta is a dict that may have changed since, and an event the corpus index cannot
        # apply, once appended, stops every scope of the log for good (ADR 0010, "corpus
        # review"). Only those: an unchanged sync of 10,000 documents checks none. Their
        # passages are cut and checked here, once, so a dry run refuses what its apply would.
        cut = []
        for write in plan.writes:
            check_doc(write.doc)
            cut.append(self._passages(write.doc))
        return plan, cut

    def _passages(self, doc: Doc) -> list[str]:
        """``doc``'s passages by the scope's chunker, checked as a write stores them."""
        return check_passage_terms(
            doc, storable_passages(doc, self.chunker(doc)), stemmer=self._stemmer
        )

    def _check_doc_id(self, doc_id: str, *, path: str) -> None:
        """Refuse a document id the log's redactor takes for a secret, checking each id once.

        The check is a pure function of the id under the log's one redactor, and an unchanged
        sync of 10,000 documents spent about half its time repeating it for ids it had passed.
        """
        if doc_id not in self._passed_ids:
            _check_identifier(self.loom, doc_id, path=path)
            self._passed_ids.add(doc_id)

    def _write(
        self,
        decide: Callable[[Mapping[str, DocRecord], Revisions], Decided[D]],
        *,
        only: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> D:
        """Decide on fresh state, append the changes after the version decided on, and return
        what the decision that was appended says (``decide`` returns the changes and that).

        ``decide`` sees the manifest: all of it, or only the records of ``only`` (a one-document
        write must not read a 10,000-row manifest), and a function giving the revision each
        document it writes is written at. Both read in ONE read transaction: a ``put_doc`` of
        a new document asked the revision history in a transaction of its own, one more
        begin and commit per document. When another writer moved the corpus first,
        it decides again on the new state (``append_replanned``, ADR 0019): re-deciding is safe
        because the classifier is a pure function of the documents and the manifest, so
        ownership and the guard are checked against what is really there.

        ``progress`` follows the index catching up on the appended events (see :meth:`sync`).
        """

        def fresh(version: int) -> Decided[D]:
            with self._caught_up(self.loom.log.position) as conn:  # the version just read
                manifest = self._index.manifest(self.scope, doc_ids=only, conn=conn)
                changes, outcome = decide(
                    manifest, lambda doc_ids: self._next_revisions(manifest, doc_ids, conn)
                )
            if version == 0 and changes and self._stemmer is not None:
                # The scope's first write: its choice goes first, in the same append.
                chosen = {"scope": self.scope, "stemmer": self._stemmer}
                changes = [(TokenizerChosen, chosen), *changes]
            elif version > 0 and not self._settled:
                self._settle()  # created since this opened: by the log's choice, or refused
            return changes, outcome

        what = f"a write to knowledge scope {self.scope!r}"
        # Without the master key, an encrypted log refuses the batch's append: its text would
        # be stored in clear (ADR 0049, "Writes"). With it, the append reads the keys of the
        # documents it seals, so one erased meanwhile refuses it (ADR 0055, amended "race").
        keyring, guard = write_keyring(self.loom.log, what)

        def precondition(changes: Sequence[Change]) -> Precondition | None:
            if keyring is None:
                return guard
            written = [fields["doc_id"] for cls, fields in changes if cls is DocumentWritten]
            return documents_live(self.loom, self.scope, written)

        positions, outcome = self.loom.log.append_replanned(
            self._stream, fresh, what=what, precondition=precondition
        )
        if positions:
            indexed = _indexed(positions, progress)
            # Up to this write's last event, not the head: that is what the caller must see
            # indexed, and it spares reading the head (later events wait for the next read).
            catch_up(self.loom.log, self._index, upto=positions[-1], progress=indexed)
            indexed(positions[-1], positions[-1])  # indexed already (another reader): done
        return outcome

    @contextmanager
    def _caught_up(self, head: int) -> Iterator[Connection]:
        """A read connection whose snapshot has the index at ``head`` or past it.

        The position is read in that snapshot, so an index found caught up (a write's usual
        case) costs no read transaction before the decision's own; one found behind is caught
        up, and the position read again in a new snapshot."""
        while True:
            with self._index.reading() as conn:
                if self._index.position(conn=conn) >= head:
                    yield conn
                    return
            catch_up(self.loom.log, self._index, upto=head)

    def _next_revisions(
        self, manifest: Mapping[str, DocRecord], doc_ids: Sequence[str], conn: Connection
    ) -> dict[str, int]:
        """The revision each of ``doc_ids`` is written at next: one above the highest it ever
        had. A live document's highest is its manifest revision (each write is one above the
        last, and removing writes none), so only documents absent from the manifest (new, or
        removed and re-created) ask the revision history."""
        unknown = [doc_id for doc_id in doc_ids if doc_id not in manifest]
        history = self._index.last_revisions(self.scope, unknown, conn=conn) if unknown else {}
        return {
            doc_id: (manifest[doc_id].revision if doc_id in manifest else history.get(doc_id, 0))
            + 1
            for doc_id in doc_ids
        }

    def _written(
        self, doc: Doc, digest: str, source: str | None, revision: int, passages: list[str]
    ) -> Change:
        # Sealed under the document's key when the log is encrypted (ADR 0055).
        return (
            DocumentWritten,
            seal_written(
                self.loom,
                {
                    "scope": self.scope,
                    "doc_id": doc.id,
                    "revision": revision,
                    "fingerprint": digest,
                    "fingerprint_algorithm": self._fingerprinter.algorithm,
                    "source": source,
                    "title": doc.title,
                    "meta": doc.meta,
                    "passages": passages,
                },
            ),
        )

    def _removed(self, record: DocRecord) -> Change:
        return (
            DocumentRemoved,
            {
                "scope": self.scope,
                "doc_id": record.id,
                "revision": record.revision,
                "source": record.source,
            },
        )


def _written_record(change: Change) -> DocRecord:
    """The manifest record a ``DocumentWritten`` change files (``CorpusIndex._written``)."""
    _, fields = change
    return DocRecord(
        id=fields["doc_id"],
        revision=fields["revision"],
        fingerprint=fields["fingerprint"],
        fingerprint_algorithm=fields["fingerprint_algorithm"],
        passage_count=len(fields["passages"]),
        source=fields["source"],
    )


def _lexical(
    index: CorpusIndex,
    scope: str,
    query: str,
    limit: int,
    filter: dict[str, list[FilterValue]] | None,
    *,
    as_of: int | None = None,
    stemmer: str | None,
) -> list[Passage]:
    """The best ``limit`` passages by BM25 (current, or current at ``as_of``) that pass
    ``filter``: the one lexical search of the current corpus and of every as-of view, in the
    terms of the scope's ``stemmer``."""
    return filtered(
        lambda depth: index.search_passages(
            scope, query, limit=depth, as_of=as_of, stemmer=stemmer
        ),
        limit,
        filter,
    )


def _require_vectors(vectors: HybridRetriever | None, scope: str, mode: str) -> HybridRetriever:
    if vectors is None:
        raise EmbedderRequiredError(scope=scope, mode=mode)
    return vectors


def _indexed(
    positions: Sequence[int], progress: Callable[[int, int], None] | None
) -> Callable[[int, int], None]:
    """A catch-up's (log position reached, head) as ``progress(appended events indexed, all
    of them)``: other writers' events in between do not count, and each count is reported
    once, so it only rises."""
    reported = 0

    def reached(position: int, _head: int) -> None:
        nonlocal reported
        done = bisect_right(positions, position)
        if progress is not None and done > reported:
            reported = done
            progress(done, len(positions))

    return reached


_CORPUS_SERVICE: Final = "loom_knowledge.corpus.corpus_index"
_SCOPES_SERVICE: Final = "loom_knowledge.open_scopes"


def known_scopes(loom: Loom) -> list[str]:
    """Every scope of ``loom``'s log that ever held a document, sorted.

    A scope exists only through its documents, so a misspelt one reads as an empty corpus;
    a tool that is handed a scope name checks it here to say so instead.
    """
    index = corpus_index(loom)
    catch_up(loom.log, index)
    return index.scopes()


def corpus_index(loom: Loom) -> CorpusIndex:
    """The corpus read models of ``loom`` (one per Loom, created on first use, a service of
    the Loom so it goes with it)."""
    return loom.services.get(_CORPUS_SERVICE, lambda: CorpusIndex(loom.log.engine))


def corpus_projections(log: EventLog, *, unopened: Unopened | None = None) -> list[CorpusIndex]:
    """The corpus read models of ``log``'s database (the ``loom.projections`` entry point).

    One index holds every scope, so there is nothing to skip: ``unopened`` (the entry
    points' signature) is not told here, and an index that cannot be opened raises, which
    :func:`~loom_runtime.projection.registered_projections` reports by the entry point's name."""
    del unopened
    return [CorpusIndex(log.engine)]


def drop_corpus(loom: Loom) -> None:
    """Delete every corpus read model of ``loom``'s log: manifest, revisions, passage index,
    and the passages' recorded vectors (every embedding model's).

    Nothing is lost: the next read or write recreates the tables and rebuilds them from the
    log, vectors included, without calling a model. This is how the headline demo and tests
    prove the corpus is a projection.
    """
    corpus_index(loom).drop()
    loom.services.discard(_CORPUS_SERVICE)
    # The vectors' table stays (a knowledge base open on it holds it); its rows and position go.
    for projection in embedding_projections(loom.log):
        if projection.table.table_prefix == TABLE_PREFIX:
            projection.reset()


def open_knowledge_base(
    loom: Loom,
    scope: str,
    *,
    chunker: Chunker | None = None,
    max_removal_fraction: float | None = None,
    embedder: Embedder | None = None,
    min_score: float | None = None,
    stemmer: str | _Recorded | None = RECORDED_STEMMER,
) -> KnowledgeBase:
    """The corpus ``scope`` of ``loom``'s log: one per scope and Loom, cached.

    Options default to :func:`pack_paragraphs` and a removal guard of
    ``DEFAULT_MAX_REMOVAL_FRACTION``. ``embedder`` (any :class:`~loom_memory.Embedder`) with
    its cosine floor ``min_score`` lets the scope answer ``mode="vector"`` and
    ``mode="hybrid"`` too; they come together because the floor belongs to the model. Opening
    an open scope again without options returns it; WITH options that differ from its own
    raises :class:`KnowledgeBaseOptionsError` rather than ignoring them: two parts of an app
    chunking one corpus differently, or embedding it with two models, would show only as worse
    retrieval. Embedders are compared by model identity and dimension (the vector space).

    ``stemmer`` (a Snowball algorithm: ``"english"``, ``"french"``, ...; the ``stem`` extra)
    indexes and searches the scope by stems, so "indexes" finds "indexing". It is chosen once,
    by the scope's first write, which records it in the log; not passed, the scope's recorded
    choice is used (plain for a scope not written yet), so readers need not repeat it. Asking
    an existing scope for another (``None`` included, on a stemmed scope) raises
    :class:`KnowledgeBaseOptionsError`: a different tokenizer is a different index.
    """
    if not isinstance(scope, str) or not scope.strip() or scope != scope.strip():
        raise InvalidOptionError(
            f"scope must be a non-blank string without surrounding spaces, not {scope!r}"
        )
    _check_text("scope", scope)
    if len(scope) * 4 > MAX_SCOPE_BYTES and (size := len(scope.encode())) > MAX_SCOPE_BYTES:
        raise InvalidOptionError(
            f"scope is {size:,} bytes of UTF-8, over {MAX_SCOPE_BYTES:,} bytes "
            "(loom_knowledge.domain.types.MAX_SCOPE_BYTES)"
        )
    _check_identifier(loom, scope, path="scope")
    if max_removal_fraction is not None:
        max_removal_fraction = check_max_removal_fraction(max_removal_fraction)
    scopes = loom.services.get(_SCOPES_SERVICE, dict[str, KnowledgeBase])
    existing = scopes.get(scope)
    if existing is not None and stemmer is not RECORDED_STEMMER and stemmer != existing.stemmer:
        raise _stemmer_refused(scope, recorded=existing.stemmer, asked=stemmer)
    if existing is None:
        scopes[scope] = KnowledgeBase(
            loom,
            scope,
            chunker=chunker if chunker is not None else pack_paragraphs(),
            max_removal_fraction=(
                DEFAULT_MAX_REMOVAL_FRACTION
                if max_removal_fraction is None
                else max_removal_fraction
            ),
            embedder=embedder,
            min_score=min_score,
            stemmer=stemmer,
        )
        return scopes[scope]
    chosen = existing.chunker if chunker is None else chunker
    fraction = (
        existing.max_removal_fraction if max_removal_fraction is None else max_removal_fraction
    )
    space = _space(existing.embedder) if embedder is None else _space(embedder)
    floor = existing.min_score if embedder is None and min_score is None else min_score
    have = (
        existing.chunker,
        existing.max_removal_fraction,
        _space(existing.embedder),
        existing.min_score,
    )
    if have != (chosen, fraction, space, floor):
        raise KnowledgeBaseOptionsError(
            f"knowledge scope {scope!r} is already open with chunker={existing.chunker!r}, "
            f"max_removal_fraction={existing.max_removal_fraction}, embedder="
            f"{_space(existing.embedder)}, min_score={existing.min_score}; it was asked for "
            f"chunker={chosen!r}, max_removal_fraction={fraction}, embedder={space}, "
            f"min_score={floor}. Open it with the same options everywhere, or without options "
            "to reuse the open one's."
        )
    return existing


def _check_stemmer(scope: str, stemmer: object) -> str | None:
    """``stemmer`` if a tokenizer can stem with it: a Snowball algorithm's name, or None."""
    if stemmer is None:
        return None
    if not isinstance(stemmer, str):
        raise InvalidOptionError(
            f"stemmer must be a Snowball algorithm's name (e.g. 'english') or None, not "
            f"{type(stemmer).__name__} {stemmer!r}"
        )
    try:
        Tokenizer(stemmer)
    except StoreConfigurationError as exc:
        if isinstance(exc.__cause__, ImportError):
            raise MissingExtraError(
                extra="stem",
                missing="snowballstemmer",
                needed_by=f"knowledge scope {scope!r} with stemmer={stemmer!r}",
            ) from exc
        raise InvalidOptionError(f"knowledge scope {scope!r}: {exc}") from exc
    return stemmer


def _stemmer_refused(
    scope: str, *, recorded: str | None, asked: object
) -> KnowledgeBaseOptionsError:
    """The refusal of a stemmer other than the one ``scope`` was created with."""
    return KnowledgeBaseOptionsError(
        f"knowledge scope {scope!r} was created with stemmer={recorded!r} (its first write "
        f"recorded it in the log); it was asked for stemmer={asked!r}. A scope's stemmer is "
        "chosen once: open it without stemmer= to use its own, or sync the documents into a "
        "new scope to index them another way"
    )


def _space(embedder: Embedder | None) -> tuple[str, int] | None:
    """An embedder's vector space: its model identity and dimension."""
    return None if embedder is None else (embedder.model, embedder.dimension)


def _check_source(source: object) -> None:
    """A source is stored in every event and manifest row it writes: refuse it before it is."""
    if source is not None and not isinstance(source, str):
        raise InvalidOptionError(
            f"source must be a str or None, not {type(source).__name__} {source!r}; it names "
            "the one writer allowed to revise a document (ADR 0005)"
        )
    if source is not None:
        _check_text("source", source)
        if not source.strip():
            raise InvalidOptionError(
                f"source must name a writer, not {source!r}: it names the one writer allowed "
                "to revise a document (ADR 0005), and a blank one reads as no source at all; "
                "leave it out (None) for none"
            )


def _check_docs(docs: object) -> None:
    """``docs`` is the COMPLETE set a reconcile compares against: refuse what is not a list.

    A one-shot iterator is refused too: it is read once to check the documents, so the
    reconcile (or its retry after a conflict) would see an empty set and remove everything.
    """
    if not isinstance(docs, Sequence) or isinstance(docs, str | bytes):
        raise InvalidArgumentError(
            f"docs must be a list of loom_knowledge.Doc (the complete set of the source's "
            f"documents), not {type(docs).__name__} {docs!r:.80}; wrap an iterator in list(), "
            "and to remove every document pass [] with allow_mass_delete=True"
        )


def _check_identifier(loom: Loom, value: object, *, path: str) -> None:
    """Refuse a scope, doc id or source the log's redactor takes for a secret (ADR 0012).

    Identifiers are stored as given, never redacted: a rewritten doc id names another
    document, and its next write re-issues that one's revision 1.
    """
    if loom.log.redactor is not None:
        loom.log.redactor.check_identifier(value, path=path, error=CorpusIdentifierSecretError)


def _check_text(name: str, value: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise InvalidOptionError(f"{name} {value!r} {problem}; pass valid text without NUL")


def check_passage_terms(doc: Doc, passages: list[str], *, stemmer: str | None) -> list[str]:
    """``passages`` of ``doc``, once its title and meta, repeated in every passage, are within
    :data:`~loom_knowledge.domain.types.MAX_REPEATED_BYTES`, and each entry's search terms (its
    text, title and meta, by the scope's tokenizer) are known to fit a PostgreSQL search
    vector; else :class:`InvalidDocumentError`, on every backend alike, before the event is
    appended (the index refusing it afterwards would stop every scope of the log for good).
    Only an entry that could be that large is tokenized (:func:`~loom_memory.check_term_bytes`)."""
    _check_repeated(doc, len(passages))
    tokenizer = Tokenizer(stemmer)
    for index, text in enumerate(passages):
        content = PassageContent(text=text, title=doc.title, meta=doc.meta)
        entry = MemoryEntry(content=msgspec.to_builtins(content))
        try:
            check_term_bytes(tokenizer, [entry], [msgspec.json.encode(content)])
        except EntryNotSerialisableError as refused:
            raise InvalidDocumentError(
                doc_id=doc.id,
                field=f"passages[{index}]",
                reason=(
                    "has more search terms, with the title and meta every passage repeats, "
                    "than a PostgreSQL search vector holds (loom_memory.text.MAX_TERM_BYTES): "
                    "shorten the title or meta, or cut smaller passages"
                ),
            ) from refused
    return passages


def _check_repeated(doc: Doc, passages: int) -> None:
    """The title and meta each of ``doc``'s ``passages`` repeats, within their bound."""
    title = len(doc.title.encode()) if doc.title else 0
    meta = len(encoded_meta(doc)) if doc.meta else 0
    if (title + meta) * passages > MAX_REPEATED_BYTES:
        raise InvalidDocumentError(
            doc_id=doc.id,
            field="title" if title >= meta else "meta",
            reason=f"is too large to repeat in each passage: title {title:,} and meta {meta:,} "
            f"bytes (JSON) x {passages:,} passage(s) = {(title + meta) * passages:,} bytes, over "
            f"{MAX_REPEATED_BYTES:,} (MAX_REPEATED_BYTES); shorten them, or cut fewer passages",
        )


def _check_doc(doc: object) -> None:
    if not isinstance(doc, Doc):
        raise InvalidOptionError(f"expected a loom_knowledge.Doc, not {type(doc).__name__}")
