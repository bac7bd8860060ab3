"""A projection page's inserts go out at once, and leave the rows event by event would.

The corpus index holds a page's passage, manifest and revision inserts and writes them at the
page's last event, one statement per table, and reads the page's manifest records in one query
(ADR 0051). These tests pin both halves of that claim: the rows (``seq`` numbers, validity,
postings, kept counts, manifest, revisions) are exactly those of applying one event per page,
and the number of statements a page sends does not grow with its documents.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, inspect

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_runtime import Loom, catch_up

SCOPE = "ops"
_TABLES = ("entries", "postings", "current_rows", "current_terms", "documents", "revisions")
"""The corpus tables a page writes (``loom_kb_`` prefix), compared row for row."""
_STATEMENT = re.compile(r"^\s*(INSERT|UPDATE|DELETE|SELECT)\b.*?\bloom_kb_(\w+)", re.I | re.S)


def _doc(doc_id: str, *words: str) -> Doc:
    return Doc(id=doc_id, text="\n\n".join(f"{word} {doc_id} shared text" for word in words))


def _history(loom: Loom, kb: KnowledgeBase) -> None:
    """Writes whose replay in one page meets every case: new, revised twice, removed and
    re-created, shortened, dropped by a sync, and a second scope."""
    kb.sync([_doc(f"d{n}", "alpha", "beta", "gamma") for n in range(8)])
    kb.put_doc(_doc("d0", "revised"))
    kb.put_doc(_doc("d0", "again", "longer", "text"))
    kb.remove_doc("d1")
    kb.put_doc(_doc("d1", "back"))
    kb.sync(
        [_doc("d0", "again", "longer", "text"), _doc("d2", "short"), _doc("n0", "new")],
        allow_mass_delete=True,
    )
    other = open_knowledge_base(loom, "other")
    other.put_doc(_doc("x", "elsewhere", "alpha"))
    kb.put_doc(_doc("d2", "last"))


def _dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the compared tables, in a fixed order, every column; a ``seq`` as its rank
    among the entries' (the append order: PostgreSQL's sequence does not restart on a reset)."""
    dumped: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        names = set(inspect(conn).get_table_names())
        rank = {
            seq: index
            for index, seq in enumerate(
                conn.exec_driver_sql("SELECT seq FROM loom_kb_entries ORDER BY seq").scalars()
            )
        }
        for table in _TABLES:
            name = f"loom_kb_{table}"
            assert name in names, name
            columns = [
                column["name"]
                for column in inspect(conn).get_columns(name)
                if column["name"] != "search_vector"  # PostgreSQL: a tsvector, derived
            ]
            rows = conn.exec_driver_sql(f"SELECT {', '.join(columns)} FROM {name}").mappings()
            ranked = [
                tuple(rank[value] if column == "seq" else value for column, value in row.items())
                for row in rows
            ]
            dumped[table] = sorted(ranked, key=repr)
    return dumped


@pytest.fixture
def statements(loom: Loom) -> Iterator[list[tuple[str, str]]]:
    """(verb, corpus table) of every statement sent to a ``loom_kb_`` table."""
    sent: list[tuple[str, str]] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        found = _STATEMENT.match(statement)
        if found:
            sent.append((found.group(1).upper(), found.group(2)))

    event.listen(loom.log.engine, "before_cursor_execute", record)
    yield sent
    event.remove(loom.log.engine, "before_cursor_execute", record)


def test_a_page_applied_at_once_leaves_the_rows_of_one_event_per_page(loom: Loom) -> None:
    """Rebuilt in pages of 500 and in pages of one event, every row is the same."""
    kb = open_knowledge_base(loom, SCOPE)
    _history(loom, kb)
    index = corpus_index(loom)
    index.reset()
    catch_up(loom.log, index, page_size=1)  # one event per page: nothing is held
    one_by_one = _dump(loom.log.engine)
    index.reset()
    catch_up(loom.log, index)  # the whole history in one page
    assert _dump(loom.log.engine) == one_by_one
    assert one_by_one["entries"], "the history wrote passages"


def test_the_statements_of_a_first_sync_page_do_not_grow_with_its_documents(
    loom: Loom, statements: list[tuple[str, str]]
) -> None:
    """A first sync of 5 and of 40 documents (one page each) send the same statements."""
    sent = []
    for count, scope in ((5, "small"), (40, "large")):
        kb = open_knowledge_base(loom, scope)
        kb.refresh()  # its tables exist: only the sync's statements are counted
        statements.clear()
        kb.sync([_doc(f"d{n}", "alpha", "beta") for n in range(count)])
        sent.append(sorted(statements))
    assert sent[0] == sent[1]
    assert ("INSERT", "entries") in sent[1]


def test_one_event_per_page_sends_statements_per_document(
    loom: Loom, statements: list[tuple[str, str]]
) -> None:
    """Negative control: applied one event per page, the inserts grow with the documents (the
    probe above would see it)."""
    kb = open_knowledge_base(loom, SCOPE)
    kb.sync([_doc(f"d{n}", "alpha", "beta") for n in range(10)])
    index = corpus_index(loom)
    index.reset()
    statements.clear()
    catch_up(loom.log, index, page_size=1)
    assert statements.count(("INSERT", "entries")) == 10
    assert statements.count(("INSERT", "documents")) == 10
