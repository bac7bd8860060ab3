"""The seed's crash test, against the corpus as a projection: a failed ingest or sync converges.

The seed (ADR 0091, D2) needed an append-only manifest and a two-phase ``committed`` flag
because its manifest row and its passages were separate writes. Here the events are appended
first, in one transaction, and the projection writes rows and its position in another, so a
failure can only leave the rows BEHIND the log, never half-way. These tests break ingest where
the seed's broke (a store raising mid-ingest, a process SIGKILLed mid-sync) and check, by
reading the tables raw with ``sqlite3`` (no catch-up, no join), that:

* at the failure point every listed document has exactly its passages and nothing else;
* after the fault is gone, a re-run converges on the state a clean run gives in another
  database: same manifest, same revision history, same passages, no duplicate, no orphan.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base, pack_paragraphs
from loom_memory import SqliteMemoryStore
from loom_runtime import Loom

SCOPE = "ops"
WORKER = Path(__file__).with_name("sync_worker.py")
TIMEOUT = 60


class InjectedFault(RuntimeError):
    """The failure a broken store raises in these tests."""


class StoreFault:
    """From its ``at``-th call on, the store verb raises, until :meth:`heal` is called."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, verb: str, *, at: int) -> None:
        self.calls = 0
        self.broken = True
        original = getattr(SqliteMemoryStore, verb)

        def faulty(store: SqliteMemoryStore, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.broken and self.calls >= at:
                raise InjectedFault(f"{verb} call {self.calls} failed (injected)")
            return original(store, *args, **kwargs)

        monkeypatch.setattr(SqliteMemoryStore, verb, faulty)

    def heal(self) -> None:
        self.broken = False


# -- reading the corpus raw ---------------------------------------------------------------------


def _connect(db_url: str) -> sqlite3.Connection:
    return sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=10)


def _state(db_url: str) -> dict[str, Any]:
    """Manifest, revision history (without log positions) and passages, read raw."""
    con = _connect(db_url)
    try:
        manifest = con.execute(
            "SELECT scope, doc_id, revision, fingerprint, fingerprint_algorithm, passage_count, "
            "source FROM loom_kb_documents ORDER BY scope, doc_id"
        ).fetchall()
        history = con.execute(
            "SELECT scope, doc_id, revision, fingerprint, source, ended_by "
            "FROM loom_kb_revisions ORDER BY scope, doc_id, revision"
        ).fetchall()
        rows = con.execute("SELECT key, entry FROM loom_kb_entries").fetchall()
    finally:
        con.close()
    passages = []
    for key, raw in rows:
        entry = msgspec.json.decode(raw)  # everything but the timestamp, which is per database
        passages.append((key, entry["id"], msgspec.json.encode(entry["content"]), entry["origin"]))
    return {"manifest": manifest, "history": history, "passages": sorted(passages)}


def _assert_consistent(db_url: str) -> None:
    """Every listed document has exactly its counted passages; the index holds only live rows."""
    con = _connect(db_url)
    try:
        counted = sorted(
            f"{doc_id}#{index}"
            for doc_id, count in con.execute("SELECT doc_id, passage_count FROM loom_kb_documents")
            for index in range(count)
        )
        stored = sorted(
            entry_id for (entry_id,) in con.execute("SELECT entry_id FROM loom_kb_entries")
        )
        seqs = {seq for (seq,) in con.execute("SELECT seq FROM loom_kb_entries")}
        con.execute(
            "CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, 'loom_kb_fts', 'instance')"
        )
        indexed = {doc for (doc,) in con.execute("SELECT DISTINCT doc FROM temp.vocab")}
    finally:
        con.close()
    assert stored == counted, "passages that no manifest row counts, or rows missing passages"
    assert len(set(stored)) == len(stored), "duplicate passages"
    assert indexed == seqs, "the FTS index holds rows that are gone, or misses live ones"


def _reference(tmp_path: Path, *writes: Callable[[KnowledgeBase], object]) -> dict[str, Any]:
    """The state the same writes leave when nothing fails, in a database of its own."""
    url = f"sqlite:///{tmp_path / 'reference.db'}"
    with Loom(url) as clean:
        kb = open_knowledge_base(clean, SCOPE, chunker=pack_paragraphs(max_chars=40))
        for write in writes:
            write(kb)
    return _state(url)


@pytest.fixture
def kb(loom: Loom) -> KnowledgeBase:
    return open_knowledge_base(loom, SCOPE, chunker=pack_paragraphs(max_chars=40))


def _doc(doc_id: str, *words: str) -> Doc:
    """One passage per word (each paragraph is ~30 characters, the packer's limit is 40)."""
    return Doc(id=doc_id, text="\n\n".join(f"{word} paragraph filler text" for word in words))


V1 = [_doc(f"d{n:02}", "alpha", "beta", "gamma") for n in range(12)]
V2 = [
    *(_doc(doc.id, "shorter") for doc in V1[:4]),  # revised to fewer passages
    *V1[4:10],  # unchanged; d10 and d11 are dropped
    *(_doc(f"n{n}", "fresh", "words") for n in range(3)),
]


# -- a store that raises ------------------------------------------------------------------------


def test_a_new_document_whose_ingest_fails_is_not_listed_until_it_converges(
    loom: Loom, kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """put_doc raises when the store fails; nothing is listed meanwhile; a refresh converges."""
    doc = _doc("disk", "full", "volume", "inode")
    fault = StoreFault(monkeypatch, "append", at=1)
    with pytest.raises(InjectedFault):
        kb.put_doc(doc)
    _assert_consistent(db_url)
    assert _state(db_url)["manifest"] == []
    fault.heal()
    kb.refresh()
    _assert_consistent(db_url)
    assert _state(db_url) == _reference(tmp_path, lambda clean: clean.put_doc(doc))


def test_a_revision_whose_ingest_fails_leaves_the_old_revision_whole(
    loom: Loom, kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A revision failing at store.remove keeps revision 1 whole; re-running put_doc converges."""
    old, new = _doc("disk", "full", "volume", "inode"), _doc("disk", "cleanup")
    kb.put_doc(old)
    before = _state(db_url)
    fault = StoreFault(monkeypatch, "remove", at=1)
    with pytest.raises(InjectedFault):
        kb.put_doc(new)
    _assert_consistent(db_url)
    assert _state(db_url) == before
    fault.heal()
    position = loom.log.position
    assert kb.put_doc(new).revision == 2
    assert loom.log.position == position, "the revision was already in the log"
    _assert_consistent(db_url)
    assert _state(db_url) == _reference(
        tmp_path, lambda clean: clean.put_doc(old), lambda clean: clean.put_doc(new)
    )


def test_a_sync_whose_projection_fails_mid_page_converges_on_rerun(
    loom: Loom, kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sync failing at its 7th passage write converges when re-run, appending only its record."""
    fault = StoreFault(monkeypatch, "append", at=7)
    with pytest.raises(InjectedFault):
        kb.sync(V1)
    _assert_consistent(db_url)
    fault.heal()
    position = loom.log.position
    rerun = kb.sync(V1)
    assert (len(rerun.unchanged), loom.log.position - position) == (len(V1), 1)
    _assert_consistent(db_url)
    assert _state(db_url) == _reference(tmp_path, lambda clean: clean.sync(V1))


@pytest.mark.parametrize(("verb", "at"), [("append", 3), ("remove", 5)])
def test_an_editing_sync_whose_projection_fails_converges_on_rerun(
    kb: KnowledgeBase,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    verb: str,
    at: int,
) -> None:
    """A sync revising, shortening and dropping documents, failing mid-projection, converges."""
    kb.sync(V1)
    before = _state(db_url)
    fault = StoreFault(monkeypatch, verb, at=at)  # mid-projection, not the last call
    with pytest.raises(InjectedFault):
        kb.sync(V2)
    _assert_consistent(db_url)
    assert _state(db_url) == before, "a failed page must leave the previous corpus whole"
    fault.heal()
    kb.sync(V2)
    _assert_consistent(db_url)
    assert _state(db_url) == _reference(
        tmp_path, lambda clean: clean.sync(V1), lambda clean: clean.sync(V2)
    )


def test_a_sync_failing_on_a_later_page_converges_on_rerun(
    kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sync spanning two projection pages, failing on the second, converges on re-run."""
    docs = [_doc(f"d{n:04}", "alpha") for n in range(600)]  # 601 events: pages of 500
    fault = StoreFault(monkeypatch, "append", at=550)
    with pytest.raises(InjectedFault):
        kb.sync(docs)
    _assert_consistent(db_url)
    assert len(_state(db_url)["manifest"]) == 500, "the first page committed whole"
    fault.heal()
    kb.sync(docs)
    _assert_consistent(db_url)
    assert _state(db_url) == _reference(tmp_path, lambda clean: clean.sync(docs))


def test_a_sync_whose_chunker_fails_appends_and_writes_nothing(loom: Loom, db_url: str) -> None:
    """A chunker raising while a sync decides leaves the log and the corpus untouched."""
    calls: list[str] = []

    def chunker(doc: Doc) -> list[str]:
        calls.append(doc.id)
        if len(calls) == 5:
            raise InjectedFault("chunker failed (injected)")
        return [doc.text]

    kb = open_knowledge_base(loom, SCOPE, chunker=chunker)
    kb.put_doc(_doc("kept", "alpha"))
    position, before = loom.log.position, _state(db_url)
    with pytest.raises(InjectedFault):
        kb.sync([_doc("kept", "alpha"), *V1])
    assert (loom.log.position, _state(db_url)) == (position, before)


# -- a process SIGKILLed mid-sync ---------------------------------------------------------------


def _worker(db_url: str, corpus: str, *kill: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(WORKER), db_url, corpus, *kill]
    return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _synced(db_url: str, corpus: str) -> dict[str, Any]:
    """Run a worker to completion; what it printed (the result and events appended)."""
    done = _worker(db_url, corpus)
    assert done.returncode == 0, done.stderr
    printed: dict[str, Any] = msgspec.json.decode(done.stdout.strip().splitlines()[-1])
    return printed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("corpus", "kill_in", "logged"),
    [
        ("v1", "append:20", True),
        ("v2", "remove:3", True),
        ("v2", "append:6", True),
        ("v2", "chunk:6", False),
    ],
    ids=["first-sync-in-projection", "edit-in-remove", "edit-in-append", "edit-while-deciding"],
)
def test_a_sync_killed_with_sigkill_converges_on_rerun_in_a_fresh_process(
    tmp_path: Path, corpus: str, kill_in: str, logged: bool
) -> None:
    """A sync SIGKILLed part-way leaves a whole corpus, and a re-run equals a clean run's."""
    reference_url = f"sqlite:///{tmp_path / 'reference.db'}"
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    earlier = ["v1"] if corpus == "v2" else []
    for done in earlier:
        _synced(reference_url, done)
        _synced(url, done)
    clean = _synced(reference_url, corpus)
    before = _state(url) if earlier else {"manifest": [], "history": [], "passages": []}

    killed = _worker(url, corpus, "--kill-in", kill_in)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    _assert_consistent(url)
    assert _state(url) == before, "the killed projection transaction must leave no trace"

    rerun = _synced(url, corpus)
    _assert_consistent(url)
    assert _state(url) == _state(reference_url)
    if logged:  # the killed sync was in the log whole: the re-run only records its reconcile
        assert (rerun["appended"], rerun["result"]["written"]) == (1, [])
    else:  # nothing was appended: the re-run is the sync itself
        assert rerun == clean
