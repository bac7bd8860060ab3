"""Erasure in an encrypted log holds through any history of writes: a Hypothesis state machine.

`test_document_erasure.py` and its siblings pin each claim of ADR 0049, 0053 and 0055 on one
crafted history. Here a state machine writes a random one instead, on a fresh SQLite log with a
master key of its own (``LOOM_MASTER_KEY`` set for the machine's life), through two Looms on
the same file (two processes, each caching the data keys it used): ``put_doc`` (new, revised,
unchanged, another source's), ``remove_doc``, ``sync`` of a subset, erasure of a document by
name (a dry run first, which must write nothing; a document never written, one already erased,
malformed and ambiguous names refused typed with nothing written), writes of an erased document
(refused typed, nothing written), retention of a scope by age on a frozen clock, a recorded
retrieval, its replay and its audit, memory entries and the erasure of their key (and their
retention by age), rebuilds of the read models from the log (whole, or up to an earlier
position) and reopened Looms.

Two scopes, ``handbook`` and ``handbook:ops``, and a document ``ops:d3``, so the name
``handbook:ops:d3`` fits a document of each scope: the log decides which it names, and one
that fits both is refused (ADR 0055, amended "scope names with colons"). Every revision's text
and title carry a marker word unique to it, so a leak is found by a grep. After every step:

* a search for each live document's marker finds it, and a search for every other marker
  (erased, superseded, removed, refused, the other scope's) finds nothing, in both Looms;
* the manifest and passages are the model's; as of an earlier position, the documents listed
  are those live then (erased ones too) and no passage of an erased one shows, ``erased()``
  saying where each was erased (``look_back`` asks ``loom knowledge as-of --json`` too);
* the chain verifies and the key table agrees with the forget log (what ``loom verify``
  checks); the forget events are the erasures applied;
* the memory's keys read as written, an erased one as empty;
* every sixth step (and in the rule that draws it), the raw database files, after a
  checkpoint and VACUUM, and every FTS5 index's own terms hold no marker of an erased
  document or memory key, nor of a write that was refused.

A rebuild from position 0 (and reopened Looms) must reproduce the manifest, passages, revision
history, erasures and memory exactly, and a rebuild up to P must equal the view as of P. It
found a defect: a Loom that had cached a document's key before the other erased it reopened
the erased text in its rebuild of the corpus index (``rebuild_up_to``).

``LOOM_FUZZ_EXPLORE=1`` searches at random with more examples, as the fuzz tests do.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time
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
from typer.testing import CliRunner

from loom_knowledge import Doc, KnowledgeBase, SourceConflictError, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_knowledge.corpus.knowledge_base import corpus_index, drop_corpus
from loom_knowledge.tools.audit import audit
from loom_memory import EventSourcedMemory, MemoryEntry, SqliteMemoryStore
from loom_runtime import (
    ErasureReport,
    ErasureSubjectError,
    FlowContext,
    Loom,
    MasterKey,
    SubjectErasedError,
    verify_keys,
    verify_log,
)
from loom_runtime.erasure import forget_events
from loom_runtime.projection import rebuild
from loom_runtime.tools.cli import app
from replay_tests.budgets import QUICK
from replay_tests.runtime.test_erasure import _raw_bytes_sqlite

EXPLORE = bool(os.environ.get("LOOM_FUZZ_EXPLORE"))
ENV = "LOOM_MASTER_KEY"
SCOPES = ("handbook", "handbook:ops")
IDS = ("d1", "d3", "ops:d3")
"""``handbook:ops:d3`` names ``ops:d3`` of ``handbook`` or ``d3`` of ``handbook:ops``."""
SOURCES = ("a", "b")
NOTES = ("k1", "k2")
"""The keys of the event-sourced memory ``memory``."""
MEMORY = "memory"
TAIL = 10
"""How many of a marker's last characters a grep of the raw files looks for."""
WORDS = ("disk", "logs", "rotate", "badge", "address", "the", "rota")
START = datetime(2026, 1, 1, 12, tzinfo=UTC)
AGES = (1, 7, 30, 90)
"""Retention ages, in days."""
UNKNOWN = ("handbook:nope", "nowhere:d1", "no-colon", ":d1", "handbook:", '["handbook"]', "[1,2]")
"""Document names that name nothing written (or nothing at all)."""

Key = tuple[str, str]
"""A document: (scope, doc id)."""

TEXTS = st.tuples(
    st.lists(st.sampled_from(WORDS), max_size=3),
    st.one_of(st.none(), st.lists(st.sampled_from(WORDS), max_size=3)),
    st.booleans(),
)
"""A text's words: its first paragraph's, a second paragraph's (or none), a title or not."""
Text = tuple[list[str], list[str] | None, bool]
PICKS = st.lists(
    st.tuples(st.sampled_from(IDS), st.booleans(), TEXTS),
    unique_by=lambda pick: pick[0],
    max_size=len(IDS),
)
"""A sync's documents: each an id, whether to revise it if it is live, its text."""
Pick = tuple[str, bool, Text]


def _fts_terms(url: str) -> set[str]:
    """Every term of every FTS5 index in the database (the corpus's and the memory's), read
    from the index itself through its ``fts5vocab`` table."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            vocab = conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE sql LIKE '%USING fts5vocab%'"
            ).scalars()
            return {
                t
                for name in list(vocab)
                for t in conn.exec_driver_sql(f"SELECT term FROM {name}").scalars()
            }
    finally:
        engine.dispose()


def _splits(name: str) -> list[Key]:
    """Every (scope, doc id) ``SCOPE:DOC_ID`` could name, split at each colon."""
    return [(name[:at], name[at + 1 :]) for at, c in enumerate(name) if c == ":"]


class _Process:
    """One Loom on the log, as one process of an application holds it: its knowledge bases,
    its memory, and a flow that retrieves. The machine runs two on the same file, so a
    write, an erasure or a read model's catch-up is as often another process's as its own."""

    def __init__(self, url: str) -> None:
        self.loom = Loom(url, encryption=MasterKey.from_env(ENV))
        kbs = {scope: open_knowledge_base(self.loom, scope) for scope in SCOPES}
        self.kbs: dict[str, KnowledgeBase] = kbs
        self.memory = EventSourcedMemory(
            self.loom, store=SqliteMemoryStore(self.loom.log.engine), name=MEMORY
        )

        @self.loom.flow("ask")
        def ask(ctx: FlowContext, scope: str, question: str) -> list[str]:
            found = kbs[scope].retrieve(question, decide=ctx.decide, limit=20)
            return sorted({p.doc_id for p in found})

    def close(self) -> None:
        self.memory.close()
        self.loom.close()


VIA = st.sampled_from((0, 1))
"""Which process writes or erases."""


class ErasureMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="loom-erasure-")
        self.url = f"sqlite:///{self.folder}/loom.db"
        self.saved_key = os.environ.get(ENV)
        os.environ[ENV] = MasterKey.generate()
        self.now = START
        self.freezer = freeze_time(START)
        self.clock = self.freezer.start()
        """Every event's time is the machine's clock, which only ``wait`` moves."""
        self.count = 0
        # The model.
        self.markers: dict[Key, list[str]] = {}
        """Every revision's marker, oldest first: one entry per revision in the log."""
        self.live: dict[Key, tuple[Doc, str]] = {}
        """The current text of each live document, and its source."""
        self.erased: dict[Key, int] = {}
        """Each erased document and the position of the forget event that erased it."""
        self.touched: dict[Key, datetime] = {}
        """When each document was last written, or last found unchanged by a sync."""
        self.written_scopes: set[str] = set()
        self.unstored: list[str] = []
        """Markers of writes that were refused: in no read model, no file."""
        self.checkpoints: list[tuple[int, dict[Key, str]]] = [(0, {})]
        """Log positions, and the current marker of each document live there."""
        self.retrieved: dict[Key, set[str]] = {}
        """The executions whose recorded retrieval returned a passage of each document."""
        self.asked: dict[str, tuple[str, set[str]]] = {}
        """Each execution: its scope and the documents it retrieved."""
        self.notes: dict[str, list[str]] = {}
        self.notes_erased: dict[str, int] = {}
        self.notes_touched: dict[str, datetime] = {}
        self.forgets = 0
        self.steps = 0
        self.probe = 0
        """The checkpoint before the latest erasure: its documents were live then."""
        try:
            self._open()
        except BaseException:
            self._restore()
            raise

    # -- the Looms ------------------------------------------------------------------------------

    def _open(self) -> None:
        self.processes = [_Process(self.url), _Process(self.url)]
        main = self.processes[0]
        self.loom, self.kbs, self.memory = main.loom, main.kbs, main.memory

    def _close(self) -> None:
        for process in self.processes:
            process.close()

    def teardown(self) -> None:
        try:
            self._close()
        finally:
            self._restore()

    def _restore(self) -> None:
        self.freezer.stop()
        if self.saved_key is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self.saved_key
        shutil.rmtree(self.folder, ignore_errors=True)

    def _head(self) -> int:
        return self.loom.log.position

    def _marker(self) -> str:
        self.count += 1
        return "zq" + hashlib.sha256(f"marker {self.count}".encode()).hexdigest()[:14]

    def _doc(self, doc_id: str, text: Text) -> tuple[Doc, str]:
        marker = self._marker()
        first, second, titled = text
        body = " ".join([*first, marker])
        if second is not None:
            body += "\n\n" + " ".join([marker, *second])
        title = f"About {marker}" if titled else None
        return Doc(id=doc_id, title=title, text=body), marker

    def _checkpoint(self) -> None:
        head = self._head()
        if head != self.checkpoints[-1][0]:
            current = {key: self.markers[key][-1] for key in self.live}
            self.checkpoints.append((head, current))

    def _forgotten(self, key: Key, position: int) -> None:
        self.probe = len(self.checkpoints) - 1
        self.erased[key] = position
        self.live.pop(key, None)

    def _erase(self, via: int, **named: Any) -> ErasureReport:
        return self.processes[via].loom.erase(reason="request #1", by="dpo", **named)

    def _refused_erasure(self, via: int, **named: Any) -> None:
        """Both the dry run and the erasure are refused typed, and nothing is written."""
        before = self._head()
        for dry_run in (True, False):
            with pytest.raises(ErasureSubjectError):
                self._erase(via, dry_run=dry_run, **named)
        assert self._head() == before

    # -- corpus writes ------------------------------------------------------------------------

    @rule(
        scope=st.sampled_from(SCOPES),
        doc_id=st.sampled_from(IDS),
        source=st.sampled_from(SOURCES),
        revise=st.booleans(),
        text=TEXTS,
        via=VIA,
    )
    def put_doc(
        self, scope: str, doc_id: str, source: str, revise: bool, text: Text, via: int
    ) -> None:
        key = (scope, doc_id)
        kb = self.processes[via].kbs[scope]
        before = self._head()
        live = self.live.get(key)
        if live is not None and not revise and live[1] == source:
            record = kb.put_doc(live[0], source=source)  # unchanged: writes nothing
            assert self._head() == before
            assert record.revision == len(self.markers[key])
            return
        doc, marker = self._doc(doc_id, text)
        if key in self.erased:
            with pytest.raises(SubjectErasedError) as refused:
                kb.put_doc(doc, source=source)
            assert refused.value.position == self.erased[key]
            assert self._head() == before
            self.unstored.append(marker)
            return
        if live is not None and live[1] != source:
            with pytest.raises(SourceConflictError):
                kb.put_doc(doc, source=source)
            assert self._head() == before
            self.unstored.append(marker)
            return
        record = kb.put_doc(doc, source=source)
        assert self._head() > before
        self.markers.setdefault(key, []).append(marker)
        assert (record.id, record.revision, record.source) == (
            doc_id,
            len(self.markers[key]),
            source,
        )
        self.live[key] = (doc, source)
        self.touched[key] = self.now
        self.written_scopes.add(scope)
        self._checkpoint()

    @rule(
        scope=st.sampled_from(SCOPES),
        doc_id=st.sampled_from(IDS),
        source=st.sampled_from(SOURCES),
        via=VIA,
    )
    def remove_doc(self, scope: str, doc_id: str, source: str, via: int) -> None:
        key = (scope, doc_id)
        kb = self.processes[via].kbs[scope]
        before = self._head()
        live = self.live.get(key)
        if live is None:  # never written, removed, or erased
            assert kb.remove_doc(doc_id, source=source) is False
            assert self._head() == before
            return
        if live[1] != source:
            with pytest.raises(SourceConflictError):
                kb.remove_doc(doc_id, source=source)
            assert self._head() == before
            return
        assert kb.remove_doc(doc_id, source=source) is True
        assert self._head() > before
        del self.live[key]
        self._checkpoint()

    @initialize(
        first=PICKS,
        second=PICKS,
        sources=st.lists(st.sampled_from(SOURCES), min_size=2, max_size=2),
    )
    def a_corpus(self, first: list[Pick], second: list[Pick], sources: list[str]) -> None:
        """Both scopes start with some documents, so most histories erase something."""
        self._sync(SCOPES[0], sources[0], first, 0)
        self._sync(SCOPES[1], sources[1], second, 1)

    @rule(scope=st.sampled_from(SCOPES), source=st.sampled_from(SOURCES), picks=PICKS, via=VIA)
    def sync(self, scope: str, source: str, picks: list[Pick], via: int) -> None:
        self._sync(scope, source, picks, via)

    def _sync(self, scope: str, source: str, picks: list[Pick], via: int) -> None:
        kb = self.processes[via].kbs[scope]
        before = self._head()
        docs: list[Doc] = []
        fresh: dict[str, tuple[Doc, str]] = {}
        unchanged: set[str] = set()
        for doc_id, revise, text in picks:
            live = self.live.get((scope, doc_id))
            if live is not None and live[1] == source and not revise:
                docs.append(live[0])
                unchanged.add(doc_id)
            else:
                doc, marker = self._doc(doc_id, text)
                docs.append(doc)
                fresh[doc_id] = (doc, marker)
        picked = {doc_id for doc_id, _, _ in picks}
        conflicts = {d for d in picked if (live := self.live.get((scope, d))) and live[1] != source}
        erased = {d for d in picked if (scope, d) in self.erased}
        if conflicts or erased:
            error: type[Exception] = SourceConflictError if conflicts else SubjectErasedError
            with pytest.raises(error):
                kb.plan_sync(docs, source=source, allow_mass_delete=True)
            with pytest.raises(error) as refused:
                kb.sync(docs, source=source, allow_mass_delete=True)
            if isinstance(refused.value, SubjectErasedError):
                assert refused.value.position in {self.erased[(scope, d)] for d in erased}
            assert self._head() == before
            self.unstored.extend(marker for _, marker in fresh.values())
            return
        plan = kb.plan_sync(docs, source=source, allow_mass_delete=True)
        assert self._head() == before
        result = kb.sync(docs, source=source, allow_mass_delete=True)
        removed = {
            d for (s, d), (_, owner) in self.live.items() if s == scope and owner == source
        } - picked
        for done in (plan, result):
            assert (set(done.written), set(done.unchanged), set(done.removed)) == (
                set(fresh),
                unchanged,
                removed,
            )
        assert self._head() > before
        for doc_id, (doc, marker) in fresh.items():
            self.markers.setdefault((scope, doc_id), []).append(marker)
            self.live[(scope, doc_id)] = (doc, source)
        for doc_id in [*fresh, *unchanged]:
            self.touched[(scope, doc_id)] = self.now
        for doc_id in removed:
            del self.live[(scope, doc_id)]
        self.written_scopes.add(scope)
        self._checkpoint()

    # -- erasure ------------------------------------------------------------------------------

    @rule(scope=st.sampled_from(SCOPES), doc_id=st.sampled_from(IDS), pair=st.booleans(), via=VIA)
    def erase_document(self, scope: str, doc_id: str, pair: bool, via: int) -> None:
        """Erase by ``SCOPE:DOC_ID`` (resolved by the log) or by the pair form (exact)."""
        if pair:
            name = json.dumps([scope, doc_id])
            fits = [(scope, doc_id)] if (scope, doc_id) in self.markers else []
        else:
            name = f"{scope}:{doc_id}"
            fits = [key for key in _splits(name) if key in self.markers]
        if len(fits) != 1:  # never written, or a name two documents fit
            self._refused_erasure(via, document=name)
            return
        [key] = fits
        subject = document_subject(*key)
        before = self._head()
        if key in self.erased:
            dry = self._erase(via, document=name, dry_run=True)
            assert (dry.subjects, dry.already_erased) == ((), (subject,))
            with pytest.raises(ErasureSubjectError, match="already erased"):
                self._erase(via, document=name)
            assert self._head() == before
            return
        dry = self._erase(via, document=name, dry_run=True)
        assert not dry.applied and self._head() == before  # a dry run writes nothing
        expected = [(subject, len(self.markers[key]))]
        assert [(s.subject, s.events) for s in dry.subjects] == expected
        assert set(dry.subjects[0].held_by) == self.retrieved.get(key, set())
        report = self._erase(via, document=name)
        assert report.applied and report.unpurged == ()
        assert [(s.subject, s.events) for s in report.subjects] == expected
        assert report.position == self._head() == before + 1
        self.forgets += 1
        self._forgotten(key, report.position)
        self._checkpoint()

    @rule(name=st.sampled_from(UNKNOWN), via=VIA)
    def erase_an_unknown_document(self, name: str, via: int) -> None:
        self._refused_erasure(via, document=name)

    @rule(scope=st.sampled_from((*SCOPES, "handbok")), days=st.sampled_from(AGES))
    def retain_documents(self, scope: str, days: int) -> None:
        """Retention of a scope by age (ADR 0053): every document last written (or found
        unchanged by a sync) before the cutoff, in one forget event. A scope the log never
        held (a typo in a crontab) is refused typed, dry run or not, writing nothing."""
        age = timedelta(days=days)
        before = self._head()
        if scope not in self.written_scopes:
            for dry_run in (True, False):
                with pytest.raises(ErasureSubjectError):
                    self.loom.retain(older_than=age, scope=scope, dry_run=dry_run)
            assert self._head() == before
            return
        cutoff = self.now - age
        old = {key for key, at in self.touched.items() if key[0] == scope and at < cutoff}
        due = {key for key in old if key not in self.erased}
        plan = self.loom.retain(older_than=age, scope=scope, dry_run=True)
        assert self._head() == before
        expected = {(document_subject(*key), len(self.markers[key])) for key in due}
        assert {(s.subject, s.events) for s in plan.subjects} == expected
        assert set(plan.already_erased) == {document_subject(*k) for k in old - due}
        assert {s.subject: set(s.held_by) for s in plan.subjects} == {
            document_subject(*key): self.retrieved.get(key, set()) for key in due
        }
        report = self.loom.retain(older_than=age, scope=scope)
        assert {(s.subject, s.events) for s in report.subjects} == expected
        if not due:  # safe on a schedule: nothing old enough writes nothing
            assert self._head() == before
            return
        assert report.applied and report.position == self._head() == before + 1
        self.forgets += 1
        for key in due:
            self._forgotten(key, report.position)
        self._checkpoint()

    @rule(days=st.integers(1, 100))
    def wait(self, days: int) -> None:
        self.now += timedelta(days=days)
        self.clock.move_to(self.now)

    # -- a recorded retrieval and its audit ----------------------------------------------------

    @rule(scope=st.sampled_from(SCOPES))
    def ask(self, scope: str) -> None:
        live = {d: self.markers[(s, d)][-1] for s, d in self.live if s == scope}
        question = " ".join(live.values()) or "nothing-matches"
        run = self.loom.run("ask", scope=scope, question=question)
        assert run.output == sorted(live)
        execution = str(run.execution_id)
        self.asked[execution] = (scope, set(live))
        for doc_id in live:
            self.retrieved.setdefault((scope, doc_id), set()).add(execution)
        self._checkpoint()

    @precondition(lambda self: bool(self.asked))
    @rule(data=st.data())
    def audit_an_execution(self, data: st.DataObject) -> None:
        """The execution replays as recorded; its audit shows an erased document's passages
        as erased at the forget event's position, without their text."""
        execution = data.draw(st.sampled_from(sorted(self.asked)))
        scope, retrieved = self.asked[execution]
        assert self.loom.replay(execution).identical
        erased_here = {d: p for (s, d), p in self.erased.items() if s == scope}
        assert self.kbs[scope].seen_by(execution).erased() == erased_here
        shown = [p for r in audit(self.loom, execution).retrievals for p in r.passages]
        assert {p.doc_id for p in shown} == retrieved
        for passage in shown:
            if passage.doc_id in erased_here:
                assert (passage.status, passage.ended_position, passage.text) == (
                    "erased",
                    erased_here[passage.doc_id],
                    "",
                )
            else:
                assert passage.status != "erased" and passage.text

    # -- memory keys --------------------------------------------------------------------------

    @rule(key=st.sampled_from(NOTES), words=st.lists(st.sampled_from(WORDS), max_size=3), via=VIA)
    def note(self, key: str, words: list[str], via: int) -> None:
        memory = self.processes[via].memory
        marker = self._marker()
        before = self._head()
        entry = MemoryEntry(content=" ".join([*words, marker]), role="user")
        if key in self.notes_erased:
            with pytest.raises(SubjectErasedError):
                memory.append(key, [entry])
            assert self._head() == before
            self.unstored.append(marker)
            return
        memory.append(key, [entry])
        assert self._head() == before + 1
        self.notes.setdefault(key, []).append(marker)
        self.notes_touched[key] = self.now
        self._checkpoint()

    @rule(key=st.sampled_from(NOTES), via=VIA)
    def erase_memory_key(self, key: str, via: int) -> None:
        name = f"{MEMORY}:{key}"
        if key not in self.notes:
            self._refused_erasure(via, memory_key=name)
            return
        subject = f'memory:["{MEMORY}","{key}"]'
        before = self._head()
        dry = self._erase(via, memory_key=name, dry_run=True)
        assert self._head() == before
        if key in self.notes_erased:
            assert (dry.subjects, dry.already_erased) == ((), (subject,))
            with pytest.raises(ErasureSubjectError, match="already erased"):
                self._erase(via, memory_key=name)
            assert self._head() == before
            return
        assert [(s.subject, s.events) for s in dry.subjects] == [(subject, len(self.notes[key]))]
        report = self._erase(via, memory_key=name)
        assert report.applied and report.position == self._head() == before + 1
        self.forgets += 1
        self.notes_erased[key] = report.position
        self._checkpoint()

    @rule(days=st.sampled_from(AGES))
    def retain_memory(self, days: int) -> None:
        age = timedelta(days=days)
        before = self._head()
        if not self.notes:
            with pytest.raises(ErasureSubjectError):
                self.loom.retain(older_than=age, memory=MEMORY, dry_run=True)
            assert self._head() == before
            return
        cutoff = self.now - age
        old = {key for key, at in self.notes_touched.items() if at < cutoff}
        due = old - set(self.notes_erased)
        report = self.loom.retain(older_than=age, memory=MEMORY)
        expected = {(f'memory:["{MEMORY}","{key}"]', len(self.notes[key])) for key in due}
        assert {(s.subject, s.events) for s in report.subjects} == expected
        if not due:
            assert self._head() == before
            return
        assert report.applied and report.position == self._head() == before + 1
        self.forgets += 1
        for key in due:
            self.notes_erased[key] = report.position
        self._checkpoint()

    # -- read models rebuilt --------------------------------------------------------------------

    def _read_models(self, process: _Process) -> list[Any]:
        state: list[Any] = []
        index = corpus_index(process.loom)
        for scope, kb in process.kbs.items():
            revisions = {
                (d, r + 1)
                for (s, d), markers in self.markers.items()
                if s == scope
                for r in range(len(markers))
            }
            kb.refresh()
            state += [
                kb.list_docs(),
                kb.passages(),
                index.revision_history(scope, revisions),
                index.erasures(scope),
            ]
        state += [[(e.content, e.role) for e in process.memory.read(key)] for key in NOTES]
        return state

    @rule(how=st.sampled_from(("drop", "rebuild", "reopen")), via=VIA)
    def rebuild(self, how: str, via: int) -> None:
        """The read models rebuilt from position 0 (or new Looms on the same files) end in
        the state the live ones were in: the forget events apply again. Either process
        rebuilds; both read the same state after."""
        before = self._read_models(self.processes[0])
        process = self.processes[via]
        if how == "drop":
            drop_corpus(process.loom)
            process.memory.rebuild()
        elif how == "rebuild":
            process.kbs[SCOPES[0]].rebuild()
            process.memory.rebuild()
        else:
            self._close()
            self._open()
        # The process that dropped reads first: ``drop_corpus`` (a test helper, not an API)
        # drops the tables under any other process's index, which only its own next read
        # recreates. ``rebuild`` (what ``loom rebuild`` runs) keeps them, and either reads.
        first = via if how == "drop" else 1 - via
        for process in (self.processes[first], self.processes[1 - first]):
            assert self._read_models(process) == before

    @precondition(lambda self: len(self.checkpoints) > 1)
    @rule(data=st.data(), via=VIA)
    def rebuild_up_to(self, data: st.DataObject, via: int) -> None:
        """A rebuild stopped at an earlier position P is the corpus as of P (ADR 0014), erased
        documents included: listed, their passages gone (their keys are destroyed); then a
        rebuild to the head ends where the live index was. Either process rebuilds: one that
        cached a document's key before the other erased it must not open it (it did: its
        rebuild put the erased text back in the passage store)."""
        position, _ = data.draw(st.sampled_from(self.checkpoints))
        views = {scope: kb.as_of(position) for scope, kb in self.kbs.items()}
        then = {scope: (view.list_docs(), view.passages()) for scope, view in views.items()}
        before = self._read_models(self.processes[0])
        loom = self.processes[via].loom
        index = corpus_index(loom)
        rebuild(loom.log, index, upto=position)
        for scope in SCOPES:
            rebuilt = (list(index.manifest(scope).values()), index.read_passages(scope))
            assert rebuilt == then[scope]
        rebuild(loom.log, index)
        for process in self.processes:
            assert self._read_models(process) == before

    # -- the files ------------------------------------------------------------------------------

    def _never_stored(self) -> list[str]:
        """Markers no file may hold: erased documents' and memory keys', refused writes'."""
        erased = [m for key in self.erased for m in self.markers[key]]
        notes = [m for key in self.notes_erased for m in self.notes[key]]
        return [*erased, *notes, *self.unstored]

    @rule()
    def check_the_files(self) -> None:
        self._check_files()

    def _check_files(self) -> None:
        """The raw files (main and WAL, after checkpoint and VACUUM) and the search index's
        own terms hold no erased or refused marker; a live one is there (the control)."""
        gone = self._never_stored()
        assert not _fts_terms(self.url) & set(gone)
        raw = _raw_bytes_sqlite(self.url)
        # A marker's tail: FTS5 stores a term after its page's first as the suffix it does not
        # share with the term before it, so a whole marker may be in no byte run of the file.
        assert [m for m in gone if m[-TAIL:].encode() in raw] == []
        if self.live:
            kept = self.markers[next(iter(self.live))][-1]
            assert kept[-TAIL:].encode() in raw and kept in _fts_terms(self.url)

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def documents_read_as_the_model_says(self) -> None:
        for process in self.processes:
            self._documents(process)

    def _documents(self, process: _Process) -> None:
        every = [m for markers in self.markers.values() for m in markers] + self.unstored
        for scope, kb in process.kbs.items():
            live = {d: self.markers[(s, d)][-1] for s, d in self.live if s == scope}
            listed = {(r.id, r.revision, r.source) for r in kb.list_docs()}
            assert listed == {
                (d, len(self.markers[(scope, d)]), self.live[(scope, d)][1]) for d in live
            }
            passages = kb.passages()
            assert {p.doc_id for p in passages} == set(live)
            for passage in passages:
                assert live[passage.doc_id] in passage.text
            hits = kb.search(" ".join(live.values()), limit=50) if live else []
            assert {p.doc_id for p in hits} == set(live)
            others = [m for m in every if m not in live.values()]
            if others:  # erased, superseded, removed, refused, or of the other scope
                assert kb.search(" ".join(others), limit=50) == []

    def _as_of(self, position: int, then: dict[Key, str]) -> None:
        every = [m for markers in self.markers.values() for m in markers] + self.unstored
        for scope, kb in self.kbs.items():
            view = kb.as_of(position)
            listed = {d: m for (s, d), m in then.items() if s == scope}
            erased = {d: p for (s, d), p in self.erased.items() if s == scope}
            assert {r.id for r in view.list_docs()} == set(listed)  # erased ones too
            assert view.erased() == erased  # "erased at P"
            kept = {d: m for d, m in listed.items() if d not in erased}
            passages = view.passages()
            assert {p.doc_id for p in passages} == set(kept)  # no erased one's text
            for passage in passages:
                assert kept[passage.doc_id] in passage.text
            hits = view.search(" ".join(kept.values()), limit=50) if kept else []
            assert {p.doc_id for p in hits} == set(kept)
            others = [m for m in every if m not in kept.values()]
            if others:
                assert view.search(" ".join(others), limit=50) == []

    @invariant()
    def the_past_shows_no_erased_text(self) -> None:
        """As of the head, and of the moment before the latest erasure (any other moment:
        ``look_back``)."""
        for at in sorted({self.probe, len(self.checkpoints) - 1}):
            self._as_of(*self.checkpoints[at])

    @precondition(lambda self: len(self.checkpoints) > 1)
    @rule(data=st.data())
    def look_back(self, data: st.DataObject) -> None:
        """Any earlier moment, through the API and ``loom knowledge as-of --json``, which
        lists the documents live then and says which were erased, and where."""
        position, then = data.draw(st.sampled_from(self.checkpoints))
        self._as_of(position, then)
        for scope in {s for s, _ in self.markers}:  # a scope never written is a usage error
            command = ["knowledge", "as-of", str(position), "--scope", scope, "--json"]
            shown = CliRunner().invoke(app, [*command, "--db", self.url])
            assert shown.exit_code == 0, shown.output
            listing = json.loads(shown.stdout)
            assert {d["id"] for d in listing["documents"]} == {d for s, d in then if s == scope}
            erased = {d: p for (s, d), p in self.erased.items() if s == scope}
            assert listing["erased"] == erased
            assert not any(m in shown.output for m in self._never_stored())

    @invariant()
    def the_log_verifies(self) -> None:
        chain = verify_log(self.loom.log)
        assert chain.ok, chain
        keys = verify_keys(self.loom.log, upto=self._head())
        assert keys.ok, keys
        assert len(forget_events(self.loom)) == self.forgets

    @invariant()
    def memory_reads_as_written(self) -> None:
        for key, memory in ((k, p.memory) for k in NOTES for p in self.processes):
            entries = [str(e.content) for e in memory.read(key)]
            if key in self.notes_erased:
                assert entries == []
                markers = " ".join(self.notes[key])
                assert memory.search(key, markers) == []
            else:
                assert [e.split()[-1] for e in entries] == self.notes.get(key, [])

    @invariant()
    def the_files_every_sixth_step(self) -> None:
        self.steps += 1
        if self.steps % 6 == 0:
            self._check_files()


ErasureMachine.TestCase.settings = settings(
    derandomize=not EXPLORE,
    database=None,
    max_examples=300 if EXPLORE else 3 if QUICK else 8,
    stateful_step_count=40 if EXPLORE else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestErasureStateful = ErasureMachine.TestCase
