"""The corpus read models: the manifest and the passage index, one tracked projection.

Both are rebuilt from the corpus events, and both are written in the same transaction as the
projection's tracking position (ADR 0010). A document's row, its revision history, its old
passages' end and its new passages' insertion commit together with the position, or none of
them does and the page is applied again on the next catch-up. So there is no crash window in
which a document has no row, and no row can claim a revision whose passages never landed:
neither a pruned append-only manifest nor a two-phase ``committed`` flag is needed.

Tables (``loom_kb_`` prefix): ``documents`` (the live manifest), ``revisions`` (every revision
with the positions it was current between, for audit and as-of), and the passage store's own
tables (a :class:`~loom_memory.SqliteTemporalStore` or
:class:`~loom_memory.PostgresTemporalStore` on the log's database, used only through its
verbs). Passages are stored under the key ``knowledge:<scope>`` with entry id
``<doc_id>#<index>`` and the provenance label ``knowledge:<scope>:<doc_id>`` as their taint.

History is the passage store's validity (ADR 0014): a revision's passages are appended valid
from the position that wrote them, and a superseded or removed revision's passages are not
deleted but ended (``end_validity``) at the position from which they stopped being current.
A current search is the store's ``search``; a search as of position P is its ``as_of`` search.
The store ranks both by the passages they admit, ties by passage id
(:mod:`loom_memory.validity`): a search ranks the corpus as it was at the position, exactly as
a fresh corpus of those documents would, whatever history it went through.

A scope created with a stemmer (its stream opens with
:class:`~loom_knowledge.corpus.events.TokenizerChosen`) keeps its passages in a passage store
of that stemmer's own (prefix ``loom_kb_stem_<stemmer>_``, recorded in ``loom_kb_tokenizers``),
so a plain and a stemmed index never share a table: every store holds one tokenizer's terms,
as memory's stores require (ADR 0046). Plain scopes stay in the ``loom_kb_`` store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    String,
    Table,
    Text,
    and_,
    bindparam,
    delete,
    func,
    inspect,
    or_,
    select,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from loom_knowledge.corpus.erasure import (
    DOCUMENT,
    document_subject,
    named_document,
    open_written,
)
from loom_knowledge.corpus.events import (
    CORPUS_TOPICS,
    DocumentRemoved,
    DocumentWritten,
    TokenizerChosen,
)
from loom_knowledge.corpus.keys import corpus_key, provenance_label
from loom_knowledge.domain.passage_entry import (
    PassageContent,
    format_passage_id,
    passage_from_entry,
)
from loom_knowledge.domain.types import DocRecord, Passage
from loom_knowledge.errors import InvalidOptionError, InvalidPassageIdError
from loom_memory import (
    MemoryEntry,
    PostgresTemporalStore,
    SqliteTemporalStore,
    StoreConfigurationError,
    Tokenizer,
)
from loom_runtime import (
    DomainEventProtocol,
    Forgotten,
    Keyring,
    SQLProjection,
    keyring_for,
    sealed_after,
    sealed_subjects,
    sealed_text_subject,
    tracking_table,
)

TABLE_PREFIX = "loom_kb_"
PassageStore = PostgresTemporalStore | SqliteTemporalStore
"""A passage store of the corpus: the log's backend's temporal store."""
INDEX_TOPICS = (*CORPUS_TOPICS, Forgotten.TOPIC)
"""What changes the corpus read models: the corpus events, and the forget event (a document
erased leaves them, ADR 0055)."""
_IN_CHUNK = 1000  # ids per IN (...) list: well under SQLite's and psycopg's parameter limits


class CorpusIndex(SQLProjection):
    """The manifest and passage index of every scope of one log."""

    topics = INDEX_TOPICS

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, name="knowledge")
        self._page: _PageWrites | None = None
        """What the page being applied inserts, written at its last event (:meth:`apply`)."""
        self.store = self._open_store()
        """The plain scopes' passages (every scope written without a stemmer)."""
        self._stemmed: dict[str, PassageStore] = {}
        """The passage store of each stemmer a scope was created with, opened on first use."""
        self._erased_docs: set[tuple[str, str]] | None = None
        """The erased (scope, doc id) pairs among the documents the page writes, read once per
        page, in its transaction, when a written revision first asks: a query per indexed
        document would tax every ingest, and reading the whole table would make every page
        pay for every erasure ever made."""
        self._opened: dict[int, tuple[str | None, list[str]] | None] = {}
        """The title and passages of each written revision of the page being applied, by
        position, opened before its transaction (None: its document was erased)."""
        self._scope_stemmers: dict[str, str | None] = {}
        """Each scope's stemmer as the projection found it when it indexed the scope's
        documents. Final once found: a choice is only ever the first event of a stream."""
        self.tokenizers = Table(
            f"{TABLE_PREFIX}tokenizers",
            self.metadata,
            Column("scope", Text, primary_key=True),
            Column("stemmer", String(100), nullable=False),
        )
        self.documents = Table(
            f"{TABLE_PREFIX}documents",
            self.metadata,
            *_record_columns(revision_is_key=False),
        )
        self.revisions = Table(
            f"{TABLE_PREFIX}revisions",
            self.metadata,
            *_record_columns(revision_is_key=True),
            Column("written_position", BigInteger, nullable=False),
            Column("ended_position", BigInteger, nullable=True),
            Column("ended_by", String(20), nullable=True),
        )
        self.erased = Table(
            f"{TABLE_PREFIX}erased",
            self.metadata,
            Column("scope", Text, primary_key=True),
            Column("doc_id", Text, primary_key=True),
            Column("erased_position", BigInteger, nullable=False),
        )
        """Documents a forget event erased (ADR 0055): never indexed again, whatever the log
        holds after it (a write that raced the erasure)."""
        if self.store.predates_postings:
            # Built before searches ranked by the admitted rows' statistics: its passages have
            # no postings. Drop the read model; create_tables finds its tables missing and the
            # next catch-up rebuilds it from the log.
            self.drop()
            self.store = self._open_store()
        # The plain store created its own tables when opened: if its entries were gone, the
        # rows this projection's position counts are gone with them.
        self.create_tables(rows_lost=self.store.created_tables)
        if self._open_recorded_stores():
            self.reset()  # a stemmed store's tables were dropped: rebuild from the log
        self._statements = _Statements(self.documents, self.revisions, self.erased)

    def _open_store(self, stemmer: str | None = None) -> PassageStore:
        """The passage store of ``stemmer``'s scopes (None: the plain ones): temporal, so
        history and its ranking rule are memory's."""
        store_class = (
            PostgresTemporalStore
            if self.engine.dialect.name == "postgresql"
            else SqliteTemporalStore
        )
        prefix = TABLE_PREFIX if stemmer is None else stemmed_prefix(stemmer)

        def opened(tokenizer: Tokenizer) -> PassageStore:
            return store_class(
                self.engine,
                table_prefix=prefix,
                columns=[Column("revision", Integer, nullable=True)],
                tokenizer=tokenizer,
            )

        tokenizer = Tokenizer(stemmer)  # an unknown stemmer is refused here, before any table
        try:
            return opened(tokenizer)
        except StoreConfigurationError:
            # A stemmed store records its tokenizer from its first open: rows without that
            # record lost the settings table by hand, and the store reads them as plain
            # terms, refusing its own stemmer (every read of the log failed, a rebuild's
            # too). Dropped by the store itself, opened as what it claims to be, and made
            # again: empty, so the projection rebuilds it from the log (ADR 0010, amended).
            if stemmer is None or inspect(self.engine).has_table(f"{prefix}settings"):
                raise
            opened(Tokenizer(None)).drop()
            return opened(tokenizer)

    def passage_store(self, stemmer: str | None) -> PassageStore:
        """The passage store of ``stemmer``'s scopes, opened (its tables created) on first use.

        Opening creates tables in a transaction of its own, so it never runs inside a page's
        transaction: :meth:`apply` opens the stores a page needs before it begins.
        """
        if stemmer is None:
            return self.store
        if stemmer not in self._stemmed:
            self._stemmed[stemmer] = self._open_store(stemmer)
        return self._stemmed[stemmer]

    def _open_recorded_stores(self) -> bool:
        """Open the store of every stemmer a scope was created with, so :meth:`clear` and
        :meth:`drop` reach their tables too; True if one had lost a table (its rows, their
        postings or its settings are gone while the projection's position says they are
        there)."""
        with self.reading() as conn:
            if not conn.dialect.has_table(conn, self.tokenizers.name):
                return False  # a read model from before stemmed scopes, not yet upgraded
            stemmers = sorted(conn.execute(select(self.tokenizers.c.stemmer).distinct()).scalars())
        opened = [stemmer for stemmer in stemmers if stemmer not in self._stemmed]
        # Its rows lost (by hand), or their postings (every search found nothing), or its
        # settings (made again empty by _open_store): rebuilt from the log.
        return any(_lost(self.passage_store(stemmer)) for stemmer in opened)

    def _store_of(self, conn: Connection, scope: str) -> PassageStore:
        """The store holding ``scope``'s passages, for an event of it being applied.

        Events are applied in log order, so by the time one of a scope's documents is, its
        choice (the stream's first event) has been: what the table says then is final.
        """
        if scope not in self._scope_stemmers:
            found = conn.execute(
                select(self.tokenizers.c.stemmer).where(self.tokenizers.c.scope == scope)
            ).scalar()
            self._scope_stemmers[scope] = found
        return self.passage_store(self._scope_stemmers[scope])

    # -- projection ---------------------------------------------------------------------------

    def apply(
        self, events: Sequence[tuple[int, DomainEventProtocol[Any]]], *, after: int, upto: int
    ) -> bool:
        """Open the passage stores the page writes to, then apply it (in one transaction).

        A store opened inside the page's transaction would create its tables in another one
        and wait for this one's lock. A page names a stemmer's store by its choice event, or by
        a document of a scope whose choice another process applied: those are in the table.

        The page's inserts (passages, manifest rows, revision rows) are held and written at
        its last event, one statement per table for the page, and the manifest records of its
        documents are read in one query: per document, the statements' fixed cost was most of
        a sync's projection (ADR 0051). Any other statement that touches a held row (an end, an
        update or a delete of a document written earlier in the page, a forget, a clear)
        writes what is held first, so every row sees the same inserts, updates and deletes in
        the same order as event by event, and the rows and ``seq``s are the same; the ends of
        documents with nothing held are held too and go out in one batch with the inserts
        (ADR 0051, amended "ends"). All of it is in the page's one transaction with its
        position. One thread at a time applies a page of this object (``_applying``, the lock
        every :class:`~loom_runtime.SQLProjection` holds).
        """
        with self._applying:
            unseen = False
            keyring = keyring_for(self.engine)
            self._opened.clear()
            self._erased_docs = None
            if keyring is not None:  # a key another process destroyed must not open here
                keyring.forget_destroyed(
                    document_subject(event.scope, event.doc_id)
                    for _, event in events
                    if isinstance(event, DocumentWritten)
                )
            for position, event in events:
                if isinstance(event, TokenizerChosen):
                    self.passage_store(event.stemmer)
                elif getattr(event, "scope", None) not in self._scope_stemmers:
                    unseen = True
                if isinstance(event, DocumentWritten):
                    # Opened before the page's transaction too: reading a key inside it would
                    # wait for the write lock that transaction holds (SQLite).
                    self._opened[position] = self._open_written(keyring, position, event)
            if unseen:
                self._open_recorded_stores()
            self._page = _PageWrites(events) if events else None
            try:
                return super().apply(events, after=after, upto=upto)
            finally:
                self._page = None

    def _open_written(
        self, keyring: Keyring | None, position: int, event: DocumentWritten
    ) -> tuple[str | None, list[str]] | None:
        """A written revision's title and passages as the index holds them; None (the erased
        state: listed, nothing searchable) for one whose texts are never opened nor served.

        A revision with a text that looks sealed, stored after the first key row's position
        (:func:`~loom_runtime.sealed_after`, one read of the key table, remembered), is opened
        text by text, as any sealed one. At or before it, or where the log has no data key,
        the revision's own texts say: a sealed write seals every one, so one with any clear
        text is an outsider's, read as written; one whose every text looks sealed is withheld,
        since it is either an outsider's text shaped so on purpose or a sealed one whose key
        rows were deleted or edited. Why the rows may only withhold, never make a text clear:
        anyone with SQL can edit them, and a deleted first row, read as "clear", served the
        document's ciphertext as its text for good (ADR 0049, amended "sealed floor"). Only
        that rare revision has every text decoded: an honest sealed one stops at its first."""
        texts = event.passages if event.title is None else [event.title, *event.passages]
        if not any(sealed_text_subject(text) is not None for text in texts):
            return open_written(keyring, event, clear=True)
        after = sealed_after(self.engine)
        if after is not None and position > after:
            return open_written(keyring, event)
        if sealed_subjects(texts) is not None:  # every text sealed: the rule verify reads by
            return None
        return open_written(keyring, event, clear=True)

    def reset(self) -> None:
        with self._applying:
            self._open_recorded_stores()  # another process may have recorded a stemmer since
            super().reset()

    def handle(self, conn: Connection, position: int, event: Any) -> None:
        if isinstance(event, DocumentWritten):
            self._written(conn, position, event)
        elif isinstance(event, DocumentRemoved):
            self._removed(conn, position, event)
        elif isinstance(event, TokenizerChosen):
            self._tokenizer_chosen(conn, event)
        elif isinstance(event, Forgotten):
            self._forgotten(conn, position, event)
        # CorpusReconciled changes no state: it is the record of what a sync decided.
        if self._page is not None and position == self._page.last:
            self._write_held(conn)

    def clear(self, conn: Connection) -> None:
        self._write_held(conn)
        conn.execute(delete(self.documents))
        conn.execute(delete(self.revisions))
        conn.execute(delete(self.tokenizers))
        conn.execute(delete(self.erased))
        self._erased_docs = None
        self.store.clear_all(conn=conn)
        for store in self._stemmed.values():
            store.clear_all(conn=conn)
        self._scope_stemmers.clear()

    def _tokenizer_chosen(self, conn: Connection, event: TokenizerChosen) -> None:
        # Rows of the scope in the stemmer's store can only be left over from before a drop
        # that missed them (nothing of the scope precedes this event): start it empty.
        self._write_held(conn)
        self.passage_store(event.stemmer).clear(corpus_key(event.scope), conn=conn)
        conn.execute(delete(self.tokenizers).where(self.tokenizers.c.scope == event.scope))
        conn.execute(self.tokenizers.insert().values(scope=event.scope, stemmer=event.stemmer))
        self._scope_stemmers[event.scope] = event.stemmer

    def _written(self, conn: Connection, position: int, event: DocumentWritten) -> None:
        if self._page is None:  # applied outside a page: this document alone
            erased = self._erased_among(conn, {(event.scope, event.doc_id)})
        elif self._erased_docs is None:
            erased = self._erased_docs = self._erased_among(conn, self._page.written())
        else:
            erased = self._erased_docs
        if (event.scope, event.doc_id) in erased:
            return  # written after its erasure (a racing write): never indexed
        key = corpus_key(event.scope)
        previous = self._record(conn, event.scope, event.doc_id)
        if previous is not None:
            self._end_revision(conn, event.scope, previous, position, ended_by="superseded")
        record = DocRecord(
            id=event.doc_id,
            revision=event.revision,
            fingerprint=event.fingerprint,
            fingerprint_algorithm=event.fingerprint_algorithm,
            passage_count=len(event.passages),
            source=event.source,
        )
        values = msgspec.structs.asdict(record)
        del values["id"]
        page = self._page if self._page is not None else _PageWrites(())
        opened = self._opened.pop(position, None)
        if opened is not None:  # None: its key is destroyed (a forget event follows), or withheld
            store = self._store_of(conn, event.scope)
            passages = (key, _entries(event, *opened), position, {"revision": event.revision})
            page.held(store).appends.append(passages)
        document = {"scope": event.scope, "doc_id": event.doc_id}
        if previous is None:
            page.documents.append({**document, **values})
        else:  # previous's rows are in place: _end_revision wrote them if they were held
            conn.execute(
                self._statements.update_document,
                {**values, "b_scope": event.scope, "b_doc_id": event.doc_id},
            )
        page.revisions.append({**document, **values, "written_position": position})
        page.records[event.scope, event.doc_id] = record
        page.held_docs.add((event.scope, event.doc_id))
        if self._page is None:  # applied outside a page: write it now
            self._write(conn, page)

    def _removed(self, conn: Connection, position: int, event: DocumentRemoved) -> None:
        previous = self._record(conn, event.scope, event.doc_id)
        if previous is None:
            return  # nothing live to remove (the writer checked; a rebuild sees the same)
        self._end_revision(conn, event.scope, previous, position, ended_by="removed")
        conn.execute(
            self._statements.delete_document, {"b_scope": event.scope, "b_doc_id": event.doc_id}
        )
        if self._page is not None:
            self._page.records[event.scope, event.doc_id] = None

    def _forgotten(self, conn: Connection, position: int, event: Forgotten) -> None:
        """Forget every document the forget event names: its current revision ends
        ("erased"), it leaves the manifest, and the passages of every revision leave the
        passage store (their rows, postings and counts). Idempotent: a second forget event
        for the same document (an interrupted erase run again) finds nothing left."""
        self._write_held(conn)  # the documents it names may be held
        for scope, doc_id in self._documents_named(conn, event.subjects):
            if self._erased_at(conn, scope, doc_id) is None:
                conn.execute(
                    self.erased.insert().values(
                        scope=scope, doc_id=doc_id, erased_position=position
                    )
                )
                if self._erased_docs is not None:
                    self._erased_docs.add((scope, doc_id))
            previous = self._record(conn, scope, doc_id)
            if previous is not None:
                self._end_revision(conn, scope, previous, position, ended_by="erased")
                conn.execute(
                    self._statements.delete_document, {"b_scope": scope, "b_doc_id": doc_id}
                )
                if self._page is not None:
                    self._page.records[scope, doc_id] = None
            most = conn.execute(
                select(func.max(self.revisions.c.passage_count)).where(
                    self.revisions.c.scope == scope, self.revisions.c.doc_id == doc_id
                )
            ).scalar()
            if most:
                self._write_held(conn)  # the end of its current revision is held
                store = self._store_of(conn, scope)
                store.remove(corpus_key(scope), _passage_ids(doc_id, most), conn=conn)
                store.forget_deleted(conn=conn)  # no index page keeps the deleted terms

    def _documents_named(self, conn: Connection, subjects: Sequence[str]) -> list[tuple[str, str]]:
        """The (scope, doc id) of each document subject in ``subjects`` that the corpus ever
        held; a subject named by digest is matched against the documents it holds."""
        wanted = [subject for subject in subjects if subject.startswith(DOCUMENT)]
        found = [pair for pair in map(named_document, wanted) if pair is not None]
        if len(found) < len(wanted):
            digests = set(wanted)
            held = conn.execute(select(self.revisions.c.scope, self.revisions.c.doc_id).distinct())
            found += [
                (scope, doc_id)
                for scope, doc_id in held.tuples()
                if document_subject(scope, doc_id) in digests and (scope, doc_id) not in found
            ]
        return found

    def _erased_among(self, conn: Connection, wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """The (scope, doc id) pairs of ``wanted`` that were erased: keyed reads, so a page
        reads the erased rows of its own documents only."""
        found: set[tuple[str, str]] = set()
        for scope in sorted({scope for scope, _ in wanted}):
            doc_ids = sorted(doc_id for where, doc_id in wanted if where == scope)
            for start in range(0, len(doc_ids), _IN_CHUNK):
                chunk = {"b_scope": scope, "b_doc_ids": doc_ids[start : start + _IN_CHUNK]}
                rows = conn.execute(self._statements.erased_of, chunk).scalars()
                found.update((scope, doc_id) for doc_id in rows)
        return found

    def _erased_at(self, conn: Connection, scope: str, doc_id: str) -> int | None:
        return conn.execute(
            select(self.erased.c.erased_position).where(
                self.erased.c.scope == scope, self.erased.c.doc_id == doc_id
            )
        ).scalar()

    def erasures(self, scope: str, *, upto: int | None = None) -> dict[str, int]:
        """The documents of ``scope`` erased (at or before ``upto``), with the position of the
        forget event that erased each: what an as-of view or an audit shows in place of text."""
        query = select(self.erased.c.doc_id, self.erased.c.erased_position).where(
            self.erased.c.scope == scope
        )
        if upto is not None:
            query = query.where(self.erased.c.erased_position <= upto)
        with self.reading() as conn:
            return dict(conn.execute(query).tuples().all())

    def _end_revision(
        self, conn: Connection, scope: str, record: DocRecord, position: int, *, ended_by: str
    ) -> None:
        page = self._page if self._page is not None else _PageWrites(())
        if (scope, record.id) in page.held_docs:
            self._write_held(conn)  # the rows it ends are held: they must be in place
        conn.execute(
            self._statements.end_revision,
            {
                "b_scope": scope,
                "b_doc_id": record.id,
                "b_revision": record.revision,
                "ended_position": position,
                "ended_by": ended_by,
            },
        )
        # Held like an insert, and written with the page's inserts of its store (the
        # revision's own, mostly): counted by position together, a revision's end and append
        # cancel on their shared terms (ADR 0059, amended). No held row is one it ends (those
        # were written above), so it goes out with the page's other ends in one batch
        # (ADR 0051, amended "ends").
        store = self._store_of(conn, scope)
        ended = (corpus_key(scope), _passage_ids(record.id, record.passage_count), position)
        page.held(store).ends.append(ended)
        if self._page is None:  # applied outside a page: write it now
            self._write(conn, page)

    def _write_held(self, conn: Connection) -> None:
        """Write the inserts held for the page: at its end, or before a statement that must
        find their rows in place."""
        if self._page is not None:
            self._write(conn, self._page)

    def _write(self, conn: Connection, page: _PageWrites) -> None:
        """Insert what ``page`` holds, one statement per table, and hold nothing more."""
        held = list(page.passages.values())
        documents, revisions = page.documents, page.revisions
        page.passages, page.documents, page.revisions = {}, [], []
        page.held_docs.clear()
        for writes in held:
            writes.store.append_at_batch(writes.appends, ends=writes.ends, conn=conn)
        if documents:
            conn.execute(self._statements.insert_document, documents)
        if revisions:
            conn.execute(self._statements.insert_revision, revisions)

    def drop(self) -> None:
        """Drop every table of this projection and forget its position (see ``drop_corpus``)."""
        self._open_recorded_stores()
        with self.engine.begin() as conn:
            self.store.drop(conn=conn)
            for store in self._stemmed.values():
                store.drop(conn=conn)
            self.metadata.drop_all(conn)
            conn.execute(delete(tracking_table).where(tracking_table.c.projection == self.name))
        # Their tables are gone: opened again on next use (clearing these failed on a table
        # this very drop removed, and every read of the log with it).
        self._stemmed.clear()
        self._scope_stemmers.clear()

    # -- reads --------------------------------------------------------------------------------

    def manifest(
        self,
        scope: str,
        *,
        doc_ids: Sequence[str] | None = None,
        conn: Connection | None = None,
    ) -> dict[str, DocRecord]:
        """The live documents of ``scope`` (all, or those of ``doc_ids``) by id, in id order.

        Read as plain tuples: an unchanged sync of a large corpus is mostly this read.
        """
        statements = self._statements
        query = statements.manifest if doc_ids is None else statements.manifest_of
        parameters = {"b_scope": scope, "b_doc_ids": list(doc_ids or ())}
        with self._reading(conn) as connection:
            return {
                doc_id: DocRecord(
                    id=doc_id,
                    revision=revision,
                    fingerprint=fingerprint,
                    fingerprint_algorithm=algorithm,
                    passage_count=count,
                    source=source,
                )
                for doc_id, revision, fingerprint, algorithm, count, source in connection.execute(
                    query, parameters
                ).tuples()
            }

    def last_revisions(
        self, scope: str, doc_ids: Sequence[str], *, conn: Connection | None = None
    ) -> dict[str, int]:
        """The highest revision each of ``doc_ids`` ever had in ``scope`` (absent if never),
        read on ``conn`` if given (a decision's read transaction), else in a read of its own.

        Revisions keep counting across a removal, so "revision 3" names one text forever.
        """
        found: dict[str, int] = {}
        with self._reading(conn) as connection:
            for start in range(0, len(doc_ids), _IN_CHUNK):
                chunk = {"b_scope": scope, "b_doc_ids": list(doc_ids[start : start + _IN_CHUNK])}
                rows = connection.execute(self._statements.last_revisions, chunk).tuples()
                found.update((doc_id, top) for doc_id, top in rows)
        return found

    def scopes(self) -> list[str]:
        """Every scope that ever held a document, sorted (a scope is only its documents)."""
        with self.engine.connect() as conn:  # sorted here: by code point on every backend
            return sorted(conn.execute(select(self.revisions.c.scope).distinct()).scalars())

    def revision_history(
        self, scope: str, revisions: set[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[int | None, str | None]]:
        """For each (doc_id, revision): the position it stopped being current at (None while
        it is current) and why ("superseded" or "removed"). Unknown revisions are absent."""
        doc_ids = {doc_id for doc_id, _ in revisions}
        if not doc_ids:
            return {}
        query = select(
            self.revisions.c.doc_id,
            self.revisions.c.revision,
            self.revisions.c.ended_position,
            self.revisions.c.ended_by,
        ).where(and_(self.revisions.c.scope == scope, self.revisions.c.doc_id.in_(doc_ids)))
        with self.engine.connect() as conn:
            return {
                (row.doc_id, row.revision): (row.ended_position, row.ended_by)
                for row in conn.execute(query)
                if (row.doc_id, row.revision) in revisions
            }

    def read_passages(
        self, scope: str, *, as_of: int | None = None, stemmer: str | None = None
    ) -> list[Passage]:
        """The current passages of ``scope`` (or those current at ``as_of``), in index order.

        ``stemmer``: the one the scope was created with (the caller read it from the log).
        """
        store = self.passage_store(stemmer)
        return [
            _passage(entry, values)
            for entry, values in store.read_annotated(corpus_key(scope), as_of=as_of)
        ]

    def search_passages(
        self,
        scope: str,
        query: str,
        *,
        limit: int,
        as_of: int | None = None,
        stemmer: str | None = None,
    ) -> list[Passage]:
        """The best ``limit`` current passages of ``scope`` for ``query`` (or the best of those
        current at ``as_of``), ranked by the terms of the scope's ``stemmer``.

        Not capped at :data:`~loom_memory.store.MAX_SEARCH_LIMIT`: a metadata filter reads
        the ranking as deep as it must (:func:`~loom_knowledge.corpus.retrieval.filtered`,
        which caps the answer)."""
        if not isinstance(query, str):
            raise InvalidOptionError(f"query must be a str, not {type(query).__name__}")
        store = self.passage_store(stemmer)
        hits = store.search_annotated(
            corpus_key(scope), query, limit=limit, as_of=as_of, capped=False
        )
        return [_passage(entry, values) for entry, values in hits]

    def manifest_at(self, scope: str, position: int) -> dict[str, DocRecord]:
        """Every document of ``scope`` live at ``position``, at its revision then, by id."""
        rows = self.revisions.c
        query = (
            select(self.revisions)
            .where(
                rows.scope == scope,
                rows.written_position <= position,
                or_(rows.ended_position.is_(None), rows.ended_position > position),
            )
            .order_by(code_points(rows.doc_id))
        )
        with self.engine.connect() as conn:
            return {row.doc_id: _record(row) for row in conn.execute(query)}

    def _record(self, conn: Connection, scope: str, doc_id: str) -> DocRecord | None:
        """The live record of ``doc_id`` as the events applied so far left it: for a page,
        its documents' records are read in one query when the first is asked for, then kept
        as its events file and remove them."""
        page = self._page
        if page is None:
            return self._read_record(conn, scope, doc_id)
        if scope not in page.read_scopes:
            page.read_scopes.add(scope)
            wanted = sorted(page.doc_ids(scope) - {d for s, d in page.records if s == scope})
            if len(wanted) > 1:  # one document (a put_doc's page) takes the keyed read below
                found: dict[str, DocRecord] = {}
                for start in range(0, len(wanted), _IN_CHUNK):
                    chunk = wanted[start : start + _IN_CHUNK]
                    found |= self.manifest(scope, doc_ids=chunk, conn=conn)
                page.records.update({(scope, doc_id): found.get(doc_id) for doc_id in wanted})
        if (scope, doc_id) not in page.records:
            page.records[scope, doc_id] = self._read_record(conn, scope, doc_id)
        return page.records[scope, doc_id]

    def _read_record(self, conn: Connection, scope: str, doc_id: str) -> DocRecord | None:
        row = conn.execute(
            self._statements.select_document, {"b_scope": scope, "b_doc_id": doc_id}
        ).one_or_none()
        return None if row is None else _record(row)

    def _reading(self, conn: Connection | None) -> AbstractContextManager[Connection]:
        return nullcontext(conn) if conn is not None else self.reading()


class code_points(FunctionElement[str]):
    """A text column ordered by code point, as SQLite orders text: ``COLLATE "C"`` on
    PostgreSQL, whose database collation (a language's, on most managed servers) would order
    ``_x`` before ``9z`` and ``B`` after ``Ä``; the column itself elsewhere."""

    inherit_cache = True


@compiles(code_points)
def _code_points(element: code_points, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(code_points, "postgresql")
def _code_points_postgresql(element: code_points, compiler: Any, **kw: Any) -> str:
    return f'{compiler.process(element.clauses, **kw)} COLLATE "C"'


class _Statements:
    """The statements a write and a manifest read run, built once per index.

    Built per call, a statement cost more than SQLite took to run it: SQLAlchemy constructs
    it and derives its cache key every time. Built once, with every value a bound parameter,
    its cache key is memoized and its compiled form comes from the engine's cache, so a
    call only binds values (ADR 0044). Parameters of a WHERE clause are named ``b_*`` so
    they never collide with the column values an INSERT or UPDATE sets.
    """

    def __init__(self, documents: Table, revisions: Table, erased: Table) -> None:
        d, r, e = documents.c, revisions.c, erased.c
        document = and_(d.scope == bindparam("b_scope"), d.doc_id == bindparam("b_doc_id"))
        self.select_document = select(documents).where(document)
        self.insert_document = documents.insert()
        self.update_document = update(documents).where(document)
        self.delete_document = delete(documents).where(document)
        self.insert_revision = revisions.insert()
        self.end_revision = update(revisions).where(
            r.scope == bindparam("b_scope"),
            r.doc_id == bindparam("b_doc_id"),
            r.revision == bindparam("b_revision"),
        )
        self.manifest = (
            select(d.doc_id, d.revision, d.fingerprint, d.fingerprint_algorithm)
            .add_columns(d.passage_count, d.source)
            .where(d.scope == bindparam("b_scope"))
            .order_by(code_points(d.doc_id))
        )
        self.manifest_of = self.manifest.where(d.doc_id.in_(bindparam("b_doc_ids", expanding=True)))
        self.erased_of = select(e.doc_id).where(
            e.scope == bindparam("b_scope"), e.doc_id.in_(bindparam("b_doc_ids", expanding=True))
        )
        self.last_revisions = (
            select(r.doc_id, func.max(r.revision))
            .where(
                r.scope == bindparam("b_scope"),
                r.doc_id.in_(bindparam("b_doc_ids", expanding=True)),
            )
            .group_by(r.doc_id)
        )


Appended = tuple[str, Sequence[MemoryEntry], int, Mapping[str, Any]]
"""One document's passages as ``append_at_batch`` takes them: key, entries, position, values."""


class _StoreWrites:
    """The writes held for one passage store: its ends, then its appends. An end held never
    ends a held append's rows (an end of a document with held rows makes the page write them
    first), so applying every end before every append leaves the rows of event order."""

    def __init__(self, store: PassageStore) -> None:
        self.store = store
        self.ends: list[tuple[str, list[str], int]] = []
        """``(key, passage ids, position)`` of each revision ended, in event order."""
        self.appends: list[Appended] = []
        """Each written revision's passages, in event order."""


class _PageWrites:
    """The page being applied: the inserts held until its last event, and its documents'
    live records as its events leave them (see :meth:`CorpusIndex.apply`)."""

    def __init__(self, events: Sequence[tuple[int, Any]]) -> None:
        self.last = events[-1][0] if events else 0
        """The position of the page's last event: its handling writes what is held."""
        self._events = events
        self.passages: dict[int, _StoreWrites] = {}
        """Per passage store (by identity), the ends and appends held, in event order."""
        self.documents: list[dict[str, Any]] = []
        """Manifest rows of new documents, held."""
        self.revisions: list[dict[str, Any]] = []
        """Revision rows, held."""
        self.records: dict[tuple[str, str], DocRecord | None] = {}
        """(scope, doc_id) -> the live record (None: none), once read or filed in this page."""
        self.read_scopes: set[str] = set()
        """The scopes whose documents in this page have had their records read."""
        self.held_docs: set[tuple[str, str]] = set()
        """(scope, doc_id) of the documents with rows held (passages, manifest, revision):
        an end, update or delete of one of them writes what is held first."""

    def held(self, store: PassageStore) -> _StoreWrites:
        """What is held for ``store``."""
        found = self.passages.get(id(store))
        if found is None:
            found = self.passages[id(store)] = _StoreWrites(store)
        return found

    def written(self) -> set[tuple[str, str]]:
        """The (scope, doc id) of the documents this page writes."""
        return {
            (event.scope, event.doc_id)
            for _, event in self._events
            if isinstance(event, DocumentWritten)
        }

    def doc_ids(self, scope: str) -> set[str]:
        """The ids of the documents of ``scope`` this page writes or removes."""
        return {
            event.doc_id
            for _, event in self._events
            if isinstance(event, DocumentWritten | DocumentRemoved) and event.scope == scope
        }


def stemmed_prefix(stemmer: str) -> str:
    """The table prefix of the passage store of scopes created with ``stemmer``."""
    return f"{TABLE_PREFIX}stem_{stemmer}_"


def _record_columns(*, revision_is_key: bool) -> list[Column[Any]]:
    """The columns of a document record: the live manifest row, or one revision's row."""
    return [
        Column("scope", Text, primary_key=True),
        Column("doc_id", Text, primary_key=True),
        Column("revision", Integer, primary_key=revision_is_key, nullable=False),
        Column("fingerprint", String(128), nullable=False),
        Column("fingerprint_algorithm", String(100), nullable=False),
        Column("passage_count", Integer, nullable=False),
        Column("source", Text, nullable=True),
    ]


def _record(row: Any) -> DocRecord:
    return DocRecord(
        id=row.doc_id,
        revision=row.revision,
        fingerprint=row.fingerprint,
        fingerprint_algorithm=row.fingerprint_algorithm,
        passage_count=row.passage_count,
        source=row.source,
    )


def _passage_ids(doc_id: str, count: int) -> list[str]:
    return [format_passage_id(doc_id, index) for index in range(count)]


def _entries(event: DocumentWritten, title: str | None, passages: list[str]) -> list[MemoryEntry]:
    """The passage entries of a written revision, from its title and passages in clear."""
    timestamp: datetime = event.timestamp
    return [
        MemoryEntry(
            id=format_passage_id(event.doc_id, index),
            content=msgspec.to_builtins(PassageContent(text=text, title=title, meta=event.meta)),
            timestamp=timestamp,
            origin=provenance_label(event.scope, event.doc_id),
        )
        for index, text in enumerate(passages)
    ]


def _passage(entry: MemoryEntry, values: dict[str, Any]) -> Passage:
    """A passage read back from the index; an entry that is not one is refused, not guessed."""
    entry_id = entry.id if isinstance(entry.id, str) else ""
    try:
        content = msgspec.convert(entry.content, PassageContent)
    except msgspec.ValidationError as exc:
        raise InvalidPassageIdError(
            entry_id=entry_id, reason=f"its content is not a passage ({exc})"
        ) from exc
    revision = values.get("revision")
    if revision is None:
        raise InvalidPassageIdError(
            entry_id=entry_id,
            reason="no document revision counts it (an orphan passage): run kb.rebuild()",
        )
    return passage_from_entry(entry_id=entry_id, content=content, revision=revision)


def _lost(store: PassageStore) -> bool:
    """Whether ``store`` found one of its tables gone as it opened: rebuild it from the log."""
    return store.created_tables or store.predates_postings
