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

Ending (``end_validity``, a batch's ends) is the only UPDATE any SQL store issues, and it
touches ``valid_to`` alone: no search structure (FTS5 index, tsvector, postings) derives from
that column, so the insert/delete triggers that keep them in step stay sufficient. The
current counts do derive from it (ADR 0056): each backend's triggers uncount a row that stops
being current.

A caller that keeps more per row (the corpus keeps each passage's document revision) passes
its own ``columns`` and reads them with ``read_annotated``/``search_annotated``, whose
``as_of`` selects the position; ``where`` over its own columns still narrows further.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    URL,
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    and_,
    or_,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import SchemaItem
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal

from loom_memory.entry import MemoryEntry
from loom_memory.position_counts import (
    SELF_COUNTED,
    TERMS_KEY,
    Change,
    bucketed,
    declare_tables,
    ended_changes,
    inserted_changes,
    read_counts,
    refill_statements,
    sqlite_triggers,
)
from loom_memory.postgres import PostgresMemoryStore
from loom_memory.postgres_counts import (
    count_triggers,
    drop_count_triggers,
    drop_position_triggers,
    key_lock,
    position_triggers,
    replaced_functions,
)
from loom_memory.postings import Admission, driver_mark, rank_pruned
from loom_memory.sql import DEFAULT_TABLE_PREFIX, SqlMemoryStore
from loom_memory.sqlite import SqliteMemoryStore
from loom_memory.store import (
    DEFAULT_SEARCH_LIMIT,
    check_ids,
    check_key,
    check_position,
    check_search,
)
from loom_memory.text import PLAIN, Tokenizer
from loom_runtime import SchemaCatalog


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
                # The index of (key, seq, valid_from, valid_to) is made by _counts_ddl, where
                # a store written by older code gets it too.
                *columns,
            ],
            postings=True,
        )
        self._current: ColumnElement[bool] = self.entries.c.valid_to.is_(None)
        """The admission of a current search with no ``where`` (see ``_admitted``)."""
        self._ended: dict[int, list[Change]] = {}
        """By connection (``id``: threads writing at once use their own), the changes by
        position of the ends :meth:`append_at_batch` made, counted with its inserts (and
        taken out) by the next ``_insert`` of the same call."""

    @property
    def row_counts_table(self) -> str:
        """Name of the table holding each key's number of current rows."""
        return f"{self.table_prefix}current_rows"

    @property
    def term_counts_table(self) -> str:
        """Name of the table holding, per key and term, how many current rows hold the term."""
        return f"{self.table_prefix}current_terms"

    @property
    def rows_at_table(self) -> str:
        """Name of the table of how each key's number of rows changed, by position
        (:mod:`loom_memory.position_counts`)."""
        return f"{self.table_prefix}rows_at"

    @property
    def terms_at_table(self) -> str:
        """Name of the table of how, per key and term, the number of rows holding the term
        changed, by position (:mod:`loom_memory.position_counts`)."""
        return f"{self.table_prefix}terms_at"

    @property
    def current_index(self) -> str:
        """Name of the partial ``(key, seq)`` index of the current rows."""
        return f"{self.table_prefix}entries_current"

    @property
    def admission_index(self) -> str:
        """Name of the ``(key, seq, valid_from, valid_to)`` index: whether a row is valid at
        a position, read without the row (see :meth:`_counts_ddl`)."""
        return f"{self.table_prefix}entries_admission"

    def _declare_count_tables(self, metadata: MetaData) -> None:
        """Declare the two current count tables and the two by position (each backend's
        ``_declare_search_tables`` calls this beside its own search tables)."""
        declare_tables(metadata, rows=self.rows_at_table, terms=self.terms_at_table)
        Table(
            self.row_counts_table,
            metadata,
            Column("key", Text, primary_key=True),
            Column("n", Integer, nullable=False),
        )
        Table(
            self.term_counts_table,
            metadata,
            Column("key", Text, nullable=False),
            Column("term", Text, nullable=False),
            Column("df", Integer, nullable=False),
            PrimaryKeyConstraint("key", "term"),
            sqlite_with_rowid=False,
        )

    def _outdated_tables(self, catalog: SchemaCatalog) -> list[str]:
        """The counts by position keyed level before term (older code): dropped, then filled
        again from the rows under the key :data:`~loom_memory.position_counts.TERMS_KEY`."""
        outdated = super()._outdated_tables(catalog)  # a SQLite store's index, for one
        terms = self.terms_at_table
        if terms in catalog.tables and catalog.primary_keys.get(terms) != TERMS_KEY:
            outdated.append(terms)
        return outdated

    def _counts_ddl(self, *, created: set[str]) -> list[str]:
        """The partial index of the current rows, the admission index and, when this open
        created a count table beside existing entries (a store written by older code), the
        counts refilled from the rows: same SQL on both backends.

        The admission index, ``(key, seq, valid_from, valid_to)``, answers whether a row is
        valid at a position without reading the row (~1.5 KB of a passage, two to a page): a
        search as of P tests every candidate so, and read it from the rows at twice the
        time of a current search (ADR 0059, amended "admission"). It replaces the
        ``(key, valid_from, valid_to, seq)`` index of older code, dropped here, which no
        probe by ``seq`` could use. valid_to comes last on purpose: an index with
        ``(key, valid_to)`` first made SQLite pick it for ``end_validity`` (``UPDATE ...
        WHERE key AND entry_id IN .. AND valid_to IS NULL``) and scan every current entry of
        the key per call; this one offers that UPDATE its key prefix only, so the
        ``(key, entry_id)`` index serves it.

        A new store (its entries created here, with every count table: ``_create_schema``
        drops what an entries table dropped by hand left beside it) has no row to count and
        no count to empty, so it runs no refill: a dozen statements on empty tables, about a
        quarter of the server's work of opening a knowledge base on a new PostgreSQL database
        (ADR 0059, amended "fresh").
        """
        assert self.postings is not None  # a temporal store always keeps postings
        rows, postings = self.entries.name, self.postings.name
        counts, terms = self.row_counts_table, self.term_counts_table
        statements = [
            f"CREATE INDEX IF NOT EXISTS {self.current_index} ON {rows} (key, seq) "
            "WHERE valid_to IS NULL",
            f"CREATE INDEX IF NOT EXISTS {self.admission_index} ON {rows} "
            "(key, seq, valid_from, valid_to)",
            f"DROP INDEX IF EXISTS {self.table_prefix}entries_validity",
        ]
        if {rows, counts, terms, self.rows_at_table, self.terms_at_table} <= created:
            return statements
        if created & {rows, counts, terms}:
            statements += [
                f"DELETE FROM {counts}",
                f"DELETE FROM {terms}",
                f"INSERT INTO {counts} (key, n) SELECT key, count(*) FROM {rows} "
                "WHERE valid_to IS NULL GROUP BY key",
                f"INSERT INTO {terms} (key, term, df) SELECT e.key, p.term, count(*) "
                f"FROM {postings} AS p JOIN {rows} AS e ON e.seq = p.seq "
                "WHERE e.valid_to IS NULL GROUP BY e.key, p.term",
            ]
        if created & {rows, self.rows_at_table, self.terms_at_table}:
            statements += refill_statements(
                entries=rows, postings=postings, rows=self.rows_at_table, terms=self.terms_at_table
            )
        return statements

    def _insert(
        self, conn: Connection, rows: list[dict[str, Any]], terms: list[Counter[str]]
    ) -> None:
        """Insert the rows and their postings, and count them in the same transaction: the
        current ones, one upsert per key and per distinct (key, term) of the batch, and all
        of them by position, one upsert per bucket (:mod:`loom_memory.position_counts`).

        The key's count first, then its terms in order: two writers of one key queue on the
        key's row (an upsert holds it to the end of the transaction) instead of taking term
        rows in different orders, and each adds to what the other committed. On PostgreSQL
        the counts by position are written after the key's lock on them
        (:func:`~loom_memory.postgres_counts.key_lock`), which their triggers take too."""
        super()._insert(conn, rows, terms)
        keys: Counter[str] = Counter()
        documents: dict[str, Counter[str]] = {}
        for row, row_terms in zip(rows, terms, strict=True):
            if row.get("valid_to") is None:
                keys[row["key"]] += 1
                documents.setdefault(row["key"], Counter()).update(row_terms.keys())
        if keys:
            _upsert_counts(conn, self.row_counts_table, "key", "n", sorted(keys.items()))
        counted = [
            (key, term, documents[key][term])
            for key in sorted(documents)
            for term in sorted(documents[key])
        ]
        if counted:
            _upsert_counts(conn, self.term_counts_table, "key, term", "df", counted)
        ended = self._ended.pop(id(conn), [])
        self._count_positions(
            conn,
            ended
            + inserted_changes(
                (row["key"], row.get("valid_from", 0), row.get("valid_to"), row_terms.keys())
                for row, row_terms in zip(rows, terms, strict=True)
            ),
        )

    def _count_positions(self, conn: Connection, changes: list[Change]) -> None:
        """Write ``changes`` to the counts by position, one upsert per table: on PostgreSQL
        after the changed keys' locks (:func:`~loom_memory.postgres_counts.key_lock`)."""
        by_rows, by_terms = bucketed(changes)
        if (by_rows or by_terms) and conn.dialect.name == "postgresql":
            locks = sorted({key for key, *_ in [*by_rows, *by_terms]})
            conn.exec_driver_sql(
                f"SELECT {key_lock(self.table_prefix, 'k')} FROM unnest(%s::text[]) AS k",
                (locks,),
            )
        if by_rows:
            _upsert_counts(conn, self.rows_at_table, "key, level, bucket", "n", by_rows)
        if by_terms:
            columns = ", ".join(TERMS_KEY)
            _upsert_counts(conn, self.terms_at_table, columns, "df", by_terms)

    def _postings_rank(
        self,
        conn: Connection,
        postings: Table,
        key: str,
        terms: list[str],
        limit: int,
        where: ColumnElement[bool] | None,
    ) -> list[tuple[int, int]]:
        """A current search ranks from the kept counts, one as of a position from the query
        terms' counts at it, both pruned; any other (``where``) by counting its rows."""
        if where is self._current:
            return self._rank_current(conn, key, terms, limit, None)
        if isinstance(where, ValidAt):
            return self._rank_as_of(conn, key, terms, limit, where, None)
        return super()._postings_rank(conn, postings, key, terms, limit, where)

    def _rank_current(
        self, conn: Connection, key: str, terms: list[str], limit: int, scored: list[int] | None
    ) -> list[tuple[int, int]]:
        """What ``rank()`` gives the current rows at ``key``, from the kept counts.

        ``scored`` receives the rows each pruning round scored (tests watch it)."""
        assert self.postings is not None
        distinct = sorted(set(terms))
        if not distinct:  # no term, no match (and PostgreSQL refuses an empty IN)
            return []
        mark = driver_mark(conn)
        found = conn.exec_driver_sql(
            f"SELECT n FROM {self.row_counts_table} WHERE key = {mark}", (key,)
        ).first()
        if found is None:
            return []
        marks = ", ".join([mark] * len(distinct))
        documents: dict[str, int] = {
            term: count
            for term, count in conn.exec_driver_sql(
                f"SELECT term, df FROM {self.term_counts_table} "
                f"WHERE key = {mark} AND term IN ({marks})",
                (key, *distinct),
            )
        }
        # SQLite: the partial index of the current rows holds (key, seq), all a probe reads.
        hint = f" INDEXED BY {self.current_index}" if conn.dialect.name == "sqlite" else ""
        current = Admission(f"{self.entries.name} AS e{hint}", "e.valid_to IS NULL")
        return rank_pruned(
            conn,
            postings=self.postings.name,
            admission=current,
            key=key,
            rows=found[0],
            documents=documents,
            limit=limit,
            scored=scored,
        )

    def _rank_as_of(
        self,
        conn: Connection,
        key: str,
        terms: list[str],
        limit: int,
        valid: ValidAt,
        scored: list[int] | None,
    ) -> list[tuple[int, int]]:
        """What ``rank()`` gives the rows at ``key`` valid at ``valid.position``: ``N`` and
        the query terms' counts among those rows read from the counts kept by position
        (:mod:`loom_memory.position_counts`), then the same pruned ranking as a current search.

        ``scored`` receives the rows each pruning round scored (tests watch it)."""
        assert self.postings is not None
        distinct = sorted(set(terms))
        if not distinct:
            return []
        rows, documents = read_counts(
            conn,
            rows=self.rows_at_table,
            terms=self.terms_at_table,
            key=key,
            words=distinct,
            position=valid.position,
        )
        mark = driver_mark(conn)
        # SQLite: the candidate's row by its seq (the rowid) is what the planner picks, and
        # reads a wide row per candidate; the admission index holds all a probe tests.
        hint = f" INDEXED BY {self.admission_index}" if conn.dialect.name == "sqlite" else ""
        then = Admission(
            f"{self.entries.name} AS e{hint}",
            f"e.valid_from <= {mark} AND (e.valid_to IS NULL OR e.valid_to > {mark})",
            (valid.position, valid.position),
        )
        return rank_pruned(
            conn,
            postings=self.postings.name,
            admission=then,
            key=key,
            rows=rows,
            documents=documents,
            limit=limit,
            scored=scored,
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
        self.append_at_batch([(key, entries, position, values or {})], conn=conn)

    def append_at_batch(
        self,
        appends: Sequence[tuple[str, Sequence[MemoryEntry], int, Mapping[str, Any]]],
        *,
        ends: Sequence[tuple[str, Iterable[str], int]] = (),
        conn: Connection | None = None,
    ) -> None:
        """Make each ``(key, ids, position)`` of ``ends`` an :meth:`end_validity`, then each
        ``(key, entries, position, values)`` an :meth:`append_at`, in order, all or none, one
        statement per table (:meth:`~loom_memory.SqlMemoryStore.append_batch`).

        On SQLite the ends are counted by position with the appends, in one batch: a
        revision's end and append at one position cancel on their shared terms before any
        upsert, where the per-row trigger of an end wrote every term of every ended row at
        three levels (ADR 0059, amended). On PostgreSQL all of them are one UPDATE, so the
        statement-level triggers count them once for the batch, not once per end."""
        prepared = [
            (key, entries, {**values, "valid_from": check_position(position)})
            for key, entries, position, values in appends
        ]
        if not ends:
            self.append_batch(prepared, conn=conn)
            return
        with self._begin(conn) as c:
            try:
                if c.dialect.name == "sqlite":
                    for key, ids, position in ends:
                        self._end(c, key, ids, position)
                else:
                    self._end_all(c, ends)
                self.append_batch(prepared, conn=c)
                ended = self._ended.pop(id(c), [])
                if ended:  # nothing was inserted to count them with
                    self._count_positions(c, ended)
            finally:
                self._ended.pop(id(c), None)

    def _end_all(self, conn: Connection, ends: Sequence[tuple[str, Iterable[str], int]]) -> None:
        """Make ``ends`` what :meth:`end_validity` per end would, in one UPDATE (PostgreSQL).

        Why one: each UPDATE fires the statement-level count triggers
        (:mod:`~loom_memory.postgres_counts`), which upsert every term of the rows it ended;
        one per end had a reconcile ending thousands of documents upsert the same common-term
        rows thousands of times in one transaction, each a new row version, so it slowed
        super-linearly. The rows an end would find already ended by an earlier one it leaves
        alone: each ``(key, id)`` keeps its first end (one UPDATE changes a row once, at
        whichever matching end the join meets). Arrays, not a VALUES list: one statement and
        one plan however many ends; the triggers count each row at its own ``valid_to``."""
        first: dict[tuple[str, str], int] = {}
        for key, ids, position in ends:
            check_key(key)
            wanted = check_ids(ids)
            check_position(position)
            for entry_id in sorted(wanted):
                first.setdefault((key, entry_id), position)
        if not first:
            return
        ordered = sorted(first.items())
        conn.exec_driver_sql(
            f"UPDATE {self.entries.name} AS e SET valid_to = v.position "
            "FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS v (key, entry_id, position) "
            "WHERE e.key = v.key AND e.entry_id = v.entry_id AND e.valid_to IS NULL",
            (
                [key for (key, _), _ in ordered],
                [entry_id for (_, entry_id), _ in ordered],
                [position for _, position in ordered],
            ),
        )

    def _end(self, conn: Connection, key: str, ids: Iterable[str], position: int) -> None:
        """End ``ids`` at ``key`` as :meth:`end_validity` does (SQLite), and hold their changes
        by position for the batch's ``_insert``, the trigger told not to count them."""
        check_key(key)
        wanted = check_ids(ids)
        check_position(position)
        if not wanted:
            return
        assert self.postings is not None
        rows = self.entries.c
        statement = (
            update(self.entries)
            .where(rows.key == key, rows.entry_id.in_(sorted(wanted)), rows.valid_to.is_(None))
            .values(valid_to=position)
            .returning(rows.seq, rows.valid_from)
        )
        conn.exec_driver_sql(
            f"INSERT INTO {self.rows_at_table} (key, level, bucket, n) VALUES (?, ?, 0, 0)",
            (key, SELF_COUNTED),
        )
        try:
            ended = dict(conn.execute(statement).tuples().all())
        finally:
            conn.exec_driver_sql(
                f"DELETE FROM {self.rows_at_table} WHERE key = ? AND level = ?",
                (key, SELF_COUNTED),
            )
        held: dict[int, list[str]] = {seq: [] for seq in ended}
        seqs = sorted(ended)
        for start in range(0, len(seqs), 500):
            chunk = seqs[start : start + 500]
            for seq, term in conn.exec_driver_sql(
                f"SELECT seq, term FROM {self.postings.name} "
                f"WHERE seq IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            ):
                held[seq].append(term)
        changes = ended_changes(((key, ended[seq], held[seq]) for seq in seqs), position)
        self._ended.setdefault(id(conn), []).extend(changes)

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
        capped: bool = True,
    ) -> list[tuple[MemoryEntry, dict[str, Any]]]:
        """The best current entries (or those valid at ``as_of``) with their extra columns.

        ``capped=False`` returns the best ``limit`` however many that is, not clamped to
        :data:`~loom_memory.store.MAX_SEARCH_LIMIT`: for a caller that filters the ranking
        itself and must read past the cap to find every row its filter keeps (the knowledge
        base's metadata filter). Up to the cap the answer is the same either way.
        """
        admitted = self._admitted(as_of, where)
        if capped:
            return super().search_annotated(key, query, limit=limit, conn=conn, where=admitted)
        terms, _ = check_search(key, query, limit, self.tokenizer)
        return self._ranked_annotated(key, terms, limit, conn, admitted)

    def _admitted(
        self, as_of: int | None, where: ColumnElement[bool] | None
    ) -> ColumnElement[bool]:
        """The rows current (``as_of`` None) or valid at ``as_of``, and matching ``where``."""
        rows = self.entries.c
        valid: ColumnElement[bool]
        if as_of is None and where is None:
            # The one object a current search passes on: a store keeping counts knows it.
            return self._current
        valid = rows.valid_to.is_(None) if as_of is None else ValidAt(self.entries, as_of)
        return valid if where is None else and_(valid, where)


class ValidAt(ColumnElement[bool]):
    """The rows of ``entries`` valid at ``position`` (``valid_from <= P``, and ``P <
    valid_to`` or never ended): a filter SQLAlchemy compiles like any other, and one a
    temporal store recognises when it is a search's whole admission, to rank those rows by
    pruning (a current search's admission is recognised the same way, by identity)."""

    inherit_cache = True
    type = Boolean()
    # SQLAlchemy's cache key: the inner clause (its bound position a parameter, not the key).
    _traverse_internals = [("clause", InternalTraversal.dp_clauseelement)]  # noqa: RUF012

    def __init__(self, entries: Table, position: int) -> None:
        self.position = position
        rows = entries.c
        self.clause = and_(
            rows.valid_from <= position, or_(rows.valid_to.is_(None), rows.valid_to > position)
        )


@compiles(ValidAt)
def _compile_valid_at(element: ValidAt, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clause, **kw)


class SqliteTemporalStore(TemporalSqlStore, SqliteMemoryStore):
    """A :class:`~loom_memory.SqliteMemoryStore` with validity, ranked by its postings.

    A current search (no ``as_of``, no ``where``) takes its statistics from counts kept as
    rows are written, not recounted over every current row: ``<prefix>current_rows`` holds
    ``N`` per key, ``<prefix>current_terms`` each term's document frequency per key, both
    over the current rows only, kept in the same transaction as the rows. An append counts
    its current rows and their distinct terms, one upsert per (key, term) of the batch (only
    the store inserts rows and postings: a row inserted behind it has no postings either). An
    entry ended by ``end_validity`` (or any UPDATE of its ``valid_to`` or key), or deleted
    while current, is uncounted by a trigger, whoever issues the statement (a caller's own
    ``DELETE`` included), before its postings go with it. A store written before the counts existed
    gets them filled from its rows when it is opened. With them, a current search ranks by
    :func:`~loom_memory.postings.rank_pruned`, which returns exactly what
    :func:`~loom_memory.postings.rank` would but scores only rows that can reach the top.
    A search as of a position reads ``N`` and its terms' frequencies then from the counts
    kept by position (``<prefix>rows_at``, ``<prefix>terms_at``,
    :mod:`loom_memory.position_counts`; ends, moves and deletes counted by triggers) and ranks
    by the same pruning; one narrowed by ``where`` counts its own statistics and scores every
    match, as before.
    """

    def _declare_search_tables(self, prefix: str, metadata: MetaData) -> None:
        super()._declare_search_tables(prefix, metadata)
        self._declare_count_tables(metadata)

    def _delete_rows(self, conn: Connection, key: str | None) -> None:
        """The rows deleted with their postings first (:class:`SqliteMemoryStore`), so their
        triggers no longer uncount their terms; every count of ``key`` is zero once its rows
        are gone, and is deleted as such. One writer at a time on SQLite: no row of the key
        can be counted by another transaction between the two."""
        super()._delete_rows(conn, key)
        where, parameters = ("", ()) if key is None else (" WHERE key = ?", (key,))
        for table in (
            self.row_counts_table,
            self.term_counts_table,
            self.rows_at_table,
            self.terms_at_table,
        ):
            conn.exec_driver_sql(f"DELETE FROM {table}{where}", parameters)

    def _search_ddl(self, *, created: set[str]) -> list[str]:
        """The FTS and postings DDL, the counting triggers, and the shared counting DDL
        (:meth:`TemporalSqlStore._counts_ddl`)."""
        assert self.postings is not None  # a temporal store always keeps postings
        rows, postings = self.entries.name, self.postings.name
        counts, terms = self.row_counts_table, self.term_counts_table

        def count_row(key: str) -> str:
            return (
                f"INSERT INTO {counts} (key, n) VALUES ({key}, 1) "
                "ON CONFLICT (key) DO UPDATE SET n = n + 1;"
            )

        def uncount_row(key: str) -> str:
            return (
                f"UPDATE {counts} SET n = n - 1 WHERE key = {key}; "
                f"DELETE FROM {counts} WHERE key = {key} AND n <= 0;"
            )

        def count_terms(key: str, seq: str) -> str:
            return (
                f"INSERT INTO {terms} (key, term, df) SELECT {key}, p.term, 1 "
                f"FROM {postings} AS p WHERE p.seq = {seq} "
                "ON CONFLICT (key, term) DO UPDATE SET df = df + 1;"
            )

        def uncount_terms(key: str, seq: str) -> str:
            held = f"(SELECT term FROM {postings} WHERE seq = {seq})"
            return (
                f"UPDATE {terms} SET df = df - 1 WHERE key = {key} AND term IN {held}; "
                f"DELETE FROM {terms} WHERE key = {key} AND df <= 0 AND term IN {held};"
            )

        moved = "new.key IS NOT old.key"
        statements = [
            *super()._search_ddl(created=created),
            # Inserts are counted by _insert, once per batch: triggers per row and posting
            # cost a third of an append's throughput, the batch's upserts a quarter.
            # BEFORE: the entry's postings are deleted after it (the postings trigger).
            f"CREATE TRIGGER IF NOT EXISTS {rows}_count_delete BEFORE DELETE ON {rows} "
            f"WHEN old.valid_to IS NULL BEGIN {uncount_row('old.key')} "
            f"{uncount_terms('old.key', 'old.seq')} END",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_count_end AFTER UPDATE OF key, valid_to "
            f"ON {rows} WHEN old.valid_to IS NULL AND (new.valid_to IS NOT NULL OR {moved}) "
            f"BEGIN {uncount_row('old.key')} {uncount_terms('old.key', 'old.seq')} END",
            f"CREATE TRIGGER IF NOT EXISTS {rows}_count_start AFTER UPDATE OF key, valid_to "
            f"ON {rows} WHEN new.valid_to IS NULL AND (old.valid_to IS NOT NULL OR {moved}) "
            f"BEGIN {count_row('new.key')} {count_terms('new.key', 'new.seq')} END",
        ]
        statements += sqlite_triggers(
            entries=rows, postings=postings, rows=self.rows_at_table, terms=self.terms_at_table
        )
        return [*statements, *self._counts_ddl(created=created)]


class PostgresTemporalStore(TemporalSqlStore, PostgresMemoryStore):
    """A :class:`~loom_memory.PostgresMemoryStore` with validity, ranked by its postings.

    A current search (no ``as_of``, no ``where``) ranks from kept counts, exactly as
    :class:`SqliteTemporalStore` does (the same tables, the same counting of an append, the
    same :func:`~loom_memory.postings.rank_pruned`); ends and deletes, a caller's own
    included, are uncounted by statement-level triggers
    (:mod:`loom_memory.postgres_counts`). A search as of a position is pruned the same way
    from the counts kept by position (:mod:`loom_memory.position_counts`, the same tables and
    reads; ends, moves and deletes counted by statement-level triggers); one narrowed by
    ``where`` scores every match.
    """

    def _declare_search_tables(self, prefix: str, metadata: MetaData) -> None:
        super()._declare_search_tables(prefix, metadata)
        self._declare_count_tables(metadata)

    def _search_ddl(self, *, created: set[str]) -> list[str]:
        """The postings store's DDL, the counting triggers (when this open created the count
        tables or the entries table; else only their functions, replaced if older code wrote
        them otherwise), and the shared counting DDL."""
        triggers = []
        for make, rows, terms in (
            (count_triggers, self.row_counts_table, self.term_counts_table),
            (position_triggers, self.rows_at_table, self.terms_at_table),
        ):
            statements = make(self.table_prefix, self.entries.name, rows=rows, terms=terms)
            created_here = created & {self.entries.name, rows, terms}
            triggers += statements if created_here else replaced_functions(statements)
        return [
            *super()._search_ddl(created=created),
            *triggers,
            *self._counts_ddl(created=created),
        ]

    def _drop_ddl(self) -> list[str]:
        prefix = self.table_prefix
        return [
            *super()._drop_ddl(),
            *drop_count_triggers(prefix),
            *drop_position_triggers(prefix),
        ]


def _upsert_counts(
    conn: Connection, table: str, columns: str, count: str, values: list[tuple[Any, ...]]
) -> None:
    """Add ``values`` (``columns`` then the ``count`` to add) to the count ``table``, one
    upsert for the batch: on PostgreSQL its columns as arrays in one statement (psycopg's
    ``executemany`` would send one INSERT per row), in binary as the postings go
    (:func:`~loom_memory.sql._insert_postings`), on SQLite one ``executemany``."""
    upsert = f"ON CONFLICT ({columns}) DO UPDATE SET {count} = c.{count} + excluded.{count}"
    if conn.dialect.name == "postgresql":
        arrays = [list(column) for column in zip(*values, strict=True)]
        types = ["text[]" if isinstance(column[0], str) else "bigint[]" for column in arrays]
        unnest = ", ".join(f"%b::{kind}" for kind in types)
        conn.exec_driver_sql(
            f"INSERT INTO {table} AS c ({columns}, {count}) SELECT * FROM unnest({unnest}) "
            + upsert,
            tuple(arrays),
        )
    else:
        marks = ", ".join("?" * len(values[0]))
        conn.exec_driver_sql(
            f"INSERT INTO {table} AS c ({columns}, {count}) VALUES ({marks}) " + upsert, values
        )
