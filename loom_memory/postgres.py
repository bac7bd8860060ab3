"""`PostgresMemoryStore`: memory in PostgreSQL, searched through a GIN-indexed tsvector.

The entries table gains one column, ``search_vector``, a ``tsvector`` built in Python from the
first-party terms (each term with its positions) rather than by ``to_tsvector``: PostgreSQL's
parser would split and fold some words differently from :func:`~loom_memory.text.tokenize`, and
then the database would answer a different question than the caller asked. For the same reason
the query is a ``tsquery`` of the quoted terms joined with ``|`` (OR), not ``plainto_tsquery``,
which ANDs and so returns fewer memories for a longer question. A GIN index on the column
serves ``@@``; ``ts_rank`` orders the hits, ties in append order.

``entry_id`` is a stored generated column, ``entry::json ->> 'id'``, indexed with ``key`` so
``remove`` is one indexed ``DELETE``. Use a ``postgresql+psycopg://`` URL (psycopg 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import Column, ColumnElement, Connection, Index, Row, bindparam, cast, func, select
from sqlalchemy.dialects.postgresql import TSQUERY, TSVECTOR
from sqlalchemy.schema import SchemaItem

from loom_memory.sql import SqlMemoryStore

_MAX_POSITION = 16383  # PostgreSQL's largest tsvector position; it clamps larger ones itself


class PostgresMemoryStore(SqlMemoryStore):
    """A durable memory store in PostgreSQL, full-text searched with ts_rank."""

    dialect: ClassVar[str] = "postgresql"
    entry_id_sql: ClassVar[str] = "(entry::json ->> 'id')"

    def _search_schema(self, prefix: str) -> list[SchemaItem]:
        return [
            Column("search_vector", TSVECTOR, nullable=False),
            Index(f"{prefix}entries_search", "search_vector", postgresql_using="gin"),
        ]

    def _search_ddl(self) -> list[str]:
        return []  # the GIN index is declared with the table, in _search_schema

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
        rows = self.entries.c
        query = cast(bindparam("query", " | ".join(map(_quote, terms))), TSQUERY)
        statement = (
            select(rows.entry, *self.annotations)
            .where(rows.key == key, rows.search_vector.bool_op("@@")(query))
            .order_by(func.ts_rank(rows.search_vector, query).desc(), rows.seq)
            .limit(limit)
        )
        if where is not None:
            statement = statement.where(where)
        return conn.execute(statement).all()


def _quote(term: str) -> str:
    """Quote ``term`` as one tsvector/tsquery lexeme, so no character in it is an operator."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"
