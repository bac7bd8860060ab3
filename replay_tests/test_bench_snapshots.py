"""A fixture one benchmark section built is kept as a SQLite snapshot under the content hash
of its inputs and restored, as a copy, by a later section that needs the same state: the
copy must be the state at the moment it was kept, never what the builder did afterwards, and
a section given other inputs must find nothing and build its own."""

from __future__ import annotations

import sqlite3
from contextlib import ExitStack, closing
from pathlib import Path

import pytest

from benchmarks import bundles
from benchmarks.corpus import SCOPE, SOURCE, base_docs, synced_key
from benchmarks.harness import SNAPSHOTS, Snapshots, fingerprint
from benchmarks.stores import fresh_sqlite
from loom_knowledge import open_knowledge_base
from loom_runtime import Loom


def _rows(path: Path) -> list[tuple[int]]:
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute("SELECT n FROM t ORDER BY n").fetchall()


def test_a_restored_snapshot_is_the_state_when_kept_not_later_writes(tmp_path: Path) -> None:
    built = tmp_path / "built.db"
    with closing(sqlite3.connect(built, isolation_level=None)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE t (n INTEGER)")
        connection.execute("INSERT INTO t VALUES (1)")
        snapshots = Snapshots()
        snapshots.keep("k", built)  # kept while the builder still holds it open
        connection.execute("INSERT INTO t VALUES (2)")

    assert snapshots.restore("k", tmp_path / "copy.db")
    assert _rows(tmp_path / "copy.db") == [(1,)]
    assert _rows(built) == [(1,), (2,)]


def test_no_snapshot_under_other_inputs(tmp_path: Path) -> None:
    snapshots = Snapshots()
    assert not snapshots.restore(fingerprint("anything"), tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()


def test_the_fingerprint_follows_the_documents_content() -> None:
    docs = base_docs(3)
    changed = [*docs[:2], bundles.edited(docs[2], 2, 1)]

    assert synced_key(docs) == synced_key(base_docs(3))
    assert synced_key(docs) == synced_key(base_docs(5)[:3])  # the corpus section cuts extra
    assert synced_key(docs) != synced_key(changed)
    assert synced_key(docs) != synced_key(docs[:2])


@pytest.mark.slow  # five syncs of 40 documents
def test_the_bundles_corpus_from_a_snapshot_equals_one_built_from_scratch() -> None:
    docs = base_docs(40)
    with ExitStack() as stack:
        scratch = bundles._build_corpus(stack, docs, lambda _: None)
        assert not scratch.first_restored

        url, path = stack.enter_context(fresh_sqlite())
        with Loom(url) as loom:  # what the corpus section builds and keeps
            kb = open_knowledge_base(loom, SCOPE)
            kb.refresh()
            kb.sync(docs, source=SOURCE)
        SNAPSHOTS.keep(synced_key(docs), path)
        restored = bundles._build_corpus(stack, docs, lambda _: None)

        assert restored.first_restored
        assert restored.positions == scratch.positions
        restored.check_filter(10)  # revision 2 found as of P2, not now; revision 3 not then
        assert [p.doc_id for p in restored.kb.search("loommark3x7", limit=4)] == [docs[7].id]
