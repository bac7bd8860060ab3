"""The corpus's tables read raw, on SQLite and on PostgreSQL alike, for the knowledge tests.

Reading through the KnowledgeBase could hide exactly the defects these tests look for: its
passages come through the manifest, and a search joined back to the rows hides a stale index row
(a term whose row is gone joins to nothing). So the readers here go under it:

* passages straight from the passage store's ``loom_kb_entries`` table, in append order;
* the search index from the index alone, never joined to the rows: on SQLite the external-content
  FTS5 table through an ``fts5vocab`` table and a rowid-only ``MATCH``; on PostgreSQL the
  ``search_vector`` tsvector column through ``unnest`` and an ``@@`` on the column.

Nothing here opens a Loom (which would catch the projection up) or creates a table by accident.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from sqlalchemy import (
    URL,
    Connection,
    Engine,
    bindparam,
    cast,
    column,
    create_engine,
    func,
    inspect,
    select,
    table,
    text,
)
from sqlalchemy.dialects.postgresql import TSQUERY
from sqlalchemy.engine import make_url

from loom_knowledge.corpus.corpus_index import TABLE_PREFIX
from loom_knowledge.corpus.keys import corpus_key
from loom_memory import (
    MemoryEntry,
    PostgresMemoryStore,
    PostgresTemporalStore,
    SqliteMemoryStore,
    SqliteTemporalStore,
)
from loom_memory.entry import decode_entry
from loom_memory.sql import SqlMemoryStore
from loom_memory.text import entry_terms

ENTRIES = table(
    f"{TABLE_PREFIX}entries",
    *map(column, ("seq", "key", "entry", "entry_id", "revision", "valid_from", "valid_to")),
)
"""The passage rows: every revision's, current ones with ``valid_to`` NULL (ADR 0014)."""
DOCUMENTS = table(
    f"{TABLE_PREFIX}documents",
    *map(column, ("scope", "doc_id", "revision", "fingerprint", "fingerprint_algorithm")),
    *map(column, ("passage_count", "source")),
)
"""The manifest, every column."""
REVISIONS = table(
    f"{TABLE_PREFIX}revisions",
    *map(column, ("scope", "doc_id", "revision", "fingerprint", "source", "ended_by")),
    *map(column, ("passage_count", "ended_position")),
)
"""The revision history without its log positions (they differ between two databases)."""


def backend(bind: Engine | str) -> str:
    """``sqlite`` or ``postgresql``: the dialect of an engine or a URL."""
    return bind.dialect.name if isinstance(bind, Engine) else make_url(bind).get_backend_name()


def store_class(bind: Engine | str) -> type[SqlMemoryStore]:
    """The passage store class the CorpusIndex uses on this database."""
    return PostgresMemoryStore if backend(bind) == "postgresql" else SqliteMemoryStore


def passage_store(engine: Engine) -> SqlMemoryStore:
    """A second store over the corpus's own tables, to read and write rows without the manifest."""
    temporal = PostgresTemporalStore if backend(engine) == "postgresql" else SqliteTemporalStore
    # The corpus's own class: its drop() knows every table it keeps (the SQLite kept counts).
    return temporal(engine, table_prefix=TABLE_PREFIX)


def read_passages(engine: Engine, scope: str) -> list[MemoryEntry]:
    """The CURRENT passage entries of ``scope``, in append order, with no manifest join."""
    query = select(ENTRIES.c.entry).where(
        ENTRIES.c.key == corpus_key(scope), ENTRIES.c.valid_to.is_(None)
    )
    with engine.connect() as conn:
        return [decode_entry(raw) for raw in conn.scalars(query.order_by(ENTRIES.c.seq))]


def corpus_tables(engine: Engine) -> list[str]:
    """Every table whose name starts with ``loom_kb_`` (FTS5 shadow tables included)."""
    return sorted(name for name in inspect(engine).get_table_names() if name.startswith("loom_kb_"))


def drop_corpus_tables(engine: Engine) -> None:
    """Drop every corpus table and search structure, raw; fail if any ``loom_kb_`` table is left."""
    passage_store(engine).drop()
    with engine.begin() as conn:
        for name in (
            DOCUMENTS.name,
            REVISIONS.name,
            f"{TABLE_PREFIX}tokenizers",
            f"{TABLE_PREFIX}erased",
        ):
            conn.exec_driver_sql(f"DROP TABLE {name}")
    assert corpus_tables(engine) == []


# -- the search index, read on its own ----------------------------------------------------------


def indexed_terms_by_row(engine: Engine) -> dict[int, set[str]]:
    """For each row id the search index holds terms for, those terms: read from the index alone.

    SQLite: an ``fts5vocab`` 'instance' table over the FTS5 index (its ``doc`` is the rowid,
    which is the entry's ``seq``). PostgreSQL: the lexemes of each row's ``search_vector``.
    """
    by_row: dict[int, set[str]] = {}
    with engine.begin() as conn:
        for seq, term in _index_instances(conn):
            by_row.setdefault(seq, set()).add(term)
    return by_row


def _index_instances(conn: Connection) -> list[Any]:
    if conn.dialect.name == "postgresql":
        statement = text(
            f"SELECT e.seq, t.lexeme FROM {ENTRIES.name} AS e, unnest(e.search_vector) AS t"
        )
        return list(conn.execute(statement))
    conn.exec_driver_sql(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.kb_vocab "
        f"USING fts5vocab(main, '{TABLE_PREFIX}fts', 'instance')"
    )
    return list(conn.exec_driver_sql("SELECT doc, term FROM temp.kb_vocab"))


def indexed_rows(engine: Engine) -> set[int]:
    """The row ids the search index holds any term for."""
    return set(indexed_terms_by_row(engine))


def indexed_terms(engine: Engine) -> set[str]:
    """Every term the search index holds, whatever row it is filed under."""
    return set().union(*indexed_terms_by_row(engine).values())


def index_match_count(engine: Engine, term: str) -> int:
    """How many index entries match ``term``, selecting only their row id (no join to the rows)."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            query = cast(bindparam("q", "'" + term.replace("'", "''") + "'"), TSQUERY)
            vector = column("search_vector")
            statement = select(func.count(column("seq"))).select_from(
                table(ENTRIES.name, column("seq"), vector)
            )
            return conn.scalar(statement.where(vector.bool_op("@@")(query))) or 0
        match = text(f"SELECT count(rowid) FROM {TABLE_PREFIX}fts WHERE {TABLE_PREFIX}fts MATCH :t")
        return conn.scalar(match, {"t": '"' + term.replace('"', '""') + '"'}) or 0


def row_terms(engine: Engine) -> dict[int, set[str]]:
    """For each stored row, the terms its entry must be indexed under (what the store computes)."""
    with engine.connect() as conn:
        rows = conn.execute(select(ENTRIES.c.seq, ENTRIES.c.entry))
        return {seq: set(entry_terms(decode_entry(raw))) for seq, raw in rows}


# -- whole-corpus state -------------------------------------------------------------------------


def corpus_state(url: str) -> dict[str, Any]:
    """Manifest, revision history (without log positions) and passages, read raw from ``url``.

    A passage is its key, id, content and origin: everything but the timestamp, which is per
    database. Comparable between two databases of the same backend.
    """
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            documents, revisions = DOCUMENTS.c, REVISIONS.c
            manifest = conn.execute(select(DOCUMENTS).order_by(documents.scope, documents.doc_id))
            history = conn.execute(
                select(*[c for c in REVISIONS.c if c.name != "ended_position"]).order_by(
                    revisions.scope, revisions.doc_id, revisions.revision
                )
            )
            state = {"manifest": list(map(tuple, manifest)), "history": list(map(tuple, history))}
            rows = list(
                conn.execute(
                    select(ENTRIES.c.key, ENTRIES.c.entry, ENTRIES.c.revision, ENTRIES.c.valid_to)
                )
            )
    finally:
        engine.dispose()
    passages = []
    for key, raw, revision, valid_to in rows:
        entry = msgspec.json.decode(raw)
        content = msgspec.json.encode(entry["content"])
        current = valid_to is None
        passages.append((key, entry["id"], revision, current, content, entry["origin"]))
    return {**state, "passages": sorted(passages)}


def assert_consistent(url: str) -> None:
    """Every listed document has exactly its counted current passages, every revision in the
    history exactly its passages (current iff the revision is), and the index holds exactly
    the stored rows.

    Read raw from ``url``: no Loom is opened, so nothing catches the projection up first.
    """
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            manifest = conn.execute(select(DOCUMENTS.c.doc_id, DOCUMENTS.c.passage_count))
            counted = sorted(f"{doc_id}#{index}" for doc_id, n in manifest for index in range(n))
            stored = sorted(
                conn.scalars(select(ENTRIES.c.entry_id).where(ENTRIES.c.valid_to.is_(None)))
            )
            revisions = {
                (row.doc_id, row.revision): (row.passage_count, row.ended_position is None)
                for row in conn.execute(select(REVISIONS))
            }
            rows = list(
                conn.execute(select(ENTRIES.c.entry_id, ENTRIES.c.revision, ENTRIES.c.valid_to))
            )
        indexed, expected = indexed_terms_by_row(engine), row_terms(engine)
    finally:
        engine.dispose()
    assert stored == counted, "passages that no manifest row counts, or rows missing passages"
    assert len(set(stored)) == len(stored), "duplicate passages"
    per_revision: dict[tuple[str, int], list[bool]] = {}
    for entry_id, revision, valid_to in rows:
        per_revision.setdefault((entry_id.rpartition("#")[0], revision), []).append(
            valid_to is None
        )
    assert {key: (len(v), all(v)) for key, v in per_revision.items()} == {
        key: value for key, value in revisions.items() if value[0] or key in per_revision
    }, "a revision's passages are missing, extra, or current when the revision is not"
    assert set(indexed) == set(expected), (
        "the search index holds rows that are gone, or misses live ones"
    )
    assert indexed == expected, "the search index files terms its row does not have"


@contextmanager
def another_database(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A second fresh, empty database of the same backend as ``db_url`` (dropped afterwards)."""
    url = make_url(db_url)
    if backend(db_url) != "postgresql":
        yield f"sqlite:///{tmp_path / f'other-{uuid.uuid4().hex[:8]}.db'}"
        return
    name = f"loom_t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield _render(url.set(database=name))
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def _render(url: URL) -> str:
    return url.render_as_string(hide_password=False)
