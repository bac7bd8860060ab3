"""`SqliteMemoryStore`: memory in SQLite, searched with FTS5 and ranked by BM25.

The search index is an EXTERNAL-CONTENT FTS5 table, ``<prefix>fts``, over the entries table's
``search_text`` column (the entry's terms, ``tokenize(searchable_text(entry))`` joined by
spaces). Triggers keep it in step, so every verb, including a caller's own ``DELETE``, maintains
it in the same transaction as the rows:

* after an insert, the new row's terms are added under its ``seq`` (the FTS rowid);
* after a delete, FTS5's ``'delete'`` command removes exactly that rowid's terms.

Two lessons are built in. Deleting from an FTS5 table by a column value scans the whole index,
so nothing here ever does: ``remove`` is one ``DELETE`` on the ordinary table using its
``(key, entry_id)`` index, and the trigger deletes from the index by rowid. And a search joined
back to the rows hides a stale index (a term whose row is gone simply joins to nothing), so the
conformance kit cannot see index maintenance; this backend's own tests read the index without
the join.

The FTS tokenizer is ``unicode61`` with diacritics kept: it splits on what :func:`tokenize`
splits on and folds case, so the index holds exactly the first-party terms.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import Column, Select, Text, literal_column, select, table, text
from sqlalchemy.schema import SchemaItem

from loom_memory.sql import SqlMemoryStore


class SqliteMemoryStore(SqlMemoryStore):
    """A durable memory store in one SQLite file (``sqlite:///path``), FTS5-searched."""

    dialect: ClassVar[str] = "sqlite"
    entry_id_sql: ClassVar[str] = "json_extract(entry, '$.id')"

    @property
    def fts_table(self) -> str:
        """Name of the FTS5 index table (for inspection; write through the store only)."""
        return f"{self.table_prefix}fts"

    def _search_schema(self, prefix: str) -> list[SchemaItem]:
        return [Column("search_text", Text, nullable=False)]

    def _search_ddl(self) -> list[str]:
        rows, fts = self.entries.name, self.fts_table
        return [
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(search_text, "
            f"content='{rows}', content_rowid='seq', tokenize='unicode61 remove_diacritics 0')",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_fts_insert AFTER INSERT ON {rows} BEGIN "
            f"INSERT INTO {fts}(rowid, search_text) VALUES (new.seq, new.search_text); END",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_fts_delete AFTER DELETE ON {rows} BEGIN "
            f"INSERT INTO {fts}({fts}, rowid, search_text) "
            f"VALUES ('delete', old.seq, old.search_text); END",
        ]

    def _drop_ddl(self) -> list[str]:
        return [f"DROP TABLE IF EXISTS {self.fts_table}"]

    def _search_values(self, terms: list[str]) -> dict[str, Any]:
        return {"search_text": " ".join(terms)}

    def _search_statement(self, key: str, terms: list[str], limit: int) -> Select[Any]:
        rows, fts = self.entries, self.fts_table
        # Each term is quoted, so FTS5 operators in a query (NOT, OR, *, ^, :) are plain words.
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        return (
            select(rows.c.entry, *self.annotations)
            .select_from(rows.join(table(fts), rows.c.seq == literal_column(f"{fts}.rowid")))
            .where(text(f"{fts} MATCH :match").bindparams(match=match), rows.c.key == key)
            .order_by(text(f"bm25({fts})"), rows.c.seq)
            .limit(limit)
        )
