"""Knowledge-base search ranks as the brute-force reference through any history of writes.

`test_ranking_reference.py` pins every mode to a brute-force ranking on one crafted history.
The statistics behind it are optimised (ADR 0056: kept counts and pruned search; ADR 0059,
0062, 0064: counts kept by position, summed per bucket at three levels, a revision's end and
append counted together), and a crafted history reaches few of their paths. Here a Hypothesis
state machine writes a random history instead: ``put_doc`` (new, revised, unchanged),
``remove_doc``, ``sync`` (writing, keeping and removing), erasure (which rewrites the past),
the index rebuilt from the log (whole, or up to a position and caught up from there), a
reopened Loom, count tables dropped and refilled on open, and padding in another scope that
moves the log across the level-1 block edge (2^8).

The vocabulary is small so terms collide and ``N`` and ``df`` move; ``node`` is in most
passages (the idf floor), twins share one text (ties), and the ids sort differently as
numbers and as text (``t10`` before ``t9``). After every step:

* the passages are those of the documents the machine wrote, cut by the chunker;
* the kept tables equal a recount and a refill from the rows;
* a current search equals the reference over ``kb.passages()`` (every mode, a question, limit
  and filter that rotate with the step), and so does the search as of the head.

The rules ``search_now`` and ``search_as_of`` draw more: any question, mode, limit and
filter, now or as of any earlier position, where ``kb.as_of(P).passages()`` must also be what
``kb.passages()`` was when ``P`` was the head (less the documents erased since). A vector
search appends events too (the embeddings it recorded, ADR 0061), so positions are noted as
the machine sees them, never counted.

The same machine runs on PostgreSQL (``scripts/test`` starts the server), where statement-level
triggers keep the counts. ``LOOM_FUZZ_EXPLORE=1`` searches at random with more examples, as
the fuzz tests do.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from sqlalchemy import create_engine

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base, pack_paragraphs
from loom_knowledge.corpus.keys import corpus_key
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_knowledge.corpus.retrieval import MODES, Mode
from loom_knowledge.domain.chunking import to_passages
from loom_memory import HashingEmbedder
from loom_memory.position_counts import read_counts
from loom_memory.postgres_counts import drop_count_triggers, drop_position_triggers
from loom_memory.validity import TemporalSqlStore
from loom_runtime import Loom, MasterKey
from loom_runtime.projection import rebuild
from replay_tests.budgets import QUICK
from replay_tests.conftest import NO_PG, PG_URL, postgres_databases
from replay_tests.knowledge.test_ranking_reference import FLOOR, _named, _reference
from replay_tests.memory.test_kept_counts import _kept, _recounted
from replay_tests.memory.test_position_counts import _recount, _refilled, _tables

EXPLORE = bool(os.environ.get("LOOM_FUZZ_EXPLORE"))
KEY = MasterKey(b"s" * 32)
SCOPE = "runbooks"
CHUNKER = pack_paragraphs(60)
"""Short passages: two paragraphs of up to four words pack when they fit, three rarely."""
EVERY = "node"
"""A word in most passages: its df reaches N/2 and its idf the floor."""
WORDS = ("disk", "logs", "rotate", "volume", "worker", "pool", "wal", "replica", "menu")
TWIN = "node rotate disk logs"
HEAVY = " ".join(["wal"] * 14)
"""A term 14 times in one passage: its share, ``w * 11 tf // (5 tf + 6)``, is above ``2 w``,
close to the bound a pruned search assumes (``w * 11 // 5``)."""
IDS = ("t1", "t2", "t9", "t10", "T3", "x#1")
"""As numbers 1 < 2 < 9 < 10, as text ``T3 < t1 < t10 < t2 < t9 < x#1``."""
SOURCES = ("a", "b")
METAS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"team": "sre"},
    {"team": "dba"},
    {"team": "sre", "tags": ["queue"]},
)
FILTERS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"team": "sre"},
    {"team": ["dba", "sre"]},
    {"tags": "queue"},
)
QUESTIONS = (
    "disk",
    "node",
    "logs rotate",
    "disk disk wal",
    "node menu replica",
    "the",  # a stop word: no term
    "zebra",  # in no passage
    "sre queue",  # meta is searchable text
    "rotate volume worker pool node",
    "the node of wal logs",
)
LIMITS = (1, 3, 10)
TERMS = sorted({EVERY, *WORDS, "sre", "dba", "queue", "zebra"})
"""Every term a passage of this corpus can hold (meta values are text), and one it never does."""
PADDING = "padding"
"""Another scope, written to move the log's position without touching this corpus."""

_paragraphs = st.builds(
    lambda first, rest: " ".join([first, *rest]).strip(),
    st.sampled_from((EVERY, EVERY, EVERY, "")),
    st.lists(st.sampled_from((*WORDS, "the")), max_size=3),
)
TEXTS = st.one_of(
    st.sampled_from((TWIN, HEAVY, f"node {HEAVY}")),
    st.lists(_paragraphs, min_size=1, max_size=3).map("\n\n".join),
)
TITLES = st.sampled_from((None, None, "Node logs", "Menu"))
DOCS = st.builds(
    lambda id, text, title, meta: Doc(id=id, text=text, title=title, meta=meta),
    st.sampled_from(IDS),
    TEXTS,
    TITLES,
    st.sampled_from(METAS),
)


def _expected(docs: dict[str, Doc]) -> list[tuple[str, int, str, str | None, Any]]:
    """The passages the chunker cuts from ``docs``, in id order (revision left out)."""
    cut = (p for doc in docs.values() for p in to_passages(doc, revision=1, chunker=CHUNKER))
    return sorted((p.doc_id, p.index, p.text, p.title, p.meta) for p in cut)


class RankingMachine(RuleBasedStateMachine):
    """One corpus on a fresh SQLite log, written at random and checked after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.url = self._database()
        self.loom = Loom(self.url, encryption=KEY)
        self.kb = self._open()
        self.docs: dict[str, Doc] = {}
        """The live documents, as last written."""
        self.owners: dict[str, str] = {}
        self.written: set[str] = set()
        """Every id ever written (an erasure names one), an empty document's too."""
        self.erased: set[str] = set()
        self.seen: dict[int, list[tuple[str, int, int, str]]] = {0: []}
        """What ``kb.passages()`` was when each position was the head."""
        self.last = 0
        """The head at the last :meth:`_checkpoint`."""
        self.steps = itertools.count()
        self.padded = 0
        self._checkpoint(0)

    def _database(self) -> str:
        """A fresh log database's URL (a SQLite file in a folder of its own)."""
        self.folder = tempfile.mkdtemp(prefix="loom-ranking-")
        return f"sqlite:///{os.path.join(self.folder, 'loom.db')}"

    def _open(self) -> KnowledgeBase:
        return open_knowledge_base(
            self.loom, SCOPE, chunker=CHUNKER, embedder=HashingEmbedder(), min_score=FLOOR
        )

    def _store(self) -> TemporalSqlStore:
        store = corpus_index(self.loom).store
        assert isinstance(store, TemporalSqlStore)
        return store

    def _checkpoint(self, since: int) -> None:
        """After a write that began at head ``since``: note the corpus at the head, and at the
        positions before it whose corpus is known. Those up to ``since`` hold what the last
        checkpoint saw: a search appends events too (the embeddings it recorded, ADR 0061),
        never a passage. Those after ``since`` hold it too when the write changed no passage
        of this scope (padding)."""
        before = self.seen[self.last]
        for position in range(self.last + 1, since + 1):
            self.seen.setdefault(position, before)
        self.last = head = self.loom.log.position
        passages = _named(self.kb.passages())
        if passages == before:
            for position in range(since + 1, head):
                self.seen.setdefault(position, passages)
        self.seen[head] = passages

    def teardown(self) -> None:
        self.loom.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- writes -------------------------------------------------------------------------------

    @initialize(offset=st.sampled_from((0, 0, 250)))
    def start(self, offset: int) -> None:
        """Begin at position 0, or just below the level-1 block edge (256)."""
        if offset:
            self._pad(offset)

    def _pad(self, count: int) -> None:
        since = self.loom.log.position
        self.padded += 1
        other = open_knowledge_base(self.loom, PADDING)
        docs = [Doc(id=f"p{n}", text=f"pad {self.padded} disk") for n in range(count - 1)]
        other.sync(docs, source="pad", allow_mass_delete=True)
        self._checkpoint(since)

    def _wrote(self, docs: dict[str, Doc], source: str) -> None:
        for doc_id, doc in docs.items():
            self.docs[doc_id], self.owners[doc_id] = doc, source
            self.written.add(doc_id)

    @rule(count=st.integers(1, 120))
    def pad(self, count: int) -> None:
        self._pad(count)

    @rule(doc=DOCS, source=st.sampled_from(SOURCES))
    def put(self, doc: Doc, source: str) -> None:
        if doc.id in self.erased:
            return
        since = self.loom.log.position
        owner = self.owners.get(doc.id, source)
        self.kb.put_doc(doc, source=owner)
        self._wrote({doc.id: doc}, owner)
        self._checkpoint(since)

    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def put_unchanged(self, data: st.DataObject) -> None:
        doc_id = data.draw(st.sampled_from(sorted(self.docs)))
        head = self.loom.log.position
        self.kb.put_doc(self.docs[doc_id], source=self.owners[doc_id])
        assert self.loom.log.position == head, "an unchanged document was written"

    @rule(doc_id=st.sampled_from(IDS))
    def remove(self, doc_id: str) -> None:
        since = self.loom.log.position
        removed = self.kb.remove_doc(doc_id, source=self.owners.get(doc_id))
        assert removed == (doc_id in self.docs)
        self.docs.pop(doc_id, None)
        self.owners.pop(doc_id, None)
        self._checkpoint(since)

    @rule(source=st.sampled_from(SOURCES), docs=st.lists(DOCS, max_size=5), keep=st.booleans())
    def sync(self, source: str, docs: list[Doc], keep: bool) -> None:
        """Sync ``docs`` (less those of the other source or erased) as ``source``'s complete
        set; with ``keep``, its documents not drawn are kept (sent unchanged)."""
        chosen = {
            d.id: d
            for d in docs
            if self.owners.get(d.id, source) == source and d.id not in self.erased
        }
        if keep:
            mine = {i: d for i, d in self.docs.items() if self.owners[i] == source}
            chosen = {**mine, **chosen}
        since = self.loom.log.position
        result = self.kb.sync(list(chosen.values()), source=source, allow_mass_delete=True)
        dropped = sorted(i for i, s in self.owners.items() if s == source and i not in chosen)
        assert sorted(result.removed) == dropped
        for doc_id in dropped:
            del self.docs[doc_id], self.owners[doc_id]
        self._wrote(chosen, source)
        self._checkpoint(since)

    @precondition(lambda self: len(self.erased) < 2 and self.written - self.erased)
    @rule(data=st.data())
    def erase(self, data: st.DataObject) -> None:
        """Erase a document (live or removed): gone from every view, of the past too. At
        most two per history: an erased id can never be written again."""
        doc_id = data.draw(st.sampled_from(sorted(self.written - self.erased)))
        since = self.loom.log.position
        self.loom.erase(document=f"{SCOPE}:{doc_id}", reason="test", by="machine")
        self.erased.add(doc_id)
        self.docs.pop(doc_id, None)
        self.owners.pop(doc_id, None)
        for position, passages in self.seen.items():
            self.seen[position] = [p for p in passages if p[0] != doc_id]
        self._checkpoint(since)

    @rule(data=st.data())
    def rebuild_index(self, data: st.DataObject) -> None:
        """Rebuild the corpus index from the log, whole or up to a position (whose passages
        are then those of the view as of it, and what they were when it was the head); the
        next read catches up from there, pages of many events applied on top."""
        upto = data.draw(st.none() | st.integers(0, self.loom.log.position))
        then = None if upto is None else _named(self.kb.as_of(upto).passages())
        index = corpus_index(self.loom)
        rebuild(self.loom.log, index, upto=upto)
        if upto is not None:  # as of P, the rebuild stopped at P, and the head at P agree
            assert _named(index.read_passages(SCOPE)) == then == self.seen.get(upto, then)

    @rule(drop_counts=st.booleans())
    def reopen(self, drop_counts: bool) -> None:
        """Close the Loom and open another; with ``drop_counts``, the count tables and their
        triggers dropped first (a store written by older code: the open refills them)."""
        store = self._store()
        self.loom.close()
        if drop_counts:
            entries = store.entries.name
            engine = create_engine(self.url)
            try:
                with engine.begin() as conn:
                    if conn.dialect.name == "postgresql":
                        prefix = store.table_prefix
                        for statement in [
                            *drop_count_triggers(prefix),
                            *drop_position_triggers(prefix),
                        ]:
                            conn.exec_driver_sql(statement)
                    else:
                        for name in ("count_delete", "count_end", "count_start"):
                            conn.exec_driver_sql(f"DROP TRIGGER {entries}_{name}")
                        for name in ("at_end", "at_move", "at_delete"):
                            conn.exec_driver_sql(f"DROP TRIGGER {entries}_{name}")
                    conn.exec_driver_sql(f"DROP INDEX {store.current_index}")
                    for table in (
                        store.row_counts_table,
                        store.term_counts_table,
                        store.rows_at_table,
                        store.terms_at_table,
                    ):
                        conn.exec_driver_sql(f"DROP TABLE {table}")
            finally:
                engine.dispose()
        self.loom = Loom(self.url, encryption=KEY)
        self.kb = self._open()

    # -- checks -------------------------------------------------------------------------------

    def _compare(
        self, view: Any, passages: Any, question: str, mode: Mode, limit: int, filter: Any
    ) -> None:
        got = view.search(question, mode=mode, limit=limit, filter=filter)
        want = _reference(passages, question, mode, limit, filter)
        assert _named(got) == _named(want), (question, mode, limit, filter)

    @rule(
        question=st.sampled_from(QUESTIONS),
        mode=st.sampled_from(MODES),
        limit=st.sampled_from(LIMITS),
        filter=st.sampled_from(FILTERS),
    )
    def search_now(self, question: str, mode: Mode, limit: int, filter: Any) -> None:
        self._compare(self.kb, self.kb.passages(), question, mode, limit, filter)

    @rule(
        data=st.data(),
        question=st.sampled_from(QUESTIONS),
        mode=st.sampled_from(MODES),
        limit=st.sampled_from(LIMITS),
        filter=st.sampled_from(FILTERS),
    )
    def search_as_of(
        self, data: st.DataObject, question: str, mode: Mode, limit: int, filter: Any
    ) -> None:
        """As of a noted position (or any position, partway through a sync)."""
        head = self.loom.log.position
        position = data.draw(st.sampled_from(sorted(self.seen)) | st.integers(0, head))
        view = self.kb.as_of(position)
        passages = view.passages()
        self._statistics_at(position)
        if position in self.seen:
            assert _named(passages) == self.seen[position], position
        self._compare(view, passages, question, mode, limit, filter)

    @invariant()
    def passages_are_the_documents_cut(self) -> None:
        assert sorted(r.id for r in self.kb.list_docs()) == sorted(self.docs)
        got = sorted((p.doc_id, p.index, p.text, p.title, p.meta) for p in self.kb.passages())
        assert got == _expected(self.docs)

    def _statistics_at(self, position: int) -> None:
        """``N`` and every term's df as of ``position``, read as a search reads them (sums
        over the buckets of three levels), equal a recount of the rows valid then. A ranking
        hides a statistic that is off but keeps the order (both doubled, say)."""
        store, key = self._store(), corpus_key(SCOPE)
        with store.engine.connect() as conn:
            read = read_counts(
                conn,
                rows=store.rows_at_table,
                terms=store.terms_at_table,
                key=key,
                words=TERMS,
                position=position,
            )
        total, frequencies = _recount(store, key, position)
        assert read == (total, {t: frequencies[t] for t in TERMS if t in frequencies}), position

    @invariant()
    def kept_counts_equal_a_recount(self) -> None:
        """The current counts and the counts by position equal a recount and a refill, and
        the statistics as of a position noted earlier (rotating with the step) a recount."""
        store = self._store()
        assert _kept(store) == _recounted(store)
        assert _tables(store) == _refilled(store)
        noted = sorted(self.seen)
        self._statistics_at(noted[(self.last * 7919 + len(noted)) % len(noted)])

    @invariant()
    def searches_rank_as_the_reference(self) -> None:
        """Every mode, with a question, limit and filter rotating with the step; as of the
        head too."""
        step = next(self.steps)
        passages = self.kb.passages()
        view = self.kb.as_of(self.loom.log.position)
        for n, mode in enumerate(MODES):
            question = QUESTIONS[(step + 3 * n) % len(QUESTIONS)]
            limit, filter = LIMITS[(step + n) % len(LIMITS)], FILTERS[step % len(FILTERS)]
            self._compare(self.kb, passages, question, mode, limit, filter)
            self._compare(view, passages, question, mode, limit, filter)


class PostgresRankingMachine(RankingMachine):
    """The same machine on a fresh database of the PostgreSQL test server, whose counts are
    kept by statement-level triggers (ADR 0056 and 0059, amended)."""

    def _database(self) -> str:
        self.folder = tempfile.mkdtemp(prefix="loom-ranking-")  # nothing in it: uniform teardown
        self._given = contextlib.ExitStack()
        return self._given.enter_context(postgres_databases()())

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self._given.close()  # gives the database back, to be emptied


def _settings(examples: int, steps: int) -> settings:
    """The fuzz tests' terms (``replay_tests/fuzz/conftest.py``): deterministic, no example
    database, a third of the examples in the quick run, 300 random ones to explore."""
    return settings(
        derandomize=not EXPLORE,
        database=None,
        max_examples=300 if EXPLORE else max(1, examples // 3) if QUICK else examples,
        stateful_step_count=40 if EXPLORE else steps,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# About 8 s on SQLite (2 cores, loaded); a PostgreSQL example costs several times more.
RankingMachine.TestCase.settings = _settings(20, 25)
TestRankingStateful = RankingMachine.TestCase

PostgresRankingMachine.TestCase.settings = _settings(3, 20)
TestRankingStatefulPostgres = pytest.mark.postgres(
    pytest.mark.skipif(not PG_URL, reason=NO_PG)(PostgresRankingMachine.TestCase)
)
