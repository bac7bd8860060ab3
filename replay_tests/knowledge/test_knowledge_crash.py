"""A failed ingest or sync converges: the crash test of a two-phase manifest, against the
corpus as a projection (ADR 0010).

A design whose manifest row and passages are separate writes needs an append-only manifest and
a two-phase ``committed`` flag. Here the events are appended first, in one transaction, and the
projection writes rows and its position in another, so a failure can only leave the rows BEHIND
the log, never half-way. These tests break ingest where such a design breaks (a store raising
mid-ingest, a process SIGKILLed mid-sync) and check, by
reading the tables raw (``corpus_tables``: no Loom, so no catch-up, and the search index without
a join), on SQLite and on PostgreSQL alike, that:

* at the failure point every listed document has exactly its passages and nothing else;
* after the fault is gone, a re-run converges on the state a clean run gives in another
  database: same manifest, same revision history, same passages, no duplicate, no orphan.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base, pack_paragraphs
from loom_memory.sql import SqlMemoryStore
from loom_runtime import Loom
from replay_tests.knowledge.corpus_tables import (
    another_database,
    assert_consistent,
    corpus_state,
    store_class,
)

SCOPE = "ops"
WORKER = Path(__file__).with_name("sync_worker.py")
TIMEOUT = 60


class InjectedFault(RuntimeError):
    """The failure a broken store raises in these tests."""


class StoreFault:
    """From its ``at``-th call on, the store verb raises, until :meth:`heal` is called.

    It breaks the store class the corpus writes through on ``db_url``'s backend.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, db_url: str, verb: str, *, at: int) -> None:
        self.calls = 0
        self.broken = True
        store = store_class(db_url)
        original = getattr(store, verb)

        def faulty(store: SqlMemoryStore, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.broken and self.calls >= at:
                raise InjectedFault(f"{verb} call {self.calls} failed (injected)")
            return original(store, *args, **kwargs)

        monkeypatch.setattr(store, verb, faulty)

    def heal(self) -> None:
        self.broken = False


# -- reading the corpus raw (corpus_tables: no Loom, so nothing catches up first) ---------------


def _reference(db_url: str, tmp_path: Path, *writes: Callable[[KnowledgeBase], object]) -> Any:
    """The state the same writes leave when nothing fails, in a database of its own."""
    with another_database(db_url, tmp_path) as url:
        with Loom(url) as clean:
            kb = open_knowledge_base(clean, SCOPE, chunker=pack_paragraphs(max_chars=40))
            for write in writes:
                write(kb)
        return corpus_state(url)


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
    fault = StoreFault(monkeypatch, db_url, "append_batch", at=1)
    with pytest.raises(InjectedFault):
        kb.put_doc(doc)
    assert_consistent(db_url)
    assert corpus_state(db_url)["manifest"] == []
    fault.heal()
    kb.refresh()
    assert_consistent(db_url)
    assert corpus_state(db_url) == _reference(db_url, tmp_path, lambda clean: clean.put_doc(doc))


def test_a_revision_whose_ingest_fails_leaves_the_old_revision_whole(
    loom: Loom, kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A revision failing mid-write (its predecessor already ended in the same transaction)
    keeps revision 1 whole and current; re-running put_doc converges."""
    old, new = _doc("disk", "full", "volume", "inode"), _doc("disk", "cleanup")
    kb.put_doc(old)
    before = corpus_state(db_url)
    fault = StoreFault(monkeypatch, db_url, "append_batch", at=1)
    with pytest.raises(InjectedFault):
        kb.put_doc(new)
    assert_consistent(db_url)
    assert corpus_state(db_url) == before
    fault.heal()
    position = loom.log.position
    assert kb.put_doc(new).revision == 2
    assert loom.log.position == position, "the revision was already in the log"
    assert_consistent(db_url)
    assert corpus_state(db_url) == _reference(
        db_url, tmp_path, lambda clean: clean.put_doc(old), lambda clean: clean.put_doc(new)
    )


def test_a_sync_whose_projection_fails_mid_page_converges_on_rerun(
    loom: Loom, kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sync failing at its page's passage write (one for the page) converges when re-run,
    appending only its record."""
    fault = StoreFault(monkeypatch, db_url, "append_batch", at=1)
    with pytest.raises(InjectedFault):
        kb.sync(V1)
    assert_consistent(db_url)
    fault.heal()
    position = loom.log.position
    rerun = kb.sync(V1)
    assert (len(rerun.unchanged), loom.log.position - position) == (len(V1), 1)
    assert_consistent(db_url)
    assert corpus_state(db_url) == _reference(db_url, tmp_path, lambda clean: clean.sync(V1))


@pytest.mark.parametrize(("verb", "at"), [("append_batch", 1)])
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
    before = corpus_state(db_url)
    # The page's one batch, after its ends and manifest updates: mid-transaction.
    fault = StoreFault(monkeypatch, db_url, verb, at=at)
    with pytest.raises(InjectedFault):
        kb.sync(V2)
    assert_consistent(db_url)
    assert corpus_state(db_url) == before, "a failed page must leave the previous corpus whole"
    fault.heal()
    kb.sync(V2)
    assert_consistent(db_url)
    assert corpus_state(db_url) == _reference(
        db_url, tmp_path, lambda clean: clean.sync(V1), lambda clean: clean.sync(V2)
    )


def test_a_sync_failing_on_a_later_page_converges_on_rerun(
    kb: KnowledgeBase, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sync spanning two projection pages, failing on the second, converges on re-run."""
    docs = [_doc(f"d{n:04}", "alpha") for n in range(600)]  # 601 events: pages of 500
    fault = StoreFault(monkeypatch, db_url, "append_batch", at=2)  # the second page
    with pytest.raises(InjectedFault):
        kb.sync(docs)
    assert_consistent(db_url)
    assert len(corpus_state(db_url)["manifest"]) == 500, "the first page committed whole"
    fault.heal()
    kb.sync(docs)
    assert_consistent(db_url)
    assert corpus_state(db_url) == _reference(db_url, tmp_path, lambda clean: clean.sync(docs))


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
    position, before = loom.log.position, corpus_state(db_url)
    with pytest.raises(InjectedFault):
        kb.sync([_doc("kept", "alpha"), *V1])
    assert (loom.log.position, corpus_state(db_url)) == (position, before)


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
        ("v1", "append_batch:1", True),  # a first sync's page writes its passages once
        ("v2", "append_batch:1", True),  # an editing sync's page too, after its ends and updates
        ("v2", "chunk:6", False),
    ],
    ids=["first-sync-in-projection", "edit-in-projection", "edit-while-deciding"],
)
def test_a_sync_killed_with_sigkill_converges_on_rerun_in_a_fresh_process(
    db_url: str, tmp_path: Path, corpus: str, kill_in: str, logged: bool
) -> None:
    """A sync SIGKILLed part-way leaves a whole corpus, and a re-run equals a clean run's."""
    earlier = ["v1"] if corpus == "v2" else []
    with another_database(db_url, tmp_path) as reference_url:  # the clean run, same backend
        for done in [*earlier, corpus]:
            clean = _synced(reference_url, done)
        expected = corpus_state(reference_url)
    for done in earlier:
        _synced(db_url, done)
    before = corpus_state(db_url) if earlier else {"manifest": [], "history": [], "passages": []}

    killed = _worker(db_url, corpus, "--kill-in", kill_in)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert_consistent(db_url)
    assert corpus_state(db_url) == before, "the killed projection transaction must leave no trace"

    rerun = _synced(db_url, corpus)
    assert_consistent(db_url)
    assert corpus_state(db_url) == expected
    if logged:  # the killed sync was in the log whole: the re-run only records its reconcile
        assert (rerun["appended"], rerun["result"]["written"]) == (1, [])
    else:  # nothing was appended: the re-run is the sync itself
        assert rerun == clean
