"""Section "corpus": ingest, unchanged and edited sync, retrieval of a knowledge base.

Everything goes through the public surface (``open_knowledge_base`` on a ``Loom`` with its
defaults: a SQLite file, built-in persistence, ``synchronous=NORMAL``), so every figure
includes what a user pays: the events appended to the log AND the projection that indexes
them (a write returns only once the manifest and passage index have caught up).

* **Ingest** (a fresh log each round): ``kb.sync`` of 2,000 documents into an empty corpus,
  and ``kb.put_doc`` of 300 documents one by one into an empty corpus and of 10 new documents
  into the 10,000-document corpus (removed again, untimed, after each round). Beside them, the
  floors: SQLite's own work for the passage index of the same documents, inserted by the bare
  ``sqlite3`` module in one transaction (under ``sync``) and in one transaction per document
  (under ``put_doc``, which commits each document), and the latter with the counts the index
  keeps, into an empty store and into a copy of the 10,000-document corpus (where a
  document's terms dirty a page each of big B-trees); no ingest can beat them (ADR 0044).
* **Unchanged sync** of a 2,000- and a 10,000-document corpus, each built once by a sync: time
  and events appended, read from ``loom.log.position`` before and after (must be exactly 1).
* **Edited sync** of the 10,000-document corpus with 1% of documents edited and 1% dropped
  (well under the mass-delete guard, so no override is passed), restored after each round by
  an untimed sync of the original set.
* **Retrieval**: ``kb.search(query, limit=4)`` with 200 seeded queries of 2-4 words drawn from
  the corpus, p50/p95 per round.

Documents are ~2,000-character windows of real manuals (:mod:`benchmarks.corpora`), cut at
paragraph boundaries so the default chunker (``pack_paragraphs(max_chars=1000)``) sees real
paragraphs. Each ends with a paragraph of one marker term unique to it (``loommark0x<n>``, no
other word, so term statistics stay the manuals'); an edit changes that term to
``loommark<round>x<n>``. After every edited sync the old marker of each edited and each dropped
document is searched: it exists only in a superseded or removed revision, so any hit is a stale
passage leaking (must be 0); the new marker of each edited document must be found, or the
check proves nothing.

Negative controls: a re-sync of the 2,000-document corpus with every document's text changed
by one character (the fingerprint defeated) must append one event per document plus the
record and take far longer than the unchanged sync; a fresh ``SqliteMemoryStore`` holding the
superseded revisions' passages (a projection that never applied the edit) must find the stale
markers that the knowledge base must not.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import Column, Integer, create_engine

from benchmarks.corpora import queries, windows
from benchmarks.harness import (
    SNAPSHOTS,
    Arm,
    Control,
    InstrumentError,
    Progress,
    Results,
    Sample,
    SectionResult,
    Settings,
    Stats,
    Table,
    fingerprint,
    floor_verdict,
    interleave,
)
from benchmarks.memory import percentile
from benchmarks.stores import fresh_sqlite
from loom_knowledge import (
    Doc,
    KnowledgeBase,
    format_passage_id,
    open_knowledge_base,
    pack_paragraphs,
    passage_content,
    to_passages,
)
from loom_knowledge.corpus.keys import corpus_key
from loom_memory import MemoryEntry, SqliteMemoryStore, SqliteTemporalStore, entry_terms
from loom_memory.entry import encode_entries
from loom_memory.position_counts import TERMS_KEY, bucketed, inserted_changes
from loom_runtime import Loom

DOC_CHARS = 2_000
SIZES = (2_000, 10_000)
QUICK_SIZES = (200, 1_000)
SYNC_INGEST = 2_000
QUICK_SYNC_INGEST = 200
PUT_INGEST = 300
QUICK_PUT_INGEST = 50
PUT_INTO_LARGE = 10
QUICK_PUT_INTO_LARGE = 5
CHURN = 100
"""One document in CHURN is edited and another one dropped by the edited sync (1% each)."""
QUERIES = 200
LIMIT = 4
SOURCE = "bench"
SCOPE = "bench"
UNCHANGED_TARGET_MS = 100.0
SYNC_TARGET = 2_500.0
"""Documents per second a first ``kb.sync`` must ingest (ADR 0044)."""
PUT_TARGET = 1_000.0
"""Documents per second ``kb.put_doc`` one by one must ingest (ADR 0044)."""
FLOOR = "floor: "
"""The name prefix of the arms no loom ingest can beat (``_floor_arm``)."""
DEFEATED_FACTOR = 10.0
"""A sync that rewrites every document must take at least this many times the unchanged one."""


@dataclass(frozen=True)
class Corpus:
    """A corpus built once and kept for the rounds: its log, knowledge base and documents."""

    loom: Loom
    kb: KnowledgeBase
    docs: list[Doc]

    def sync(self, docs: Sequence[Doc]) -> tuple[float, int]:
        """Sync ``docs``; return the seconds taken and the events appended."""
        before = self.loom.log.position
        started = time.perf_counter()
        self.kb.sync(docs, source=SOURCE)
        elapsed = time.perf_counter() - started
        return elapsed, self.loom.log.position - before


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Build the corpora once, then measure every arm in interleaved rounds."""
    small, large = QUICK_SIZES if settings.quick else SIZES
    sync_ingest = QUICK_SYNC_INGEST if settings.quick else SYNC_INGEST
    put_ingest = QUICK_PUT_INGEST if settings.quick else PUT_INGEST
    put_into_large = QUICK_PUT_INTO_LARGE if settings.quick else PUT_INTO_LARGE
    progress(f"cutting {large + put_into_large:,} documents of ~{DOC_CHARS:,} characters")
    docs = base_docs(large + put_into_large)
    spare, docs = docs[large:], docs[:large]
    query_set = queries([doc.text.rpartition("\n\n")[0] for doc in docs], QUERIES)

    with ExitStack() as stack:
        builds: list[tuple[int, float, int]] = []
        corpora: dict[int, Corpus] = {}
        for size in (small, large):
            progress(f"building the {size:,}-document corpus by one sync")
            url, path = stack.enter_context(fresh_sqlite())
            loom = stack.enter_context(Loom(url))
            corpus = Corpus(loom, _opened(loom), docs[:size])
            seconds, events = corpus.sync(corpus.docs)
            builds.append((size, seconds, events))
            corpora[size] = corpus
        snapshot = synced_key(corpora[large].docs)
        SNAPSHOTS.keep(snapshot, path)  # before any round writes to it
        head = corpora[large].loom.log.position
        leaks: list[int] = []
        arms = [
            _sync_ingest_arm(docs[:sync_ingest]),
            _put_ingest_arm(docs[:put_ingest]),
            _put_into_arm(corpora[large], spare),
            _floor_arm(docs[:sync_ingest]),
            _floor_arm(docs[:sync_ingest], counts=True),
            _floor_arm(docs[:put_ingest], per_document=True),
            _floor_arm(docs[:put_ingest], per_document=True, counts=True),
            _floor_arm(spare, per_document=True, counts=True, into=_Into(snapshot, head, large)),
            _unchanged_arm(corpora[small]),
            _unchanged_arm(corpora[large]),
            _edited_arm(corpora[large], leaks),
            _retrieval_arm(corpora[large], query_set),
        ]
        ingest, synced, retrieval = arms[:8], arms[8:11], arms[11]
        results = interleave(arms, rounds=settings.rounds, progress=progress)
        progress("negative controls")
        unchanged_small = results[synced[0].name]["seconds"]
        controls = (
            _defeated_fingerprint(corpora[small], unchanged_small),
            _stale_store_control(corpora[large]),
        )

    return SectionResult(
        notes=(
            f"Documents: ~{DOC_CHARS:,}-character windows of the PostgreSQL and Python manuals "
            f"(mean {sum(len(d.text) for d in docs) / len(docs):,.0f} characters, "
            f"{_passages_per_doc(docs):.1f} passages each with the default chunker), one "
            f"source ({SOURCE!r}). Loom defaults: a SQLite file, built-in persistence, "
            "synchronous=NORMAL. Every write includes its event append and the projection "
            "catching up (manifest and FTS5 passage index).",
            f"Retrieval queries: {QUERIES} seeded queries of 2-4 words drawn from the corpus, "
            f"e.g. {', '.join(repr(q) for q in query_set[:3])}; `kb.search(query, "
            f"limit={LIMIT})` (the unrecorded search `retrieve` wraps).",
        ),
        tables=(
            _ingest_table([arm.name for arm in ingest], results, builds, settings.rounds),
            _sync_table([arm.name for arm in synced], results, leaks, large, settings.rounds),
            _retrieval_table(retrieval.name, results, settings.rounds),
        ),
        controls=controls,
    )


# -- documents ------------------------------------------------------------------------------


def base_docs(count: int) -> list[Doc]:
    """``count`` documents, each ending with a paragraph of its own marker term."""
    return [
        Doc(
            id=f"{window.origin}#{index}",
            title=window.title,
            text=f"{window.text}\n\n{marker(0, index)}",
        )
        for index, window in enumerate(windows(DOC_CHARS, count))
    ]


def synced_key(docs: Sequence[Doc]) -> str:
    """The fingerprint of a fresh SQLite loom (defaults) holding ``kb.sync(docs)`` in this
    module's scope and source, the state the bundles section's corpus starts from."""
    return fingerprint("kb.sync into a fresh SQLite loom", SCOPE, SOURCE, list(docs))


def marker(revision: int, index: int) -> str:
    """A term found in exactly one document: document ``index`` as of edit ``revision``."""
    return f"loommark{revision}x{index}"


def edited(doc: Doc, index: int, revision: int) -> Doc:
    return msgspec.structs.replace(
        doc, text=doc.text.replace(marker(0, index), marker(revision, index))
    )


def _passages_per_doc(docs: list[Doc]) -> float:
    chunker = pack_paragraphs()
    sample = docs[:500]
    return sum(len(chunker(doc)) for doc in sample) / len(sample)


def _opened(loom: Loom) -> KnowledgeBase:
    """The benchmark scope's knowledge base with its tables created (outside any clock)."""
    kb = open_knowledge_base(loom, SCOPE)
    kb.refresh()
    return kb


@contextmanager
def _fresh_corpus() -> Iterator[tuple[Loom, KnowledgeBase]]:
    with fresh_sqlite() as (url, _), Loom(url) as loom:
        yield loom, _opened(loom)


# -- arms -----------------------------------------------------------------------------------


def _sync_ingest_arm(docs: list[Doc]) -> Arm:
    def measure() -> Sample:
        with _fresh_corpus() as (loom, kb):
            started = time.perf_counter()
            result = kb.sync(docs, source=SOURCE)
            elapsed = time.perf_counter() - started
            events = loom.log.position
        _expect(len(result.written) == len(docs), f"sync wrote {len(result.written)} documents")
        return {"docs_per_s": len(docs) / elapsed, "events": events}

    return Arm(f"kb.sync of {len(docs):,} documents into an empty corpus", measure)


def _put_ingest_arm(docs: list[Doc]) -> Arm:
    def measure() -> Sample:
        with _fresh_corpus() as (loom, kb):
            started = time.perf_counter()
            for doc in docs:
                kb.put_doc(doc, source=SOURCE)
            elapsed = time.perf_counter() - started
            events = loom.log.position
        return {"docs_per_s": len(docs) / elapsed, "events": events}

    return Arm(f"kb.put_doc of {len(docs):,} documents into an empty corpus", measure)


def _put_into_arm(corpus: Corpus, docs: list[Doc]) -> Arm:
    def measure() -> Sample:
        before = corpus.loom.log.position
        started = time.perf_counter()
        for doc in docs:
            corpus.kb.put_doc(doc, source=SOURCE)
        elapsed = time.perf_counter() - started
        events = corpus.loom.log.position - before
        for doc in docs:  # untimed: back to the corpus the other arms expect
            corpus.kb.remove_doc(doc.id, source=SOURCE)
        return {"docs_per_s": len(docs) / elapsed, "events": events}

    return Arm(
        f"kb.put_doc of {len(docs):,} new documents into the {len(corpus.docs):,}-document corpus",
        measure,
    )


@dataclass(frozen=True)
class _Into:
    """A corpus a floor writes into: its snapshot (``SNAPSHOTS``' key), taken when the log's
    head was ``head``, and its size, for the arm's name."""

    snapshot: str
    head: int
    docs: int


def _floor_arm(
    docs: list[Doc], *, per_document: bool = False, counts: bool = False, into: _Into | None = None
) -> Arm:
    """SQLite's own work for the passage index of ``docs``: the floor under any ingest.

    The rows a sync's projection writes to the passage store (each passage's entry row, which
    its FTS5 trigger indexes, and its postings), prepared before the clock and inserted by the
    bare ``sqlite3`` module into the tables a corpus's store creates: no log, no event, no
    SQLAlchemy. In ONE transaction it is the floor under ``sync``; with ``per_document``, one
    transaction (and commit) per document, it is the floor under ``put_doc``, which must
    commit each document before it returns (ADR 0044).

    With ``counts``, each document's transaction also writes the counts a corpus's store
    keeps beside its rows (ADR 0056, 0059): its current rows and terms, and the changes of
    each by position, at the document's position, computed before the clock by the store's
    own :func:`~loom_memory.position_counts.bucketed` and written by the same upserts. That
    is the floor under ``put_doc`` through this index as it is, counts and all; the one
    without them shows what the counts cost (ADR 0044, amended "counts"). In one transaction
    the counts of all the documents are summed once and written together: fewer upserts than
    a sync's pages make (each page sums its own), so still a floor under ``sync``.

    With ``into``, the same rows and counts go into a copy of that corpus (its snapshot,
    restored before the clock), at the positions after its head, as ``put_doc`` into it
    writes them: into a large index each document's rows and term counts land on pages of
    their own across big B-trees, so a floor measured into an empty file would flatter
    itself against ``put_doc`` into the corpus (ADR 0044, amended "in place").
    """
    chunker = pack_paragraphs()
    first = 1 if into is None else into.head + 1
    # The key the corpus's passage store writes under: in a corpus copy, rows of another key
    # would sort apart from its rows and fill a few pages of their own (ten times fewer
    # written than where a document's terms fall among the corpus's).
    key = corpus_key(SCOPE)
    rows: list[list[tuple[str, str, list[tuple[str, int]]]]] = []
    kept: list[list[tuple[str, str, list[tuple[Any, ...]]]]] = []
    placed: list[tuple[int, list[set[str]]]] = []  # each document's position and rows' terms
    for position, doc in enumerate(docs, start=first):
        passages = to_passages(doc, revision=1, chunker=chunker)
        entries = [
            MemoryEntry(
                id=format_passage_id(passage.doc_id, passage.index),
                content=msgspec.to_builtins(passage_content(passage)),
            )
            for passage in passages
        ]
        rows.append([])
        held: list[set[str]] = []
        for entry, data in zip(entries, encode_entries(entries), strict=True):
            terms = entry_terms(entry)
            rows[-1].append((data.decode(), " ".join(terms), list(Counter(terms).items())))
            held.append(set(terms))
        placed.append((position, held))
        kept.append(_counted(key, placed[-1:]) if counts and per_document else [])
    if counts and not per_document:  # one transaction: the counts of all, summed once
        kept[-1] = _counted(key, placed)

    # The term buckets the floor must add: every one in an empty file, the new positions'
    # (level 0) in a corpus, whose higher levels' buckets exist already.
    buckets = len(
        {
            upsert[:4]
            for upserts in kept
            for table, _, values in upserts
            if table == "terms_at_table"
            for upsert in values
            if into is None or upsert[2] == 0
        }
    )
    counted = "" if into is None else f" WHERE level = 0 AND bucket >= {first}"

    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            if into is not None:
                _expect(SNAPSHOTS.restore(into.snapshot, path), "no snapshot of the corpus")
            engine = create_engine(url)
            store = SqliteTemporalStore(
                engine, table_prefix="loom_kb_", columns=[Column("revision", Integer)]
            )
            engine.dispose()
            connection = sqlite3.connect(path, isolation_level=None)
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
                started = time.perf_counter()
                connection.execute("BEGIN IMMEDIATE")
                documents = zip(rows, kept, strict=True)
                for position, (document, upserts) in enumerate(documents, start=first):
                    for table, columns, values in upserts:  # the counts kept beside the rows
                        count = "n" if table.startswith("row") else "df"
                        marks = ", ".join("?" * len(values[0]))
                        connection.executemany(
                            f"INSERT INTO {getattr(store, table)} AS c ({columns}, {count}) "
                            f"VALUES ({marks}) ON CONFLICT ({columns}) DO UPDATE SET "
                            f"{count} = c.{count} + excluded.{count}",
                            values,
                        )
                    for entry, search_text, postings in document:
                        (seq,) = connection.execute(
                            f"INSERT INTO {store.entries.name} (key, entry, search_text, "
                            "valid_from, revision) VALUES (?, ?, ?, ?, 1) RETURNING seq",
                            (key, entry, search_text, position),
                        ).fetchone()
                        connection.executemany(
                            f"INSERT INTO {store.table_prefix}postings (term, seq, tf) "
                            "VALUES (?, ?, ?)",
                            [(term, seq, tf) for term, tf in postings],
                        )
                    if per_document:
                        connection.execute("COMMIT")
                        connection.execute("BEGIN IMMEDIATE")
                connection.execute("COMMIT")
                elapsed = time.perf_counter() - started
                (written,) = connection.execute(
                    f"SELECT count(*) FROM {store.terms_at_table}{counted}"
                ).fetchone()
                keys = connection.execute(
                    f"SELECT DISTINCT key FROM {store.entries.name}"
                ).fetchall()
            finally:
                connection.close()
        # A floor that skipped the counts would pass for one that wrote them.
        _expect(written == buckets, f"the floor wrote {written} term buckets, not {buckets}")
        # Rows of another key sort apart from the corpus's (see ``key`` above).
        _expect(keys == [(key,)], f"the floor's rows are under keys {keys}, not only {key!r}")
        return {"docs_per_s": len(docs) / elapsed, "events": 0}

    unit = "one transaction per document" if per_document else "one transaction"
    rows_of = "and the counts it keeps " if counts else ""
    where = "" if into is None else f", into a copy of the {into.docs:,}-document corpus"
    return Arm(
        f"{FLOOR}the passage index rows {rows_of}of the same {len(docs):,} documents{where}, "
        f"bare sqlite3, {unit} (no log, no loom)",
        measure,
    )


def _counted(
    key: str, documents: list[tuple[int, list[set[str]]]]
) -> list[tuple[str, str, list[tuple[Any, ...]]]]:
    """The count upserts of ``documents`` (each one's position and its rows' terms), summed
    by the store's own :func:`bucketed`: ``(table attribute, key columns, values)``."""
    held = [terms for _, rows in documents for terms in rows]
    by_rows, by_terms = bucketed(
        inserted_changes(
            (key, position, None, terms) for position, rows in documents for terms in rows
        )
    )
    frequencies = sorted(Counter(term for terms in held for term in terms).items())
    return [
        ("row_counts_table", "key", [(key, len(held))]),
        ("term_counts_table", "key, term", [(key, *df) for df in frequencies]),
        ("rows_at_table", "key, level, bucket", by_rows),
        ("terms_at_table", ", ".join(TERMS_KEY), by_terms),
    ]


def _unchanged_arm(corpus: Corpus) -> Arm:
    def measure() -> Sample:
        seconds, events = corpus.sync(corpus.docs)
        return {"seconds": seconds, "events": events}

    return Arm(f"unchanged sync, {len(corpus.docs):,} documents", measure)


def _edited_arm(corpus: Corpus, leaks: list[int]) -> Arm:
    """Sync with 1% edited and 1% dropped, check for stale passages, then restore (untimed)."""
    rounds = iter(range(1, 1_000_000))
    edit = [index for index in range(len(corpus.docs)) if index % CHURN == 0]
    drop = [index for index in range(len(corpus.docs)) if index % CHURN == CHURN // 2]

    def measure() -> Sample:
        revision = next(rounds)
        changed = {index: edited(corpus.docs[index], index, revision) for index in edit}
        dropped = set(drop)
        docs = [
            changed.get(index, doc) for index, doc in enumerate(corpus.docs) if index not in dropped
        ]
        seconds, events = corpus.sync(docs)
        for index in edit:
            found = _hits(corpus.kb, marker(revision, index))
            _expect(
                corpus.docs[index].id in found,
                f"the edited document {corpus.docs[index].id} is not found by its new marker",
            )
        leaks.append(sum(len(_hits(corpus.kb, marker(0, index))) for index in edit + drop))
        _, restored = corpus.sync(corpus.docs)
        _expect(restored == len(edit) + len(drop) + 1, f"the restore appended {restored} events")
        return {"seconds": seconds, "events": events}

    return Arm(
        f"sync with 1% edited and 1% dropped, {len(corpus.docs):,} documents "
        f"({len(edit)} edited, {len(drop)} dropped)",
        measure,
    )


def _hits(kb: KnowledgeBase, query: str) -> list[str]:
    return [passage.doc_id for passage in kb.search(query, limit=LIMIT)]


def _retrieval_arm(corpus: Corpus, query_set: list[str]) -> Arm:
    def measure() -> Sample:
        latencies = []
        for query in query_set:
            started = time.perf_counter()
            found = corpus.kb.search(query, limit=LIMIT)
            latencies.append(time.perf_counter() - started)
            _expect(bool(found), f"query {query!r} was drawn from the corpus but found nothing")
        return {
            "p50_ms": percentile(latencies, 50) * 1e3,
            "p95_ms": percentile(latencies, 95) * 1e3,
        }

    return Arm(f"kb.search(query, limit={LIMIT}), {len(corpus.docs):,} documents", measure)


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise InstrumentError(f"corpus section: {problem}")


# -- controls -------------------------------------------------------------------------------


def _defeated_fingerprint(corpus: Corpus, unchanged: Stats) -> Control:
    """Every document changed by one character: a sync must write them all, and slowly."""
    touched = [msgspec.structs.replace(doc, text=doc.text + ".") for doc in corpus.docs]
    seconds, events = corpus.sync(touched)
    wanted = len(touched) + 1
    factor = seconds / unchanged.median
    return Control(
        name=f"re-sync of the {len(touched):,}-document corpus with every text changed by one "
        "character (fingerprint defeated)",
        expected=f"{wanted:,} events, >= {DEFEATED_FACTOR:.0f}x the unchanged sync's time",
        observed=f"{events:,} events, {seconds:.2f} s = {factor:,.0f}x",
        held=events == wanted and factor >= DEFEATED_FACTOR,
    )


def _stale_store_control(corpus: Corpus) -> Control:
    """A store that never applied the edit still holds the old markers: it must find them."""
    edit = [index for index in range(len(corpus.docs)) if index % CHURN == 0]
    chunker = pack_paragraphs()
    with fresh_sqlite() as (url, _):
        store = SqliteMemoryStore(url)
        try:
            for index in edit:
                passages = to_passages(corpus.docs[index], revision=1, chunker=chunker)
                store.append(
                    SCOPE,
                    [
                        MemoryEntry(
                            id=format_passage_id(passage.doc_id, passage.index),
                            content=msgspec.to_builtins(passage_content(passage)),
                        )
                        for passage in passages
                    ],
                )
            found = sum(bool(store.search(SCOPE, marker(0, index))) for index in edit)
        finally:
            store.close()
    return Control(
        name=f"the old markers of the {len(edit)} edited documents searched in a fresh "
        "SqliteMemoryStore still holding their superseded revisions",
        expected=f"all {len(edit)} found (the leak check can see a leak)",
        observed=f"{found} found",
        held=found == len(edit),
    )


# -- tables ---------------------------------------------------------------------------------


def _ingest_table(
    names: list[str], results: Results, builds: list[tuple[int, float, int]], rounds: int
) -> Table:
    rows = []
    floors = [name for name in names if name.startswith(FLOOR)]
    sync_floor, counted_sync_floor, put_floor, counted_floor, in_place_floor = (
        results[name]["docs_per_s"].median for name in floors
    )
    ceilings = {
        floors[0]: f"ceiling of sync: {sync_floor / SYNC_TARGET:.2f}x the sync target",
        floors[1]: (
            f"ceiling of sync through this index: {counted_sync_floor / SYNC_TARGET:.2f}x the "
            "sync target"
        ),
        floors[2]: f"ceiling of put_doc: {put_floor / PUT_TARGET:.2f}x the put_doc target",
        floors[3]: (
            f"ceiling of put_doc through this index: {counted_floor / PUT_TARGET:.2f}x the "
            "put_doc target"
        ),
        floors[4]: (
            f"ceiling of put_doc into the corpus: {in_place_floor / PUT_TARGET:.2f}x the "
            "put_doc target"
        ),
    }
    for name in names:
        stats = results[name]
        rate = stats["docs_per_s"]
        if name in ceilings:
            rows.append((name, rate.cell("/s"), "n/a", ceilings[name]))
            continue
        put = name.startswith("kb.put_doc")
        in_place = put and "new documents into the" in name
        target, floor = (PUT_TARGET, put_floor) if put else (SYNC_TARGET, sync_floor)
        counted = counted_floor if put else counted_sync_floor
        verdict = _verdict(rate.median, target, in_place_floor if in_place else counted)
        verdict += f"; {rate.median / floor:.2f}x its floor, {rate.median / counted:.2f}x "
        verdict += "with the counts"
        if in_place:
            verdict += f", {rate.median / in_place_floor:.2f}x the same rows' floor in place"
        rows.append((name, rate.cell("/s"), _events(stats["events"]), verdict))
    for size, seconds, events in builds:
        built = size / seconds
        rows.append(
            (
                f"kb.sync of {size:,} documents into an empty corpus (fixture build; one sample)",
                f"{built:,.0f}/s",
                f"{events:,}",
                f"{_verdict(built, SYNC_TARGET, counted_sync_floor)}; "
                f"{built / sync_floor:.2f}x its floor, "
                f"{built / counted_sync_floor:.2f}x with the counts",
            )
        )
    return Table(
        title="Ingest, documents per second (event append and indexing included)",
        columns=(
            "arm",
            "docs/s",
            "events appended",
            f"target: put_doc >= {PUT_TARGET:,.0f}/s, sync >= {SYNC_TARGET:,.0f}/s; verdict "
            "against the floor with the counts (in place, into the corpus); rate over the floors",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high), unless marked one sample",
    )


def _sync_table(
    names: list[str], results: Results, leaks: list[int], large: int, rounds: int
) -> Table:
    rows = []
    for name in names:
        stats = results[name]
        seconds, events = stats["seconds"], stats["events"]
        verdict = "n/a"
        if name == f"unchanged sync, {large:,} documents":
            ok = seconds.median * 1e3 < UNCHANGED_TARGET_MS and set(events.samples) == {1.0}
            verdict = (
                f"{'met' if ok else 'MISSED'} ({seconds.median * 1e3 / UNCHANGED_TARGET_MS:.1f}x "
                "the limit)"
            )
        stale = "n/a"
        if name.startswith("sync with 1% edited"):
            stale = f"{sum(leaks)} over {len(leaks)} rounds (must be 0)"
        ms = Stats(tuple(value * 1e3 for value in seconds.samples))
        rows.append((name, ms.cell(" ms"), _events(events), stale, verdict))
    return Table(
        title="Sync of a built corpus: time and events appended",
        columns=(
            "arm",
            "time",
            "events appended",
            "stale passages retrievable",
            f"target: unchanged {large:,} < {UNCHANGED_TARGET_MS:.0f} ms with 1 event",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high); events appended in every "
        "round (low-high)",
    )


def _retrieval_table(name: str, results: Results, rounds: int) -> Table:
    stats = results[name]
    return Table(
        title=f"Retrieval latency, {QUERIES} queries per round",
        columns=("arm", "p50", "p95"),
        rows=((name, stats["p50_ms"].cell(" ms"), stats["p95_ms"].cell(" ms")),),
        note=f"median over {rounds} interleaved rounds of each round's p50/p95 (low-high)",
    )


def _events(stats: Stats) -> str:
    low, high = min(stats.samples), max(stats.samples)
    return f"{low:,.0f}" if low == high else f"{low:,.0f}-{high:,.0f}"


def _verdict(rate: float, target: float, ceiling: float) -> str:
    """The shared verdict (``floor_verdict``: met, floor-bound or MISSED, with the ceiling)
    against ``ceiling``, the tightest floor measured beside the row: the one writing the
    counts the index keeps (and, into the corpus, in place), which loom must write too; then
    the rate over the target. The floor without the counts is higher, so it is no ceiling."""
    return f"{floor_verdict(rate, target, ceiling, unit='/s')}; {rate / target:.2f}x the target"
