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

Search returns exactly what ``ORDER BY bm25(), seq LIMIT k`` over the OR of the terms returns,
but does not compute ``bm25()`` for every matching row: :mod:`loom_memory.topk` runs a few
narrower match expressions and proves, from each term's document count (read from an
``fts5vocab`` view, ``<prefix>fts_terms``), that no row it skipped could enter the top ``k``.
That takes a three-word query on 100,000 entries from scoring ~15,000 rows to a few hundred.

The document counts and a tighter bound come from ``<prefix>term_bounds``, one row per term
kept by the same triggers (:func:`_bounds_ddl`): its document count ``df``, its largest count in
one row ``max_tf`` and its smallest ``D / tf`` (row length over that count) ``min_ratio``. From
those, no row holding the term gets more than :meth:`LengthBoundStats.term_bound` from it, about
half of FTS5's ``k1 + 1`` ceiling on ordinary text, so fewer conjunctions run; and reading a
count is one seek, not a walk of the term's whole doclist as the ``fts5vocab`` view does.

A store built with ``postings=True`` ranks through :mod:`loom_memory.postings` instead (the
statistics of the rows ``where`` admits, not of the whole index; a trigger deletes an entry's
postings with it); the FTS index is still kept.

The FTS tokenizer is ``unicode61`` with diacritics kept: it splits on what :func:`tokenize`
splits on and folds case, so the index holds exactly the first-party terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Float,
    Integer,
    MetaData,
    Row,
    Table,
    Text,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.schema import SchemaItem

from loom_memory.errors import BackendError
from loom_memory.sql import SqlMemoryStore
from loom_memory.topk import K1, Hit, Run, TermStats, top_k

B = 0.75
"""FTS5's ``bm25()`` b (fixed in SQLite's source, like k1)."""

BOUND_SLACK = 1e-9
"""Relative slack added to a term's bound computed in Python: a bound must never fall below
the score FTS5 computes in C from the same integers, whatever the last bit of either."""


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

    @property
    def vocabulary_table(self) -> str:
        """Name of the ``fts5vocab`` view of the index: each term's document count."""
        return f"{self.table_prefix}fts_terms"

    term_bounds: Table | None = None
    """``<prefix>term_bounds`` when the store ranks through FTS5 (no ``postings=True``): each
    term's ``df``, ``max_tf`` and ``min_ratio`` (see the module docstring)."""

    def _declare_search_tables(self, prefix: str, metadata: MetaData) -> None:
        # FTS5 keeps its own tables (_search_ddl); postings are the base's.
        if self.postings is None:
            self.term_bounds = Table(
                f"{prefix}term_bounds",
                metadata,
                Column("term", Text, primary_key=True),
                Column("df", Integer, nullable=False),
                Column("max_tf", Integer, nullable=False),
                Column("min_ratio", Float, nullable=False),
                sqlite_with_rowid=False,
            )

    def _search_ddl(self, *, created: set[str]) -> list[str]:
        rows, fts = self.entries.name, self.fts_table
        return [
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(search_text, "
            f"content='{rows}', content_rowid='seq', tokenize='unicode61 remove_diacritics 0')",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_fts_insert AFTER INSERT ON {rows} BEGIN "
            f"INSERT INTO {fts}(rowid, search_text) VALUES (new.seq, new.search_text); END",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_fts_delete AFTER DELETE ON {rows} BEGIN "
            f"INSERT INTO {fts}({fts}, rowid, search_text) "
            f"VALUES ('delete', old.seq, old.search_text); END",
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.vocabulary_table} "
            f"USING fts5vocab({fts}, 'row')",
            *self._postings_ddl(),
            *self._bounds_ddl(created),
        ]

    def _bounds_ddl(self, created: set[str]) -> list[str]:
        """The triggers keeping ``term_bounds``, and the table filled from the rows when this
        open created it or the entries table (a store written by older code, or entries dropped
        by hand beside a stale table); nothing else, so reopening changes nothing.

        A row's terms are its ``search_text`` split on single spaces (``json_each`` of it as a
        JSON array: terms are letter and digit runs, never a quote or a backslash), so ``D`` is
        the number of terms, which is the row's FTS5 token count (the tokenizers split alike,
        see the module docstring). A delete subtracts from ``df`` only: ``max_tf`` and
        ``min_ratio`` stay what some row once had, still bounds, never too low.
        """
        if self.term_bounds is None:
            return []
        rows, bounds = self.entries.name, self.term_bounds.name

        def shapes(text: str, seq: str, source: str = "") -> str:
            # One row per (row, term): tf, and the row's length over tf.
            terms = f"""json_each('["' || replace({text}, ' ', '","') || '"]')"""
            return (
                f"SELECT {seq} AS seq, value AS term, count(*) AS tf, "
                f"CAST(sum(count(*)) OVER (PARTITION BY {seq}) AS REAL) / count(*) AS ratio "
                f"FROM {source}{terms} WHERE value != '' GROUP BY {seq}, value"
            )

        upsert = (
            "ON CONFLICT (term) DO UPDATE SET df = df + excluded.df, "
            "max_tf = max(max_tf, excluded.max_tf), min_ratio = min(min_ratio, excluded.min_ratio)"
        )
        statements = [
            f"CREATE TRIGGER IF NOT EXISTS {rows}_bounds_insert AFTER INSERT ON {rows} "
            f"WHEN new.search_text != '' BEGIN "
            f"INSERT INTO {bounds} (term, df, max_tf, min_ratio) "
            f"SELECT term, 1, tf, ratio FROM ({shapes('new.search_text', 'new.seq')}) WHERE true "
            f"{upsert}; END",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_bounds_delete AFTER DELETE ON {rows} "
            f"WHEN old.search_text != '' BEGIN "
            f"UPDATE {bounds} SET df = df - 1 WHERE term IN (SELECT term FROM "
            f"({shapes('old.search_text', 'old.seq')})); END",
        ]
        if rows in created or bounds in created:
            statements += [
                f"DELETE FROM {bounds}",
                f"INSERT INTO {bounds} (term, df, max_tf, min_ratio) "
                f"SELECT term, count(*), max(tf), min(ratio) "
                f"FROM ({shapes('e.search_text', 'e.seq', f'{rows} AS e, ')}) GROUP BY term",
            ]
        return statements

    def _postings_ddl(self) -> list[str]:
        """The trigger deleting an entry's postings with it (SQLite ignores the foreign key)."""
        if self.postings is None:
            return []
        rows, postings = self.entries.name, self.postings.name
        return [
            f"CREATE TRIGGER IF NOT EXISTS {rows}_postings_delete AFTER DELETE ON {rows} BEGIN "
            f"DELETE FROM {postings} WHERE seq = old.seq; END"
        ]

    def _drop_ddl(self) -> list[str]:
        return [
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
        run: Run
        if where is None:
            # Plain DBAPI statements: SQLAlchemy's per-statement work (compile-cache lookup,
            # result metadata) cost as much as a small match.
            if self._holds_only(conn, key):
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

        return self._read_seqs(conn, top_k(terms, self._term_stats(conn, terms), limit, run))

    def _holds_only(self, conn: Connection, key: str) -> bool:
        """True when every row of the store is at ``key`` (two seeks of the key index)."""
        rows = self.entries.name
        low, high = conn.exec_driver_sql(
            f"SELECT (SELECT min(key) FROM {rows}), (SELECT max(key) FROM {rows})"
        ).one()
        return bool(low == key == high)

    def _term_stats(self, conn: Connection, terms: list[str]) -> TermStats:
        """The row count and each term's document count, as FTS5's ``bm25()`` sees them, and
        (with ``term_bounds``) each term's tighter bound."""
        averages = f"(SELECT block FROM {self.fts_table}_data WHERE id = 1)"
        marks = ", ".join("?" * len(terms))
        if self.term_bounds is None:
            counts = conn.exec_driver_sql(
                f"SELECT term, doc, {averages} FROM {self.vocabulary_table} "
                f"WHERE term IN ({marks})",
                tuple(terms),
            ).all()
            return TermStats(
                rows=_varints(counts[0][2])[0] if counts else 0,
                documents={term: documents for term, documents, _ in counts},
            )
        found = conn.exec_driver_sql(
            f"SELECT term, df, max_tf, min_ratio, {averages} FROM {self.term_bounds.name} "
            f"WHERE term IN ({marks}) AND df > 0",
            tuple(terms),
        ).all()
        if not found:
            return TermStats(rows=0, documents={})
        rows, tokens = _varints(found[0][4])[:2]
        return LengthBoundStats(
            rows=rows,
            documents={term: df for term, df, *_ in found},
            average_length=tokens / rows,
            shapes={term: (max_tf, min_ratio) for term, _, max_tf, min_ratio, _ in found},
        )


@dataclass(frozen=True)
class LengthBoundStats(TermStats):
    """FTS5's statistics with a per-term bound from the term's own counts and row lengths.

    FTS5 scores a term in a row ``idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl))``,
    which is ``idf * (k1 + 1) / (1 + k1 * (1 - b) / f + k1 * b * (D / f) / avgdl)``: it grows
    with ``f`` and falls with ``D / f``, so the term's largest ``f`` and smallest ``D / f``
    over the rows holding it bound it from above, whichever row has them. On ordinary text
    that is about half of the ``(k1 + 1) * idf`` the plain bound allows, and the plan stops
    after fewer conjunctions; the scores are still FTS5's own, so the answer is unchanged.
    """

    average_length: float = 1.0
    """FTS5's ``avgdl``: tokens over rows, from its averages record."""
    shapes: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Each term's ``(max_tf, min_ratio)``."""
    _tight: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def upper_bound(self, terms: Sequence[str]) -> float:
        """An upper bound of the score of a row containing exactly ``terms``."""
        return sum(self.term_bound(term) for term in terms)

    def term_bound(self, term: str) -> float:
        """The most one row can score from ``term`` (FTS5's idf, with a little slack)."""
        bound = self._tight.get(term)
        if bound is None:
            hits = self.documents[term]
            idf = max(math.log((self.rows - hits + 0.5) / (hits + 0.5)), 1e-6)
            max_tf, min_ratio = self.shapes[term]
            saturation = (K1 + 1.0) / (
                1.0 + K1 * (1.0 - B) / max_tf + K1 * B * min_ratio / self.average_length
            )
            bound = self._tight[term] = idf * saturation * (1.0 + BOUND_SLACK)
        return bound


def _varints(data: bytes) -> list[int]:
    """Decode the SQLite varints of ``data``: FTS5's averages record.

    FTS5 keeps its "averages" record (row 1 of ``<fts>_data``) as varints, the row count first,
    then each column's token total (``fts5_index.c``, stable on-disk format): the ``N`` of
    ``bm25()``'s idf and, over it, its ``avgdl``.
    """
    values = []
    offset = 0
    while offset < len(data):
        value, offset = _varint(data, offset)
        values.append(value)
    return values


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    """Decode the SQLite varint at ``offset`` of ``data``; return it and the next offset."""
    value = 0
    for index, byte in enumerate(data[offset : offset + 9]):
        if index == 8:
            return (value << 8) | byte, offset + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, offset + index + 1
    raise BackendError("FTS5 averages record is truncated")
