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
passages by CONTENT, so a replay reproduces them after the corpus is gone.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Final, TypeVar
from uuid import UUID

from loom_knowledge.corpus.corpus_index import CorpusIndex
from loom_knowledge.corpus.events import CorpusReconciled, DocumentRemoved, DocumentWritten
from loom_knowledge.corpus.keys import retrieve_key, stream_name
from loom_knowledge.domain.chunking import Chunker, pack_paragraphs
from loom_knowledge.domain.fingerprint import DEFAULT_FINGERPRINTER
from loom_knowledge.domain.reconcile import DEFAULT_MAX_REMOVAL_FRACTION, ensure_writable, reconcile
from loom_knowledge.domain.types import Doc, DocRecord, Passage, SyncPlan, SyncResult
from loom_knowledge.errors import (
    CorpusIdentifierSecretError,
    InvalidArgumentError,
    InvalidOptionError,
    KnowledgeBaseOptionsError,
)
from loom_runtime import (
    Change,
    EventLog,
    Loom,
    catch_up,
    position_at,
    rebuild,
    stream_id,
    text_problem,
)

R = TypeVar("R")
D = TypeVar("D")

DEFAULT_RETRIEVE_LIMIT: Final = 4

logger = logging.getLogger("loom.knowledge")
"""Each sync's summary at INFO (written, unchanged, removed, retained)."""


class CorpusAsOf:
    """One scope as it was at a log position: which documents, at which revisions, and an
    unrecorded search of the passages current then (for audits, not for flows)."""

    def __init__(self, index: CorpusIndex, scope: str, position: int) -> None:
        self.scope = scope
        self.position = position
        self._index = index

    def list_docs(self) -> list[DocRecord]:
        """The documents live at this position, at the revision they had then."""
        return list(self._index.manifest_at(self.scope, self.position).values())

    def passages(self) -> list[Passage]:
        """Every passage current at this position, in index order."""
        return self._index.read_passages(self.scope, as_of=self.position)

    def retrieve(self, query: str, *, limit: int = DEFAULT_RETRIEVE_LIMIT) -> list[Passage]:
        """Search the corpus as it was (NOT recorded: this is for audit)."""
        return self._index.search_passages(self.scope, query, limit=limit, as_of=self.position)


class KnowledgeBase:
    """One scope's corpus: upsert, remove, reconcile, list and (recorded) retrieve."""

    def __init__(
        self,
        loom: Loom,
        scope: str,
        *,
        chunker: Chunker,
        max_removal_fraction: float,
    ) -> None:
        self.loom = loom
        self.scope = scope
        self.chunker = chunker
        self.max_removal_fraction = max_removal_fraction
        self._stream = stream_id(stream_name(scope))

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
        _check_source(source)
        _check_identifier(self.loom, doc.id, path="doc.id")
        _check_identifier(self.loom, source, path="source")

        def decide(manifest: Mapping[str, DocRecord]) -> tuple[list[Change], None]:
            record = manifest.get(doc.id)
            ensure_writable(doc_id=doc.id, record=record, source=source)
            digest = DEFAULT_FINGERPRINTER.digest(doc)
            if record is not None and (record.fingerprint_algorithm, record.fingerprint) == (
                DEFAULT_FINGERPRINTER.algorithm,
                digest,
            ):
                return [], None
            revisions = self._index.last_revisions(self.scope, [doc.id])
            return [self._written(doc, digest, source, revisions.get(doc.id, 0) + 1)], None

        self._write(decide, only=[doc.id])
        return self._index.manifest(self.scope, doc_ids=[doc.id])[doc.id]

    def remove_doc(self, doc_id: str, *, source: str | None = None) -> bool:
        """Remove ``doc_id`` and its passages; False (and nothing written) if it is absent."""
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise InvalidOptionError(f"doc_id must be a non-blank string, not {doc_id!r}")
        _check_text("doc_id", doc_id)
        _check_source(source)

        def decide(manifest: Mapping[str, DocRecord]) -> tuple[list[Change], bool]:
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

        def decide(manifest: Mapping[str, DocRecord]) -> tuple[list[Change], SyncResult]:
            plan = self._plan(manifest, docs, source=source, allow_mass_delete=allow_mass_delete)
            revisions = self._index.last_revisions(self.scope, [w.doc.id for w in plan.writes])
            changes = [
                self._written(w.doc, w.fingerprint, source, revisions.get(w.doc.id, 0) + 1)
                for w in plan.writes
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
        """What :meth:`sync` would do, through the same classifier; writes nothing."""
        _check_docs(docs)
        _check_source(source)
        self.refresh()
        manifest = self._index.manifest(self.scope)
        return self._plan(manifest, docs, source=source, allow_mass_delete=allow_mass_delete).result

    # -- reading ------------------------------------------------------------------------------

    def list_docs(self) -> list[DocRecord]:
        """The live documents, by id."""
        self.refresh()
        return list(self._index.manifest(self.scope).values())

    def passages(self) -> list[Passage]:
        """Every current passage, in index order (documents in ingest order, then by index)."""
        self.refresh()
        return self._index.read_passages(self.scope)

    def retrieve(
        self, query: str, *, decide: Callable[..., R], limit: int = DEFAULT_RETRIEVE_LIMIT
    ) -> R:
        """Search the corpus through ``decide`` (e.g. ``ctx.decide``), so the passages are
        recorded by content under the scope's retrieval key with the query and limit as input.

        Returns what ``decide`` returns: the passages, or an awaitable of them from an async
        flow's ``ctx.decide``. A replay answers from the log with the corpus gone, and a changed
        query or limit is a divergence.
        """
        if not callable(decide):
            raise InvalidArgumentError(
                f"retrieve needs decide=ctx.decide (the flow's context), not {decide!r}: the "
                "passages are recorded so a replay can answer without the corpus; use "
                "kb.search(query) for a search that is not part of an execution"
            )
        # The query is the decision's input, never its key: the log redacts it there (a
        # question quoting a password is retrieved, not refused), and a replay asked another
        # question reports the changed input with a diff (loom_knowledge.corpus.keys).
        return decide(
            retrieve_key(self.scope),
            lambda: self.search(query, limit=limit),
            input={"scope": self.scope, "query": query, "limit": limit},
            type=list[Passage],
            kind="retrieval",
        )

    def search(self, query: str, *, limit: int = DEFAULT_RETRIEVE_LIMIT) -> list[Passage]:
        """Search the current corpus WITHOUT recording it (for operators and audits).

        A flow must use :meth:`retrieve`: an unrecorded search cannot be replayed.
        """
        self.refresh()
        return self._index.search_passages(self.scope, query, limit=limit)

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
        return CorpusAsOf(self._index, self.scope, position)

    def seen_by(self, execution_id: UUID | str) -> CorpusAsOf:
        """The corpus as the execution saw it when it started (its recorded log position)."""
        return self.as_of(self.loom.execution(execution_id).log_position)

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
    ) -> SyncPlan:
        _check_identifier(self.loom, source, path="source")
        for index, doc in enumerate(docs):
            _check_doc(doc)
            _check_identifier(self.loom, doc.id, path=f"docs[{index}].id")
        return reconcile(
            manifest=manifest,
            docs=docs,
            source=source,
            fingerprinter=DEFAULT_FINGERPRINTER,
            max_removal_fraction=self.max_removal_fraction,
            allow_mass_delete=allow_mass_delete,
        )

    def _write(
        self,
        decide: Callable[[Mapping[str, DocRecord]], tuple[list[Change], D]],
        *,
        only: Sequence[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> D:
        """Decide on fresh state, append the changes after the version decided on, and return
        what the decision that was appended says (``decide`` returns the changes and that).

        ``decide`` sees the manifest: all of it, or only the records of ``only`` (a one-document
        write must not read a 10,000-row manifest). When another writer moved the corpus first,
        it decides again on the new state (``append_replanned``, ADR 0019): re-deciding is safe
        because the classifier is a pure function of the documents and the manifest, so
        ownership and the guard are checked against what is really there.

        ``progress`` follows the index catching up on the appended events (see :meth:`sync`).
        """

        def fresh() -> tuple[list[Change], D]:
            self.refresh()  # at least up to the version just read
            return decide(self._index.manifest(self.scope, doc_ids=only))

        what = f"a write to knowledge scope {self.scope!r}"
        positions, outcome = self.loom.log.append_replanned(
            self._stream, lambda _version: fresh(), what=what
        )
        if positions:
            indexed = _indexed(positions, progress)
            self.refresh(progress=indexed)
            indexed(positions[-1], positions[-1])  # indexed already (another reader): done
        return outcome

    def _written(self, doc: Doc, digest: str, source: str | None, revision: int) -> Change:
        return (
            DocumentWritten,
            {
                "scope": self.scope,
                "doc_id": doc.id,
                "revision": revision,
                "fingerprint": digest,
                "fingerprint_algorithm": DEFAULT_FINGERPRINTER.algorithm,
                "source": source,
                "title": doc.title,
                "meta": doc.meta,
                "passages": list(self.chunker(doc)),
            },
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


def corpus_projections(log: EventLog) -> list[CorpusIndex]:
    """The corpus read models of ``log``'s database (the ``loom.projections`` entry point)."""
    return [CorpusIndex(log.engine)]


def drop_corpus(loom: Loom) -> None:
    """Delete every corpus read model of ``loom``'s log: manifest, revisions, passage index.

    Nothing is lost: the next read or write recreates the tables and rebuilds them from the
    log. This is how the headline demo and tests prove the corpus is a projection.
    """
    corpus_index(loom).drop()
    loom.services.discard(_CORPUS_SERVICE)


def open_knowledge_base(
    loom: Loom,
    scope: str,
    *,
    chunker: Chunker | None = None,
    max_removal_fraction: float | None = None,
) -> KnowledgeBase:
    """The corpus ``scope`` of ``loom``'s log: one per scope and Loom, cached.

    Options default to :func:`pack_paragraphs` and a removal guard of
    ``DEFAULT_MAX_REMOVAL_FRACTION``. Opening an open scope again without options returns it;
    WITH options that differ from its own raises :class:`KnowledgeBaseOptionsError` rather
    than ignoring them: two parts of an app chunking one corpus differently would show only
    as worse retrieval.
    """
    if not isinstance(scope, str) or not scope.strip() or scope != scope.strip():
        raise InvalidOptionError(
            f"scope must be a non-blank string without surrounding spaces, not {scope!r}"
        )
    _check_text("scope", scope)
    _check_identifier(loom, scope, path="scope")
    if max_removal_fraction is not None and not 0.0 <= max_removal_fraction <= 1.0:
        raise InvalidOptionError(
            f"max_removal_fraction must be between 0 and 1, got {max_removal_fraction!r}"
        )
    scopes = loom.services.get(_SCOPES_SERVICE, dict[str, KnowledgeBase])
    existing = scopes.get(scope)
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
        )
        return scopes[scope]
    chosen = existing.chunker if chunker is None else chunker
    fraction = (
        existing.max_removal_fraction if max_removal_fraction is None else max_removal_fraction
    )
    if (existing.chunker, existing.max_removal_fraction) != (chosen, fraction):
        raise KnowledgeBaseOptionsError(
            f"knowledge scope {scope!r} is already open with chunker={existing.chunker!r}, "
            f"max_removal_fraction={existing.max_removal_fraction}; it was asked for "
            f"chunker={chosen!r}, max_removal_fraction={fraction}. Open it with the same "
            "options everywhere, or without options to reuse the open one's."
        )
    return existing


def _check_source(source: object) -> None:
    """A source is stored in every event and manifest row it writes: refuse it before it is."""
    if source is not None and not isinstance(source, str):
        raise InvalidOptionError(
            f"source must be a str or None, not {type(source).__name__} {source!r}; it names "
            "the one writer allowed to revise a document (ADR 0005)"
        )
    if source is not None:
        _check_text("source", source)


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


def _check_doc(doc: object) -> None:
    if not isinstance(doc, Doc):
        raise InvalidOptionError(f"expected a loom_knowledge.Doc, not {type(doc).__name__}")
