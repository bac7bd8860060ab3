"""`SqlMemoryStore`: what the SQLite and PostgreSQL backends share, everything but search.

Both keep one ordinary table, ``<prefix>entries``, with one row per entry:

* ``seq`` - an integer primary key assigned on insert: the append order, which timestamps
  cannot give (entries of one turn share a timestamp);
* ``key`` - the list the entry belongs to; ``(key, seq)`` is indexed for ``read`` and ``clear``;
* ``entry`` - the entry's JSON exactly as :func:`~loom_memory.entry.encode_entries` wrote it, so
  every field round-trips and an absent role stays absent;
* ``entry_id`` - a generated column computed FROM ``entry`` (never a second copy that could
  disagree with it), indexed with ``key`` so ``remove`` is one indexed ``DELETE``;
* the backend's search columns, derived from :func:`~loom_memory.text.entry_terms`.

Rows are only ever inserted and deleted: ``replace`` is delete-then-insert in one
transaction, which is what keeps a derived search index simple to keep in step. The one
exception is a temporal store's ``end_validity`` (:mod:`loom_memory.validity`), which sets a
column no search structure derives from.

Writing inside a caller's transaction
-------------------------------------
Every verb takes an optional keyword ``conn``: a SQLAlchemy ``Connection`` with a transaction
begun on the same database. Given one, the store executes on it and neither commits nor rolls
back, so store rows and, say, a projection's tracking position commit together::

    with store.engine.begin() as conn:
        store.append(key, entries, conn=conn)
        conn.execute(record_position)        # both commit, or neither

Without ``conn`` each verb runs in its own transaction. With ``conn`` the CALLER's transaction is
the unit of atomicity: if a verb raises, roll it back (PostgreSQL refuses further statements in
it anyway). Several stores may share one database under different ``table_prefix`` values.

Annotated rows
--------------
A caller that keeps more than a list (the corpus keeps every revision of a passage, with the
log positions it was current between) passes extra ``columns`` (and indexes) to the
constructor, sets them with ``append(..., values=...)``, and restricts ``read``/``search``
with ``where=`` over them. ``where`` is part of the ranked query itself, so a filtered search
returns the best matches among the admitted rows, ranked by the same scorer as any other
search. ``read_annotated``/``search_annotated`` return each entry with those values.

A caller keeping history this way wants :mod:`loom_memory.validity`, which owns the
validity columns and the ranking rule. A caller filtering by its own columns usually also
wants ``postings=True``: a ``(term, seq, tf)`` side table kept with
the rows, so that every search ranks with the statistics of the rows ``where`` admits and breaks
ties by entry id, never by the rows it filtered out or the order rows were written in
(:mod:`loom_memory.postings`). Both backends then rank with the same scorer.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from sqlalchemy import (
    URL,
    BigInteger,
    Column,
    ColumnElement,
    Computed,
    Connection,
    Engine,
    Index,
    Integer,
    MetaData,
    Row,
    Table,
    Text,
    create_engine,
    delete,
    insert,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.schema import SchemaItem

from loom_memory.entry import MemoryEntry, decode_entry, encode_entries
from loom_memory.errors import BackendError, StoreConfigurationError
from loom_memory.postings import posting_rows, postings_table, rank
from loom_memory.store import DEFAULT_SEARCH_LIMIT, check_ids, check_key, check_search
from loom_memory.text import PLAIN, Tokenizer
from loom_memory.tokenizer_record import check_tokenizer, settings_table
from loom_runtime import (
    READ_ONLY,
    LogSettings,
    SchemaCatalog,
    engine_renewed_in_child,
    read_catalog,
    serialise_ddl,
)

DEFAULT_TABLE_PREFIX = "loom_memory_"
IDS_PER_STATEMENT = 10_000
"""Entry ids per ``DELETE ... IN (...)`` of :meth:`SqlMemoryStore.remove`: under PostgreSQL's
65,535 bound parameters (the key is one more), and a remove of a few ids is one statement."""

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


class SqlMemoryStore(ABC):
    """Base of the SQL backends: schema, the required verbs, ``replace``, ``remove``, ``close``.

    A subclass names its dialect, how the id is computed from the JSON, its search columns and
    how to search them; everything a SQL backend gets wrong first (order, duplicates, absent
    role, id round-trip, atomic replace) is written once, here.
    """

    dialect: ClassVar[str]
    """The SQLAlchemy dialect name the backend accepts (``engine.dialect.name``)."""

    entry_id_sql: ClassVar[str]
    """SQL computing the id from the ``entry`` JSON column, for the generated ``entry_id``."""

    search_isolation: ClassVar[str | None] = None
    """The isolation level of a search's own transaction, when the backend's default would let
    a search that runs several statements see a different state in each (PostgreSQL's READ
    COMMITTED takes a new snapshot per statement). A caller's ``conn`` keeps its own."""

    def __init__(
        self,
        bind: Engine | URL | str,
        *,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        columns: Sequence[SchemaItem] = (),
        postings: bool = False,
        tokenizer: Tokenizer = PLAIN,
    ) -> None:
        if not _PREFIX.fullmatch(table_prefix):
            raise StoreConfigurationError(
                f"table_prefix {table_prefix!r} must be a SQL identifier of at most 40 "
                "characters (letters, digits, underscores; not starting with a digit)"
            )
        self._owns_engine = not isinstance(bind, Engine)
        self._engine = bind if isinstance(bind, Engine) else _create_engine(bind)
        if self._engine.dialect.name != self.dialect:
            raise StoreConfigurationError(
                f"{type(self).__name__} needs a {self.dialect} database, got "
                f"{self._engine.dialect.name}: use the backend for that database"
            )
        if self.dialect == "postgresql" and table_prefix != table_prefix.lower():
            raise StoreConfigurationError(
                f"table_prefix {table_prefix!r} must be lower case on PostgreSQL: it folds "
                "unquoted names to lower case, and the store's triggers and functions name its "
                f"tables unquoted (use {table_prefix.lower()!r})"
            )
        self.table_prefix = table_prefix
        self.keeps_postings = postings
        """Built with ``postings=True``: every search ranks from the postings side table, so a
        backend leaves out the search structures only its own ranking reads (set before the
        schema is declared, which depends on it)."""
        self.tokenizer = tokenizer
        """The terms this store indexes and searches; recorded with the store, which refuses
        to open under another (``loom_memory.tokenizer_record``)."""
        metadata = MetaData()
        self.entries = Table(
            f"{table_prefix}entries",
            metadata,
            Column("seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
            Column("key", Text, nullable=False),
            Column("entry", Text, nullable=False),
            Column("entry_id", Text, Computed(self.entry_id_sql)),
            Index(f"{table_prefix}entries_key_seq", "key", "seq"),
            Index(f"{table_prefix}entries_key_entry_id", "key", "entry_id"),
            *self._search_schema(table_prefix),
            *columns,
        )
        self.annotations = tuple(column for column in columns if isinstance(column, Column))
        self.postings = postings_table(table_prefix, metadata) if postings else None
        """The ``(term, seq, tf)`` side table when built with ``postings=True`` (see
        :mod:`loom_memory.postings`): every search then ranks by the admitted rows' statistics."""
        self._declare_search_tables(table_prefix, metadata)
        # Built once, as the corpus builds its own (ADR 0044): see _insert.
        self._insert_entries = insert(self.entries).returning(
            self.entries.c.seq, sort_by_parameter_order=True
        )
        self._insert_numbered = insert(self.entries)
        """Rows whose ``seq`` the caller sets (SQLite, see ``_insert``)."""
        self.settings = settings_table(table_prefix, metadata)
        """The store's recorded settings (its tokenizer's identity)."""
        self.predates_postings = False
        """True when this store keeps postings but found rows written without them: those rows
        are never found by a search, so their owner drops the store and rebuilds it."""
        self.created_tables = False
        """True when this store found its table missing and created it: a projection into it
        must not trust a position it tracked over rows that no longer exist."""
        with self._begin(None) as conn:
            if not self._up_to_date(read_catalog(conn), metadata):
                serialise_ddl(conn)  # workers creating the store at once must not race
                self._create_schema(conn, metadata, read_catalog(conn))
            check_tokenizer(conn, self.settings, self.entries, tokenizer)

    def _up_to_date(self, catalog: SchemaCatalog, metadata: MetaData) -> bool:
        """True when the schema needs nothing of this open: every table there, none laid out
        by older code, and the search DDL a no-op. An open of an up-to-date store then reads
        the catalog once and changes nothing, instead of asking once per table and running
        its idempotent DDL again (ADR 0054, amended "pgopen")."""
        return (
            all(name in catalog.tables for name in metadata.tables)
            and not self._outdated_tables(catalog)
            and not _pending(self._search_ddl(created=set()), catalog)
            and not self._upgrade_ddl(catalog)
        )

    def _create_schema(self, conn: Connection, metadata: MetaData, catalog: SchemaCatalog) -> None:
        """Drop the outdated tables (and, if the entries are gone, what was kept beside
        them), create the missing ones and run the search DDL (under the DDL lock,
        ``catalog`` read after taking it)."""
        existing = set(catalog.tables)
        beside = set(metadata.tables) - {self.entries.name}
        if self.entries.name not in existing and beside & existing:
            # The entries were dropped (by hand) and what was kept beside them was not: the
            # postings, counts and search index of rows that are gone, and which the new rows'
            # numbers would collide with. Drop them too; the store starts empty.
            for statement in self._drop_ddl():
                conn.exec_driver_sql(statement)
            metadata.drop_all(conn, tables=[metadata.tables[name] for name in beside & existing])
            existing -= beside
        for outdated in self._outdated_tables(catalog):
            conn.exec_driver_sql(f"DROP TABLE {outdated}")
            existing.discard(outdated)
        self.created_tables = self.entries.name not in existing
        if self.postings is not None:
            self.predates_postings = (
                self.entries.name in existing and self.postings.name not in existing
            )
        metadata.create_all(conn, checkfirst=True)
        created = {table.name for table in metadata.sorted_tables} - existing
        for statement in [*self._search_ddl(created=created), *self._upgrade_ddl(catalog)]:
            conn.exec_driver_sql(statement)

    @property
    def engine(self) -> Engine:
        """The engine the store writes through; begin a transaction on it to pass as ``conn``."""
        return self._engine

    def append(
        self,
        key: str,
        entries: Sequence[MemoryEntry],
        *,
        conn: Connection | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Add ``entries`` to the end of the list at ``key``, all or none.

        ``values`` sets the store's extra ``columns`` on every row written (see the module
        docstring, "Annotated rows").
        """
        self.append_batch([(key, entries, values or {})], conn=conn)

    def append_batch(
        self,
        appends: Sequence[tuple[str, Sequence[MemoryEntry], Mapping[str, Any]]],
        *,
        conn: Connection | None = None,
    ) -> None:
        """Make each ``(key, entries, values)`` an :meth:`append`, in order, all or none.

        The rows are the ones the appends would write one by one, with the same ``seq``
        order, but each table gets one statement for the whole batch (entries, postings and
        any counts): a projection applying a page of events writes the page's rows at once
        instead of paying every statement's fixed cost per event (ADR 0044).
        """
        runs: list[tuple[list[dict[str, Any]], list[Counter[str]]]] = []
        columns: object = None  # the first run's value names never equal this
        for key, entries, values in appends:
            key_rows, key_terms = self._rows(check_key(key), entries)
            if not key_rows:
                continue
            if sorted(values) != columns:  # one statement binds one set of columns
                columns = sorted(values)
                runs.append(([], []))
            runs[-1][0].extend({**row, **values} for row in key_rows)
            runs[-1][1].extend(key_terms)
        if runs:
            with self._begin(conn) as c:
                for rows, terms in runs:
                    self._insert(c, rows, terms)

    def read(
        self,
        key: str,
        *,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[MemoryEntry]:
        """Return the list at ``key`` in append order (only rows matching ``where``, if given)."""
        return [entry for entry, _ in self.read_annotated(key, conn=conn, where=where)]

    def read_annotated(
        self,
        key: str,
        *,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """As :meth:`read`, each entry with its extra columns' values."""
        query = (
            select(self.entries.c.entry, *self.annotations)
            .where(self.entries.c.key == check_key(key))
            .order_by(self.entries.c.seq)
        )
        if where is not None:
            query = query.where(where)
        with self._begin(conn) as c:
            return [self._annotated(row) for row in c.execute(query)]

    def clear(self, key: str, *, conn: Connection | None = None) -> None:
        """Remove every entry at ``key``."""
        check_key(key)
        with self._begin(conn) as c:
            self._delete_rows(c, key)

    def forget_deleted(self, *, conn: Connection | None = None) -> None:
        """Rewrite the search structures so that no page of them still holds text of deleted
        rows: what an erasure needs (ADR 0060), never an ordinary delete (it costs a pass over
        the whole index). Nothing to do where deleted rows leave no text behind but free space
        that ``VACUUM`` reclaims (PostgreSQL's rows, GIN entries and postings)."""
        return None

    def clear_all(self, *, conn: Connection | None = None) -> None:
        """Remove every entry of every key (a projection's reset), search structures included."""
        with self._begin(conn) as c:
            self._delete_rows(c, None)

    def _delete_rows(self, conn: Connection, key: str | None) -> None:
        """Delete every entry at ``key`` (``None``: of every key) and what is derived from
        them: here the rows, whose triggers take the rest with them; a
        backend whose triggers would do that row by row deletes more at once first."""
        statement = delete(self.entries)
        if key is not None:
            statement = statement.where(self.entries.c.key == key)
        conn.execute(statement)

    def replace(
        self, key: str, entries: Sequence[MemoryEntry], *, conn: Connection | None = None
    ) -> None:
        """Make ``entries`` the list at ``key``: delete and insert in one transaction."""
        rows, terms = self._rows(check_key(key), entries)
        with self._begin(conn) as c:
            c.execute(delete(self.entries).where(self.entries.c.key == key))
            if rows:
                self._insert(c, rows, terms)

    def remove(self, key: str, ids: Iterable[str], *, conn: Connection | None = None) -> None:
        """Delete every entry at ``key`` whose id is in ``ids``: a statement on the id index per
        :data:`IDS_PER_STATEMENT` ids, all in one transaction. One statement for every id was
        over PostgreSQL's 65,535 parameters from 65,536 ids, and the remove event, in the
        log, blocked an event-sourced memory for good."""
        check_key(key)
        wanted = sorted(check_ids(ids))
        if not wanted:
            return
        with self._begin(conn) as c:
            for start in range(0, len(wanted), IDS_PER_STATEMENT):
                chunk = wanted[start : start + IDS_PER_STATEMENT]
                c.execute(
                    delete(self.entries).where(
                        self.entries.c.key == key, self.entries.c.entry_id.in_(chunk)
                    )
                )

    def search(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[MemoryEntry]:
        """Return the best ``limit`` entries at ``key`` containing any term of ``query``.

        ``where`` restricts the candidates INSIDE the ranked query (a filter, not a
        post-filter): the best ``limit`` of the rows it admits, by the same scorer.
        """
        return [
            entry
            for entry, _ in self.search_annotated(key, query, limit=limit, conn=conn, where=where)
        ]

    def search_annotated(
        self,
        key: str,
        query: str,
        *,
        limit: int = DEFAULT_SEARCH_LIMIT,
        conn: Connection | None = None,
        where: ColumnElement[bool] | None = None,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """As :meth:`search`, each entry with its extra columns' values."""
        terms, limit = check_search(key, query, limit, self.tokenizer)
        return self._ranked_annotated(key, terms, limit, conn, where)

    def _ranked_annotated(
        self,
        key: str,
        terms: list[str],
        limit: int,
        conn: Connection | None,
        where: ColumnElement[bool] | None,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """The best ``limit`` rows holding any of the checked ``terms``, with their extra
        columns: ``limit`` as given (the caller clamped it, or chose not to)."""
        if not terms:
            return []
        with self._begin(conn, isolation=self.search_isolation, read_only=True) as c:
            if self.postings is None:
                found = self._search_rows(c, key, terms, limit, where)
            else:
                found = self._ranked_by_postings(c, self.postings, key, terms, limit, where)
            return [self._annotated(row) for row in found]

    def _ranked_by_postings(
        self,
        conn: Connection,
        postings: Table,
        key: str,
        terms: list[str],
        limit: int,
        where: ColumnElement[bool] | None,
    ) -> list[Row[Any]]:
        """The best ``limit`` rows by :func:`~loom_memory.postings.rank`, ties by entry id."""
        scores = dict(self._postings_rank(conn, postings, key, terms, limit, where))
        rows = self._read_seqs(conn, list(scores))
        rows.sort(key=lambda row: (-scores[row.seq], row.entry_id or "", row.seq))
        return rows[:limit]

    def _postings_rank(
        self,
        conn: Connection,
        postings: Table,
        key: str,
        terms: list[str],
        limit: int,
        where: ColumnElement[bool] | None,
    ) -> list[tuple[int, int]]:
        """The ``(seq, score)`` pairs :func:`~loom_memory.postings.rank` returns for ``key``
        and ``where``: a store keeping its counts may compute the same pairs faster."""
        admitted = [self.entries.c.key == key, *([] if where is None else [where])]
        return rank(conn, self.entries, postings, admitted, terms, limit)

    def _read_seqs(self, conn: Connection, seqs: Sequence[int]) -> list[Row[Any]]:
        """The rows ``seqs`` (entry and extra columns), in that order: a ranking's answer.

        Without extra columns, one plain DBAPI statement: SQLAlchemy's expanding ``IN`` cost
        as much as the read. Extra columns keep the typed statement, which converts them.
        """
        if not seqs:
            return []
        if self.annotations:
            fetched = conn.execute(
                select(
                    self.entries.c.seq,
                    self.entries.c.entry_id,
                    self.entries.c.entry,
                    *self.annotations,
                ).where(self.entries.c.seq.in_(seqs))
            )
        else:
            wanted = (
                "= ANY(%(seqs)s)"
                if conn.dialect.name == "postgresql"
                else f"IN ({', '.join('?' * len(seqs))})"
            )
            fetched = conn.exec_driver_sql(
                f"SELECT seq, entry_id, entry FROM {self.entries.name} WHERE seq {wanted}",
                {"seqs": list(seqs)} if conn.dialect.name == "postgresql" else tuple(seqs),
            )
        by_seq = {row.seq: row for row in fetched}
        return [by_seq[seq] for seq in seqs if seq in by_seq]

    def _insert(
        self, conn: Connection, rows: list[dict[str, Any]], terms: list[Counter[str]]
    ) -> None:
        """Insert ``rows`` (whose indexed terms are counted in ``terms``, one ``Counter`` a row),
        and their postings if kept.

        On PostgreSQL, RETURNING makes SQLAlchemy send multi-row INSERTs (its
        "insertmanyvalues", pages of up to 1,000 rows) instead of one statement per row, so a
        statement-level trigger (the term index) fires once per page, not once per entry.

        SQLite does not promise RETURNING's row order, so SQLAlchemy sent one INSERT per row
        there. Instead the first row is inserted alone and returns its ``seq``; from then on
        this transaction holds SQLite's write lock, so the rowid SQLite would pick for each
        next row (``max(seq) + 1``: the table has no AUTOINCREMENT) is the previous one plus
        one, and the rest are inserted in one ``executemany`` with exactly those ``seq``s.
        """
        if conn.dialect.name == "sqlite" and len(rows) > 1:
            first = conn.execute(self._insert_entries, rows[0]).scalar_one()
            seqs = list(range(first, first + len(rows)))
            conn.execute(
                self._insert_numbered,
                [{**row, "seq": seq} for row, seq in zip(rows[1:], seqs[1:], strict=True)],
            )
        else:
            seqs = list(conn.execute(self._insert_entries, rows).scalars())
        if self.postings is None:
            return
        postings = [
            posting
            for seq, row_terms in zip(seqs, terms, strict=True)
            for posting in posting_rows(seq, row_terms)
        ]
        if postings:
            _insert_postings(conn, self.postings.name, postings)

    def _annotated(self, row: Row[Any]) -> tuple[MemoryEntry, dict[str, Any]]:
        values = row._mapping
        return decode_entry(values["entry"]), {
            column.name: values[column.name] for column in self.annotations
        }

    def drop(self, *, conn: Connection | None = None) -> None:
        """Drop the store's tables and search structures: every entry of every key is gone.

        For read models that are projections: they are dropped and rebuilt from the log.
        """
        with self._begin(conn) as c:
            for statement in self._drop_ddl():
                c.exec_driver_sql(statement)
            self.entries.metadata.drop_all(c, checkfirst=True)

    def _drop_ddl(self) -> list[str]:
        """DDL dropping search structures that do not go with the entries table."""
        return []

    def close(self) -> None:
        """Dispose of the engine if the store created it from a URL; a passed engine is kept."""
        if self._owns_engine:
            self._engine.dispose()

    @abstractmethod
    def _search_schema(self, prefix: str) -> list[SchemaItem]:
        """Return the search columns and indexes to add to the entries table."""

    @abstractmethod
    def _declare_search_tables(self, prefix: str, metadata: MetaData) -> None:
        """Add the tables a backend's search keeps beside the entries to ``metadata``.

        They are created with the entries table, in the same transaction.
        """

    def _outdated_tables(self, catalog: SchemaCatalog) -> list[str]:
        """Tables of ``catalog`` laid out by older code, to drop and create anew at open: a
        subclass keeping a table derived from its rows (filled again by ``_search_ddl``, which
        sees it as created) names it here when its layout changed. None by default."""
        return []

    def _upgrade_ddl(self, catalog: SchemaCatalog) -> list[str]:
        """DDL that moves a store older code wrote to this code's layout where only the catalog
        can tell (an object's absence, not a table's), run after the search DDL; nothing
        when the catalog shows the store moved (or created by this open: the catalog was read
        before). None by default."""
        return []

    @abstractmethod
    def _search_ddl(self, *, created: set[str]) -> list[str]:
        """Return the DDL for search structures outside the entries table, run at every open.

        ``created`` names the tables this open created: a structure created beside entries
        that already exist (a store written by older code) is filled from them here, so what
        is returned for an open that created nothing must be idempotent.
        """

    @abstractmethod
    def _search_values(self, terms: list[str]) -> dict[str, Any]:
        """Return the search column values of a row whose searchable terms are ``terms``."""

    @abstractmethod
    def _search_rows(
        self,
        conn: Connection,
        key: str,
        terms: list[str],
        limit: int,
        where: ColumnElement[bool] | None,
    ) -> Sequence[Row[Any]]:
        """The best ``limit`` rows at ``key`` matching any term and ``where``, best first.

        Each row has ``entry`` and the extra columns.
        """

    def _rows(
        self, key: str, entries: Sequence[MemoryEntry]
    ) -> tuple[list[dict[str, Any]], list[Counter[str]]]:
        """The table rows of ``entries`` at ``key``, and each one's indexed terms counted.

        Each entry is tokenized once, and counted once: its postings take the frequencies,
        a temporal store's counts the distinct terms (the counter's keys)."""
        encoded = encode_entries(entries)
        terms = [self.tokenizer.entry_terms(entry) for entry in entries]
        rows = [
            {"key": key, "entry": data.decode(), **self._search_values(row_terms)}
            for row_terms, data in zip(terms, encoded, strict=True)
        ]
        return rows, [Counter(row_terms) for row_terms in terms]

    @contextmanager
    def _begin(
        self, conn: Connection | None, *, isolation: str | None = None, read_only: bool = False
    ) -> Iterator[Connection]:
        """Yield ``conn`` as given, or one in a transaction of our own (at ``isolation``, if
        given); translate driver errors.

        A ``read_only`` transaction of our own reads one snapshot and takes no write lock: on
        SQLite it is marked :data:`~loom_runtime.log.READ_ONLY` (a log's engine then begins it
        deferred, not ``IMMEDIATE``) and begun here if the driver has not begun it (pysqlite's
        default begins only before a write, so each read would see the latest commit).
        """
        try:
            if conn is not None:
                yield conn
            elif isolation is not None or read_only:
                options: dict[str, Any] = {READ_ONLY: True} if read_only else {}
                if isolation is not None:
                    options["isolation_level"] = isolation
                with self._engine.connect() as own, own.execution_options(**options).begin():
                    if read_only and own.dialect.name == "sqlite":
                        driver = own.connection.driver_connection
                        if not driver.in_transaction:  # type: ignore[union-attr]
                            own.exec_driver_sql("BEGIN")
                    yield own
            else:
                with self._engine.begin() as own:
                    yield own
        except SQLAlchemyError as exc:
            raise BackendError(
                f"{type(self).__name__} (tables {self.table_prefix}*) failed: {exc}; "
                "nothing of this call was committed unless you passed conn= (then roll back)"
            ) from exc


def _insert_postings(conn: Connection, table: str, postings: list[tuple[str, int, int]]) -> None:
    """Insert ``(term, seq, tf)`` rows into the postings ``table``, in ``conn``'s transaction.

    Postings are most of a write's rows (~40 an entry), so they go straight to the driver
    (ADR 0044): SQLAlchemy's per-row parameter processing cost as much as SQLite's inserts,
    and psycopg's ``executemany`` sends one INSERT per row, where PostgreSQL takes them all
    as three arrays in one statement. The arrays go in binary (``%b``): in text psycopg
    checks every element for quoting, twice the time (150,000 terms: 91 against 42 ms).
    """
    if conn.dialect.name == "postgresql":
        terms, seqs, counts = zip(*postings, strict=True)
        conn.exec_driver_sql(
            f"INSERT INTO {table} (term, seq, tf) "
            "SELECT * FROM unnest(%(terms)b::text[], %(seqs)b::bigint[], %(counts)b::integer[])",
            {"terms": list(terms), "seqs": list(seqs), "counts": list(counts)},
        )
    else:
        conn.exec_driver_sql(f"INSERT INTO {table} (term, seq, tf) VALUES (?, ?, ?)", postings)


_ENSURED = re.compile(r"CREATE (?:VIRTUAL TABLE|TRIGGER|INDEX) IF NOT EXISTS (\w+) ")
_DEFINED = re.compile(r"CREATE (?:TRIGGER|INDEX) (\w+) ")
_DROPPED = re.compile(r"DROP (?:TRIGGER|INDEX) IF EXISTS (\w+)")
_REPLACED = re.compile(r"CREATE OR REPLACE FUNCTION (\w+)\(\) .*? AS \$\$(.*)\$\$", re.DOTALL)


def _pending(statements: list[str], catalog: SchemaCatalog) -> list[str]:
    """``statements`` (idempotent search DDL) less those the catalog shows to be no-ops.

    Recognised by their leading words: a ``CREATE ... IF NOT EXISTS`` of an object that
    exists; a plain ``CREATE`` of a trigger or index whose recorded definition (SQLite keeps
    it verbatim) is the statement itself, and the ``DROP ... IF EXISTS`` replacing it; a
    ``DROP ... IF EXISTS`` of an object not there; a ``CREATE OR REPLACE FUNCTION`` whose body
    the server holds already (a release that changes a trigger's body changes no table, so the
    body is what is compared). Any other statement (PostgreSQL's ``DROP TRIGGER ... ON``, a
    refill) is pending.
    """
    unchanged = {
        match[1]
        for statement in statements
        if (match := _DEFINED.match(statement)) and catalog.objects.get(match[1]) == statement
    }
    pending = []
    for statement in statements:
        if (ensured := _ENSURED.match(statement)) and ensured[1] in catalog.objects:
            continue
        if (defined := _DEFINED.match(statement)) and defined[1] in unchanged:
            continue
        replaced = _REPLACED.fullmatch(statement)
        if replaced and catalog.functions.get(replaced[1]) == replaced[2]:
            continue
        dropped = _DROPPED.fullmatch(statement)
        if dropped and (dropped[1] not in catalog.objects or dropped[1] in unchanged):
            continue
        pending.append(statement)
    return pending


def _create_engine(url: URL | str) -> Engine:
    """The engine a store opened from ``url`` owns. A process forked from this one gets an
    empty pool of its own (``engine_renewed_in_child``), so a worker started after the store
    was opened never talks on its parent's connections; on SQLite, what it deletes is
    overwritten (``LogSettings.overwrite_deleted_content``), so a removed entry's text leaves
    no copy in the file's free space. An engine passed in is the caller's to manage, as
    SQLAlchemy leaves it (the log's engine, ``loom.log.engine``, overwrites too)."""
    if LogSettings.holds_nul(url):  # sqlite3's bare ValueError; libpq cuts the string there
        try:  # shown without its password, as the log's refusal shows its URL
            shown = repr(make_url(url).render_as_string(hide_password=True))
        except ArgumentError:
            shown = "the URL given"
        raise StoreConfigurationError(
            f"cannot open a database at {shown}: the URL holds a NUL character (\\x00)"
        )
    try:
        engine = create_engine(url)
    except (SQLAlchemyError, ImportError) as exc:
        raise StoreConfigurationError(
            f"cannot open a database at {url!r}: {exc}; pass a SQLAlchemy URL such as "
            "sqlite:///memory.db or postgresql+psycopg://user@host/db, or an Engine"
        ) from exc
    engine_renewed_in_child(engine)
    LogSettings.overwrite_deleted_content(engine)
    return engine
