"""`SqliteMemoryStore`: memory in SQLite, searched with FTS5 and ranked by BM25.

The search index is an EXTERNAL-CONTENT FTS5 table, ``<prefix>fts``, over the entries table's
``search_text`` column (the entry's terms, ``tokenize(searchable_text(entry))`` joined by
spaces). Triggers keep it in step, so every verb, including a caller's own ``DELETE``, maintains
it in the same transaction as the rows:

* after an insert, the new row's terms are added under its ``seq`` (the FTS rowid);
* after a delete, FTS5's ``'delete'`` command removes exactly that rowid's terms.

A reset (``clear_all``, what ``loom rebuild`` runs) is the exception: it drops the index and its
triggers, deletes the rows and makes the index again, so a repair never needs the index it
repairs to be sound.

Two lessons are built in. Deleting from an FTS5 table by a column value scans the whole index,
so nothing here ever does: ``remove`` is one ``DELETE`` on the ordinary table using its
``(key, entry_id)`` index, and the trigger deletes from the index by rowid. And a search joined
back to the rows hides a stale index (a term whose row is gone simply joins to nothing), so the
conformance kit cannot see index maintenance; this backend's own tests read the index without
the join.

Search returns exactly what ``ORDER BY bm25(), seq LIMIT k`` over the OR of the terms returns,
but does not compute ``bm25()`` for every matching row: :mod:`loom_memory.topk` runs a few
narrower match expressions and proves, from each term's document count (read from an
``fts5vocab`` view, ``<prefix>fts_terms``), that no row it skipped could enter the top ``k``.
That takes a three-word query on 100,000 entries from scoring ~15,000 rows to a few hundred.

A store built with ``postings=True`` ranks through :mod:`loom_memory.postings` instead (the
statistics of the rows ``where`` admits, not of the whole index; a trigger deletes an entry's
postings with it); the FTS index is still kept.

The FTS tokenizer is ``ascii`` over the terms :func:`tokenize` made, joined by spaces: it
splits only where they were joined, so the index holds exactly the first-party terms (an index
made with ``unicode61`` by older code is made again at open, :data:`_TOKENIZER`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Float,
    MetaData,
    Row,
    Text,
    delete,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.schema import SchemaItem

from loom_memory.errors import BackendError
from loom_memory.sql import SqlMemoryStore
from loom_memory.topk import Hit, Run, TermStats, top_k
from loom_runtime import READ_ONLY, SchemaCatalog

_TOKENIZER: Final = "tokenize='ascii'"
"""How FTS5 splits ``search_text``, which holds the entry's terms (:func:`tokenize`, letters
and digits only) joined by spaces: ``ascii`` splits on ASCII's non-alphanumerics and keeps
every other character in a word, so its words are exactly the terms. ``unicode61`` split
words on letters Python's tables call part of one (a New Tai Lue vowel sign, a Vedic sign):
the term's count was never found, and the entry was missed."""


class SqliteMemoryStore(SqlMemoryStore):
    """A durable memory store in one SQLite file (``sqlite:///path``), FTS5-searched."""

    dialect: ClassVar[str] = "sqlite"
    entry_id_sql: ClassVar[str] = "json_extract(entry, '$.id')"

    _counts: _Counts | None = None
    """Document counts read at the latest version of the index a search saw."""

    @property
    def fts_table(self) -> str:
        """Name of the FTS5 index table (for inspection; write through the store only)."""
        return f"{self.table_prefix}fts"

    def _search_schema(self, prefix: str) -> list[SchemaItem]:
        return [Column("search_text", Text, nullable=False)]

    @property
    def vocabulary_table(self) -> str:
        """Name of the ``fts5vocab`` view of the index: each term's document count."""
        return f"{self.table_prefix}fts_terms"

    def _declare_search_tables(self, prefix: str, metadata: MetaData) -> None:
        return None  # FTS5 keeps its own tables (_search_ddl); postings are the base's

    def _outdated_tables(self, catalog: SchemaCatalog) -> list[str]:
        """The FTS5 index made by older code, with ``unicode61``: made again (and filled from
        the rows, :meth:`_create_schema`) with the tokenizer below."""
        outdated = super()._outdated_tables(catalog)
        made = catalog.objects.get(self.fts_table)
        if made is not None and _TOKENIZER not in made:
            outdated.append(self.fts_table)
        return outdated

    def _create_schema(self, conn: Connection, metadata: MetaData, catalog: SchemaCatalog) -> None:
        # Made again (outdated), or made now over rows that are there (dropped by hand: made
        # empty, its delete trigger would send it deletes of rows it never held, which
        # corrupts an FTS5 index).
        remade = self.fts_table in self._outdated_tables(catalog) or (
            self.fts_table not in catalog.objects and self.entries.name in catalog.tables
        )
        super()._create_schema(conn, metadata, catalog)
        if remade:  # an external-content index: filled again from the rows it indexes
            conn.exec_driver_sql(
                f"INSERT INTO {self.fts_table}({self.fts_table}) VALUES('rebuild')"
            )

    def _search_ddl(self, *, created: set[str]) -> list[str]:
        return [*self._index_ddl(), *self._postings_ddl()]

    def _index_ddl(self) -> list[str]:
        """The FTS5 index, the triggers keeping it in step with the rows, and its vocabulary."""
        rows, fts = self.entries.name, self.fts_table
        return [
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(search_text, "
            f"content='{rows}', content_rowid='seq', {_TOKENIZER})",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_fts_insert AFTER INSERT ON {rows} BEGIN "
            f"INSERT INTO {fts}(rowid, search_text) VALUES (new.seq, new.search_text); END",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_fts_delete AFTER DELETE ON {rows} BEGIN "
            f"INSERT INTO {fts}({fts}, rowid, search_text) "
            f"VALUES ('delete', old.seq, old.search_text); END",
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.vocabulary_table} "
            f"USING fts5vocab({fts}, 'row')",
        ]

    def _postings_ddl(self) -> list[str]:
        """The trigger deleting an entry's postings with it (SQLite ignores the foreign key)."""
        if self.postings is None:
            return []
        rows, postings = self.entries.name, self.postings.name
        return [
            f"CREATE TRIGGER IF NOT EXISTS {rows}_postings_delete AFTER DELETE ON {rows} BEGIN "
            f"DELETE FROM {postings} WHERE seq = old.seq; END"
        ]

    def _delete_rows(self, conn: Connection, key: str | None) -> None:
        """The rows' postings first, in one statement, then the rows: each row's delete
        triggers read its postings (to delete them, and a temporal store to uncount its terms
        term by term at every level), ~0.75 ms a passage, which made deleting the rows most
        of a corpus projection's rebuild; with the postings gone they find none."""
        if self.postings is not None:
            statement = delete(self.postings)
            if key is not None:
                rows = self.entries.c
                statement = statement.where(
                    self.postings.c.seq.in_(select(rows.seq).where(rows.key == key))
                )
            conn.execute(statement)
        super()._delete_rows(conn, key)

    def clear_all(self, *, conn: Connection | None = None) -> None:
        """Remove every entry of every key without asking the FTS5 index anything: it is
        dropped with its triggers, the rows deleted, and it is made again, empty.

        Why: this is a projection's reset, the repair ``loom rebuild`` runs. Through the
        per-row delete trigger, each row's delete asked the index to remove that row's terms,
        and an index emptied or damaged by hand (``DELETE FROM <prefix>fts``) answers "database
        disk image is malformed": the repair failed on what it was to repair, and a memory's
        next ``clear``, already in the log, blocked every catch-up (ADR 0009, amended "fts").
        A dropped index holds nothing of the rows, so there is nothing to keep in step; all of
        it runs in the caller's transaction (SQLite's DDL is transactional)."""
        with self._begin(conn) as c:
            for statement in self._drop_index_ddl():
                c.exec_driver_sql(statement)
            self._delete_rows(c, None)
            for statement in self._index_ddl():
                c.exec_driver_sql(statement)

    def forget_deleted(self, *, conn: Connection | None = None) -> None:
        """Merge the FTS5 index into one segment: a delete only adds a tombstone segment, and
        the deleted rows' terms stay in the older segments' pages until a merge drops them."""
        fts = self.fts_table
        with self._begin(conn) as c:
            c.exec_driver_sql(f"INSERT INTO {fts}({fts}) VALUES('optimize')")

    def _drop_ddl(self) -> list[str]:
        return self._drop_index_ddl()

    def _drop_index_ddl(self) -> list[str]:
        """DDL dropping what :meth:`_index_ddl` makes (the triggers first: a trigger naming a
        dropped index would fail the next write of a row)."""
        rows = self.entries.name
        return [
            f"DROP TRIGGER IF EXISTS {rows}_fts_insert",
            f"DROP TRIGGER IF EXISTS {rows}_fts_delete",
            f"DROP TABLE IF EXISTS {self.vocabulary_table}",
            f"DROP TABLE IF EXISTS {self.fts_table}",
        ]

    def _search_values(self, terms: list[str]) -> dict[str, Any]:
        return {"search_text": " ".join(terms)}

    def _search_rows(
        self,
        conn: Connection,
        key: str,
        terms: list[str],
        limit: int,
        where: ColumnElement[bool] | None,
    ) -> Sequence[Row[Any]]:
        rows, fts = self.entries, self.fts_table
        state = self._index_state(conn)
        run: Run
        if where is None:
            # Plain DBAPI statements: SQLAlchemy's per-statement work (compile-cache lookup,
            # result metadata) cost as much as a small match.
            if state.low_key == key == state.high_key:
                # Every row is at the key, so the key check would reject nothing: leave the
                # entries table out and rank the index alone.
                sql = (
                    f"SELECT rowid, bm25({fts}) FROM {fts} WHERE {fts} MATCH ? "
                    f"ORDER BY bm25({fts}), rowid LIMIT ?"
                )
                parameters: tuple[Any, ...] = (limit,)
            else:
                # The key check reads the small (key, seq) index instead of the wide rows:
                # half the cost of a match that hits thousands of rows.
                sql = (
                    f"SELECT e.seq, bm25({fts}) FROM {rows.name} AS e "
                    f"INDEXED BY {self.table_prefix}entries_key_seq "
                    f"JOIN {fts} ON e.seq = {fts}.rowid WHERE {fts} MATCH ? AND e.key = ? "
                    f"ORDER BY bm25({fts}), e.seq LIMIT ?"
                )
                parameters = (key, limit)

            def run(match: str) -> list[Hit]:
                found = conn.exec_driver_sql(sql, (match, *parameters))
                return [Hit(rowid=seq, score=-bm25) for seq, bm25 in found]

        else:
            bm25 = literal_column(f"bm25({fts})", Float)
            ranked = (
                select(rows.c.seq, bm25.label("bm25"))
                .select_from(rows.join(table(fts), rows.c.seq == literal_column(f"{fts}.rowid")))
                .where(text(f"{fts} MATCH :match"), rows.c.key == key, where)
                .order_by(bm25, rows.c.seq)
                .limit(limit)
            )

            def run(match: str) -> list[Hit]:
                found = conn.execute(ranked, {"match": match})
                return [Hit(rowid=row.seq, score=-row.bm25) for row in found]

        stats = self._term_stats(conn, terms, state)
        return self._read_seqs(conn, top_k(terms, stats, limit, run))

    def _index_state(self, conn: Connection) -> _IndexState:
        """What one statement tells a search before it ranks: the index's version, its row
        count, and the smallest and largest key (two seeks of the key index)."""
        data, rows = f"{self.fts_table}_data", self.entries.name
        schema, structure, averages, low, high = conn.exec_driver_sql(
            f"SELECT (SELECT schema_version FROM pragma_schema_version), "
            f"(SELECT block FROM {data} WHERE id = {_STRUCTURE_ID}), "
            f"(SELECT block FROM {data} WHERE id = {_AVERAGES_ID}), "
            f"(SELECT min(key) FROM {rows}), (SELECT max(key) FROM {rows})"
        ).one()
        # This connection's uncommitted writes sit in FTS5's pending terms, which a count
        # sees and the structure record does not: the version then says nothing. A read-only
        # transaction (a search's own) holds none.
        pending = not conn.get_execution_options().get(READ_ONLY, False) and bool(
            conn.connection.driver_connection.in_transaction  # type: ignore[union-attr]
        )
        return _IndexState(
            version=None if pending or structure is None else (schema, structure, averages),
            rows=_varint(averages) if averages else 0,
            low_key=low,
            high_key=high,
        )

    def _term_stats(
        self, conn: Connection, terms: list[str], state: _IndexState | None = None
    ) -> TermStats:
        """The row count and each term's document count, as FTS5's ``bm25()`` sees them
        (in the index ``state`` a search found, read here if not given).

        An ``fts5vocab`` row counts a term's documents by reading its whole doclist (~0.5 ms
        for a common word at 100,000 entries), so the counts read at the index's current
        version are kept, and a search reads only the terms not yet counted at it.
        """
        if state is None:
            state = self._index_state(conn)
        known = self._counts
        if state.version is None or known is None or known.version != state.version:
            known = _Counts(state.version)
            if state.version is not None:
                self._counts = known
        documents = {term: known.documents.get(term) for term in terms}
        missing = [term for term, count in documents.items() if count is None]
        if missing:
            marks = ", ".join("?" * len(missing))
            found = conn.exec_driver_sql(
                f"SELECT term, doc FROM {self.vocabulary_table} WHERE term IN ({marks})",
                tuple(missing),
            )
            counted: dict[str, int] = {term: count for term, count in found}
            if len(known.documents) + len(missing) > _COUNTED_TERMS:
                known.documents.clear()
            for term in missing:
                documents[term] = known.documents[term] = counted.get(term, 0)
        return TermStats(
            rows=state.rows,
            documents={term: count for term, count in documents.items() if count},
        )


@dataclass(frozen=True)
class _IndexState:
    """The FTS index as a search found it (see ``SqliteMemoryStore._index_state``)."""

    version: tuple[int, bytes, bytes] | None
    """The schema version (a dropped and recreated index starts its records over) and FTS5's
    structure and averages records: every committed write to the index changes the structure
    record, which lists a new segment and a write counter that only grows. ``None`` while this
    connection holds uncommitted writes."""
    rows: int
    low_key: str | None
    high_key: str | None


@dataclass
class _Counts:
    """Document counts read at one version of the index, by term (0: in no row)."""

    version: tuple[int, bytes, bytes] | None
    documents: dict[str, int] = field(default_factory=dict)


_STRUCTURE_ID = 10
"""FTS5's structure record in ``<fts>_data`` (``FTS5_STRUCTURE_ROWID``, stable on disk)."""

_AVERAGES_ID = 1
"""FTS5's averages record in ``<fts>_data``: the row count, then each column's token total."""

_COUNTED_TERMS = 50_000
"""How many terms' counts are kept for one version of the index before they start over."""


def _varint(data: bytes) -> int:
    """Decode the SQLite varint at the start of ``data``: FTS5's total row count.

    FTS5 keeps its "averages" record (row 1 of ``<fts>_data``) as varints, the row count first
    (``fts5_index.c``, stable on-disk format); it is the ``N`` of ``bm25()``'s idf.
    """
    value = 0
    for index, byte in enumerate(data[:9]):
        if index == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    raise BackendError("FTS5 averages record is truncated")
