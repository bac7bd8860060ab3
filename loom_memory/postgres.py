"""`PostgresMemoryStore`: memory in PostgreSQL, searched through a GIN-indexed tsvector.

The entries table gains one column, ``search_vector``, a ``tsvector`` built in Python from the
first-party terms (each term with its positions) rather than by ``to_tsvector``: PostgreSQL's
parser would split and fold some words differently from :func:`~loom_memory.text.tokenize`, and
then the database would answer a different question than the caller asked. For the same reason
the query is a ``tsquery`` of the quoted terms joined with ``|`` (OR), not ``plainto_tsquery``,
which ANDs and so returns fewer memories for a longer question. A GIN index on the column
serves ``@@`` (a store with postings, which never runs ``@@``, has none).

Ranking (ADR 0017) is BM25 without length normalisation, in one statement: the sum over the
query terms in a row of ``idf * tf * (k1 + 1) / (tf + k1)``, ties in append order. Why not
``ts_rank``: it has no IDF, so on a long question the words in every row (why, python, use)
outweighed the rare one that decides it; MRR@10 on the Python FAQ was 0.31 against 0.35-0.37
for BM25 engines. ``tf`` is the number of positions of the term in the row's vector, cut down
to the query's terms (``setweight`` marks them, ``ts_filter`` keeps the marked). ``idf`` is
BM25's, floored at 1e-6, from ``df`` counted over the matching rows and ``N`` the rows at the
key that ``where`` admits: a filtered search ranks as if the store held only those rows. No
``b``: a tsvector keeps no token count, and its lexeme count was a worse length than none.

That statement scores every matching row, unpacking its whole vector, and counts the key's rows
for every query (~60 ms at 100,000 entries). A search without ``where`` gets the same answer,
bit-equal scores and ties included, from the term index instead (ADR 0037,
:mod:`loom_memory.postgres_terms`): postings and per-key counts kept by triggers, and score
bounds that prove which rows cannot enter the top ``limit``. A search with ``where`` still runs
the statement: its statistics are those of the admitted rows, unknown before counting them.

A store built with ``postings=True`` ranks through :mod:`loom_memory.postings` instead (same
formula, integer scores, ties by entry id; a statement-level trigger deletes an entry's
postings, :meth:`PostgresMemoryStore._postings_triggers`).

``entry_id`` is a stored generated column, ``entry::json ->> 'id'``, indexed with ``key`` so
``remove`` is one indexed ``DELETE``. Use a ``postgresql+psycopg://`` URL (psycopg 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import (
    ARRAY,
    Column,
    ColumnElement,
    Connection,
    Index,
    MetaData,
    Row,
    Text,
    bindparam,
    cast,
    func,
    literal,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import TSQUERY, TSVECTOR
from sqlalchemy.schema import SchemaItem
from sqlalchemy.types import UserDefinedType

from loom_memory.postgres_terms import (
    TermIndex,
    bm25,
    drop_ddl,
    idf,
    index_ddl,
    rank,
    term_index,
)
from loom_memory.sql import SqlMemoryStore
from loom_runtime import SchemaCatalog

_MAX_POSITION = 16383  # PostgreSQL's largest tsvector position; it clamps larger ones itself


class PostgresMemoryStore(SqlMemoryStore):
    """A durable memory store in PostgreSQL, full-text searched and ranked by BM25 (no ``b``)."""

    dialect: ClassVar[str] = "postgresql"
    entry_id_sql: ClassVar[str] = "(entry::json ->> 'id')"

    search_isolation: ClassVar[str | None] = "REPEATABLE READ"
    """A search reads the counts, then postings, then rows: one snapshot for all of them."""

    term_index: TermIndex | None = None
    """The term index (:mod:`loom_memory.postgres_terms`) a store without ``postings=True``
    ranks its searches from (for inspection; write through the store only)."""

    def _search_schema(self, prefix: str) -> list[SchemaItem]:
        vector = Column("search_vector", TSVECTOR, nullable=False)
        if self.keeps_postings:
            # Ranked from its postings, such a store never runs ``@@`` (_search_rows is for
            # stores without them): a GIN index on the vector would be pure write cost.
            return [vector]
        return [vector, Index(_gin_index(prefix), "search_vector", postgresql_using="gin")]

    def _declare_search_tables(self, prefix: str, metadata: MetaData) -> None:
        if self.postings is None:
            self.term_index = term_index(prefix, metadata, self.entries)

    def _search_ddl(self, *, created: set[str]) -> list[str]:
        # The GIN index is declared with the table, in _search_schema. A postings store
        # written before it left the index out still has one: drop it (idempotent).
        if self.keeps_postings:
            assert self.postings is not None
            gin = f"DROP INDEX IF EXISTS {_gin_index(self.table_prefix)}"
            functions, triggers = self._postings_triggers()
            # With either table made now (a new store; postings dropped by hand), the
            # triggers are made too: nothing else would make them for this store.
            made = created & {self.entries.name, self.postings.name}
            return [gin, *functions, *(triggers if made else [])]
        if self.term_index is None:
            return []
        return index_ddl(self.table_prefix, self.entries, self.term_index, created=created)

    def _postings_triggers(self) -> tuple[list[str], list[str]]:
        """The functions and statement-level triggers of a store with ``postings=True``: one
        deleting a deleted entry's postings (one ``DELETE`` joined to the statement's deleted
        rows, where the foreign key older code declared cascaded row by row and was checked
        for every posting inserted), one refusing a ``TRUNCATE`` of the entries, which fires
        no delete trigger and would leave the postings to rows that reuse their numbers (the
        key refused it too). ADR 0044, amended "no foreign key"."""
        assert self.postings is not None
        rows = self.entries.name
        deleted, truncated = _postings_functions(self.table_prefix)
        return (
            [
                f"CREATE OR REPLACE FUNCTION {deleted}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN DELETE FROM {self.postings.name} p USING old_rows o "
                "WHERE p.seq = o.seq; RETURN NULL; END $$",
                f"CREATE OR REPLACE FUNCTION {truncated}() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION USING MESSAGE = 'TRUNCATE of ' || TG_TABLE_NAME || "
                "' would leave its postings and counts behind: DELETE its rows, or drop the "
                "store and rebuild it'; END $$",
            ],
            [
                f"DROP TRIGGER IF EXISTS {rows}_postings_delete ON {rows}",
                f"CREATE TRIGGER {rows}_postings_delete AFTER DELETE ON {rows} "
                "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
                f"EXECUTE FUNCTION {deleted}()",
                f"DROP TRIGGER IF EXISTS {rows}_postings_truncate ON {rows}",
                f"CREATE TRIGGER {rows}_postings_truncate BEFORE TRUNCATE ON {rows} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {truncated}()",
            ],
        )

    def _upgrade_ddl(self, catalog: SchemaCatalog) -> list[str]:
        """A postings store older code wrote, with a foreign key from its postings to its
        entries and none of the triggers (told by their functions, which it lacks): the key
        dropped and the triggers made, in the open's transaction, once. A store whose
        postings this open makes gets its triggers from :meth:`_search_ddl`."""
        if (
            self.postings is None
            or self.postings.name not in catalog.tables
            or all(name in catalog.functions for name in _postings_functions(self.table_prefix))
        ):
            return []
        _, triggers = self._postings_triggers()
        return [
            # PostgreSQL's name for the key older code declared unnamed: <table>_<column>_fkey.
            f"ALTER TABLE {self.postings.name} DROP CONSTRAINT IF EXISTS "
            f"{self.postings.name}_seq_fkey",
            *triggers,
        ]

    def _drop_ddl(self) -> list[str]:
        if self.keeps_postings:  # their triggers go with the entries table
            return [
                f"DROP FUNCTION IF EXISTS {name}() CASCADE"
                for name in _postings_functions(self.table_prefix)
            ]
        return [] if self.term_index is None else drop_ddl(self.table_prefix)

    def _search_values(self, terms: list[str]) -> dict[str, Any]:
        lexemes = (
            f"{_quote(term)}:{min(position, _MAX_POSITION)}"
            for position, term in enumerate(terms, start=1)
        )
        return {"search_vector": " ".join(lexemes)}

    def _search_rows(
        self,
        conn: Connection,
        key: str,
        terms: list[str],
        limit: int,
        where: ColumnElement[bool] | None,
    ) -> Sequence[Row[Any]]:
        if where is None and self.term_index is not None:
            ranked = rank(conn, self.term_index, key, terms, limit)
            if self.annotations:  # read through SQLAlchemy, which converts their values
                return self._read_seqs(conn, [row.seq for row in ranked])
            return ranked
        rows = self.entries.c
        admitted = [rows.key == key, *([] if where is None else [where])]
        any_term = cast(bindparam("query", " | ".join(map(_quote, terms))), TSQUERY)
        # Each match's vector cut down to the query's terms: mark them A (a stored vector has
        # no weights, so every other lexeme is D) and keep the A lexemes, with their positions.
        marked = func.setweight(
            rows.search_vector, _WEIGHT_A, bindparam("terms", terms, ARRAY(Text))
        )
        occurrence = (
            func.unnest(func.ts_filter(marked, _ONLY_A))
            .table_valued("lexeme", "positions")
            .lateral("occurrence")
        )
        occurrences = (
            select(
                rows.seq,
                occurrence.c.lexeme,
                func.cardinality(occurrence.c.positions).label("tf"),
            )
            .join_from(self.entries, occurrence, true())
            .where(*admitted, rows.search_vector.bool_op("@@")(any_term))
            .cte("occurrences")
            .prefix_with("MATERIALIZED")
        )
        found = occurrences.c
        total = select(func.count()).select_from(self.entries).where(*admitted)
        weight = (
            select(found.lexeme, idf(total.scalar_subquery(), func.count()).label("idf"))
            .group_by(found.lexeme)
            .cte("idf")
            .prefix_with("MATERIALIZED")
        )
        score = bm25(weight.c.idf, found.tf, found.lexeme).label("score")
        best = (
            select(found.seq, score)
            .join_from(occurrences, weight, found.lexeme == weight.c.lexeme)
            .group_by(found.seq)
            .order_by(score.desc(), found.seq)
            .limit(limit)
            .cte("best")
            .prefix_with("MATERIALIZED")
        )
        statement = (
            select(rows.entry, *self.annotations)
            .join_from(best, self.entries, best.c.seq == rows.seq)
            .order_by(best.c.score.desc(), best.c.seq)
        )
        return conn.execute(statement).all()


class _Char(UserDefinedType[str]):
    """PostgreSQL's one-byte ``"char"``: the type of a tsvector weight label."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return '"char"'


_WEIGHT_A = cast(literal("A"), _Char())
_ONLY_A = cast(literal(["a"], ARRAY(Text)), ARRAY(_Char()))


def _postings_functions(prefix: str) -> tuple[str, str]:
    """A postings store's trigger functions: deleting a deleted entry's postings, refusing a
    ``TRUNCATE`` of the entries."""
    return f"{prefix}postings_on_delete", f"{prefix}postings_on_truncate"


def _gin_index(prefix: str) -> str:
    """The GIN index on ``search_vector`` that serves ``@@`` (stores without postings)."""
    return f"{prefix}entries_search"


def _quote(term: str) -> str:
    """Quote ``term`` as one tsvector/tsquery lexeme, so no character in it is an operator."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"
