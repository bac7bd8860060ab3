"""The SQL backends with :class:`~loom_memory.store.SupportsValidity`: `SqliteTemporalStore`
and `PostgresTemporalStore`, both built on `TemporalSqlStore`.

Each row carries the log positions it is valid between: ``valid_from`` (written with the row;
0 for a plain ``append``) and ``valid_to`` (NULL while current; set once by ``end_validity``).
A current read or search admits ``valid_to IS NULL``; one as of position P admits
``valid_from <= P < valid_to``. Both are the same ranked query with a different filter, so
they cost the same and rank with the same scorer, and an ended entry never retrieves as
current (it is excluded, not ranked lower).

The ranking rule lives here, once: a temporal store always keeps postings
(:mod:`loom_memory.postings`), so every search counts its statistics over the rows it admits
and breaks ties by entry id. A key that went through any history ranks its present, and any
past state, exactly as a fresh key holding only those entries would.

``end_validity`` is the only UPDATE any SQL store issues, and it touches ``valid_to`` alone:
no search structure (FTS5 index, tsvector, postings) derives from that column, so the
insert/delete triggers that keep them in step stay sufficient.

A caller that keeps more per row (the corpus keeps each passage's document revision) passes
its own ``columns`` and reads them with ``read_annotated``/``search_annotated``, whose
``as_of`` selects the position; ``where`` over its own columns still narrows further.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    URL,
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Index,
    and_,
    or_,
    update,
)
from sqlalchemy.schema import SchemaItem

from loom_memory.entry import MemoryEntry
from loom_memory.postgres import PostgresMemoryStore
from loom_memory.sql import DEFAULT_TABLE_PREFIX, SqlMemoryStore
from loom_memory.sqlite import SqliteMemoryStore
from loom_memory.store import DEFAULT_SEARCH_LIMIT, check_ids, check_key, check_position
from loom_memory.text import PLAIN, Tokenizer


class TemporalSqlStore(SqlMemoryStore):
    """A SQL memory store whose entries are valid between log positions (module docstring)."""

    def __init__(
        self,
        bind: Engine | URL | str,
        *,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        columns: Sequence[SchemaItem] = (),
        tokenizer: Tokenizer = PLAIN,
    ) -> None:
        super().__init__(
            bind,
            table_prefix=table_prefix,
            tokenizer=tokenizer,
            columns=[
                Column("valid_from", BigInteger, nullable=True, default=0),
                Column("valid_to", BigInteger, nullable=True),
                # A search reads the seqs a key admits at a position from this index alone
                # (the rows are wide). valid_from leads valid_to on purpose: an index on
                # (key, valid_to) made SQLite pick it for end_validity (UPDATE ... WHERE key
                # AND entry_id IN .. AND valid_to IS NULL) and scan every current entry of the
                # key per call; this one offers that UPDATE only its key prefix, so the
                # (key, entry_id) index serves it.
                Index(f"{table_prefix}entries_validity", "key", "valid_from", "valid_to", "seq"),
                *columns,
            ],
            postings=True,
        )

    def append_at(
        self,
        key: str,
        entries: Sequence[MemoryEntry],
        position: int,
        *,
        conn: Connection | None = None,
        values: dict[str, Any] | None = None,
    ) -> None:
        """Add ``entries`` to the end of ``key``, valid from ``position`` until ended."""
        valid = {"valid_from": check_position(position)}
        self.append(key, entries, conn=conn, values={**(values or {}), **valid})

    def end_validity(
        self, key: str, ids: Iterable[str], position: int, *, conn: Connection | None = None
    ) -> None:
        """End, at ``position``, the current entries at ``key`` whose id is in ``ids``."""
        check_key(key)
        wanted = check_ids(ids)
        check_position(position)
        if not wanted:
            return
        rows = self.entries.c
        statement = (
            update(self.entries)
            .where(rows.key == key, rows.entry_id.in_(sorted(wanted)), rows.valid_to.is_(None))
            .values(valid_to=position)
        )
        with self._begin(conn) as c:
            c.execute(statement)

    def read_as_of(
        self, key: str, position: int, *, conn: Connection | None = None
    ) -> list[MemoryEntry]:
        """The entries at ``key`` valid at ``position``, in append order."""
        found = self.read_annotated(key, conn=conn, as_of=check_position(position))
        return [entry for entry, _ in found]

    def search_as_of(
        self,
        key: str,
        query: str,
        position: int,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        conn: Connection | None = None,
    ) -> list[MemoryEntry]:
        """As :meth:`search`, among (and ranked by) the entries valid at ``position``."""
        found = self.search_annotated(
            key, query, limit=limit, conn=conn, as_of=check_position(position)
        )
        return [entry for entry, _ in found]

    def read_annotated(
        self,
        key: str,
        *,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
        as_of: int | None = None,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """The current entries (or those valid at ``as_of``) with their extra columns."""
        return super().read_annotated(key, conn=conn, where=self._admitted(as_of, where))

    def search_annotated(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
        as_of: int | None = None,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """The best current entries (or those valid at ``as_of``) with their extra columns."""
        admitted = self._admitted(as_of, where)
        return super().search_annotated(key, query, limit=limit, conn=conn, where=admitted)

    def _admitted(
        self, as_of: int | None, where: ColumnElement[bool] | None
    ) -> ColumnElement[bool]:
        """The rows current (``as_of`` None) or valid at ``as_of``, and matching ``where``."""
        rows = self.entries.c
        valid: ColumnElement[bool]
        if as_of is None:
            valid = rows.valid_to.is_(None)
        else:
            valid = and_(
                rows.valid_from <= as_of, or_(rows.valid_to.is_(None), rows.valid_to > as_of)
            )
        return valid if where is None else and_(valid, where)


class SqliteTemporalStore(TemporalSqlStore, SqliteMemoryStore):
    """A :class:`~loom_memory.SqliteMemoryStore` with validity, ranked by its postings."""


class PostgresTemporalStore(TemporalSqlStore, PostgresMemoryStore):
    """A :class:`~loom_memory.PostgresMemoryStore` with validity, ranked by its postings."""
