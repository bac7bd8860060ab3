"""A projection page does work for its own documents, not for the corpus around them.

Two claims (ADR 0051, amended "ends"): the ends of an edited sync's revisions go out in one
batch with the page's inserts (an end wrote what the page held before it, so a page of N
edits sent N batches; on PostgreSQL the batch's ends are one UPDATE, ADR 0059 amended), and
a page reads the erased rows of the documents it writes only (it read the whole erased
table, every erasure ever made, on every page). The rows left are those of applying one
event per page, counts by position included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event

from loom_knowledge import open_knowledge_base
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_runtime import Loom, MasterKey, catch_up
from replay_tests.knowledge.test_page_writes import _doc, _dump, statements

__all__ = ["statements"]  # the fixture, imported for pytest

SCOPE = "ops"
KEY = MasterKey(b"k" * 32)


def _edited_sync_page(loom: Loom, scope: str, edits: int, sent: list[tuple[str, str]]) -> None:
    """Sync 30 documents, then sync them again with ``edits`` edited; ``sent`` keeps only the
    second sync's statements."""
    kb = open_knowledge_base(loom, scope)
    docs = [_doc(f"d{n}", "alpha", "beta") for n in range(30)]
    kb.sync(docs)
    sent.clear()
    kb.sync([_doc(d.id, "edited", "gamma") if n < edits else d for n, d in enumerate(docs)])


def test_an_edited_sync_page_writes_its_passages_in_one_batch(
    loom: Loom, statements: list[tuple[str, str]]
) -> None:
    """A sync editing 2 and one editing 20 documents send the same passage inserts."""
    inserts = []
    for edits, scope in ((2, "few"), (20, "many")):
        _edited_sync_page(loom, scope, edits, statements)
        inserts.append(statements.count(("INSERT", "entries")))
    assert inserts[0] == inserts[1] > 0


def test_an_edited_sync_page_ends_its_passages_in_one_update_on_postgresql(
    loom: Loom, statements: list[tuple[str, str]]
) -> None:
    """On PostgreSQL a page's ends reach the store together: one UPDATE of the passages for 2
    edits and for 20 (ADR 0059, amended "pgend")."""
    if loom.log.engine.dialect.name != "postgresql":
        pytest.skip("SQLite ends row by row and counts the ends with the inserts")
    updates = []
    for edits, scope in ((2, "few"), (20, "many")):
        _edited_sync_page(loom, scope, edits, statements)
        updates.append(statements.count(("UPDATE", "entries")))
    assert updates == [1, 1]


def test_an_edited_sync_in_one_page_leaves_the_rows_of_one_event_per_page(loom: Loom) -> None:
    """Rebuilt in one page and one event per page after edited syncs and removals, every row
    is the same, the counts by position (non-zero buckets) included."""
    kb = open_knowledge_base(loom, SCOPE)
    docs = [_doc(f"d{n}", "alpha", "beta", f"w{n}") for n in range(12)]
    kb.sync(docs)
    kb.sync([_doc(d.id, "edited", f"v{n}") if n % 3 else d for n, d in enumerate(docs)])
    kb.sync([_doc(d.id, "again") for d in docs[:6]], allow_mass_delete=True)
    index = corpus_index(loom)
    index.reset()
    catch_up(loom.log, index, page_size=1)
    one_by_one = _dump(loom.log.engine), _counts(loom.log.engine)
    index.reset()
    catch_up(loom.log, index)
    assert (_dump(loom.log.engine), _counts(loom.log.engine)) == one_by_one
    assert one_by_one[1][1], "the history counted terms by position"


def _counts(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The non-zero buckets of the counts by position (a zero bucket counts nothing)."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT key, level, bucket, n FROM loom_kb_rows_at WHERE n <> 0 AND level >= 0"
        )
        terms = conn.exec_driver_sql(
            "SELECT key, term, level, bucket, df FROM loom_kb_terms_at WHERE df <> 0"
        )
        return sorted(map(tuple, rows)), sorted(map(tuple, terms))


@pytest.fixture
def erased_reads(db_url: str) -> Iterator[tuple[Loom, list[tuple[str, Any]]]]:
    """An encrypted Loom and the (statement, parameters) of every read of the erased table."""
    with Loom(db_url, encryption=KEY) as loom:
        sent: list[tuple[str, Any]] = []

        def record(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
            if statement.lstrip().upper().startswith("SELECT") and "loom_kb_erased" in statement:
                sent.append((statement, parameters))

        event.listen(loom.log.engine, "before_cursor_execute", record)
        yield loom, sent
        event.remove(loom.log.engine, "before_cursor_execute", record)


def test_a_put_doc_reads_no_erased_row_of_other_documents(
    erased_reads: tuple[Loom, list[tuple[str, Any]]],
) -> None:
    """After 6 documents are erased, indexing a new one reads none of their erased rows."""
    loom, sent = erased_reads
    kb = open_knowledge_base(loom, SCOPE)
    kb.sync([_doc(f"gone{n}", "alpha") for n in range(6)])
    for n in range(6):
        loom.erase(document=f"{SCOPE}:gone{n}", reason="request", by="dpo")
    kb.refresh()
    sent.clear()
    kb.put_doc(_doc("new", "alpha"))
    assert sent, "the page asked whether the document it writes was erased"
    raw = loom.log.engine.raw_connection()
    try:
        cursor = raw.cursor()
        read = 0
        for statement, parameters in sent:
            cursor.execute(statement, parameters)
            read += len(cursor.fetchall())
    finally:
        raw.close()
    assert read == 0
    assert [p.doc_id for p in kb.search("alpha")] == ["new"]
