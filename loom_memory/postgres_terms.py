"""PostgreSQL's term index: keyed postings and per-key statistics, kept by triggers.

Why: ranking by BM25 (ADR 0017) needs, for each query term, its count in each matching row
(``tf``), how many rows at the key hold it (``df``) and how many rows the key holds (``N``).
Read from the rows, that meant unpacking the whole ``tsvector`` of every matching row (a
common word matches thousands) and counting every row at the key, for every query: ~60 ms
at 100,000 entries. This index keeps the same integers ready:

* ``<prefix>postings`` - :func:`~loom_memory.postings.postings_table`, keyed: one row per
  ``(key, term, seq)`` with ``tf``, the number of positions the term has in the row's vector
  (``cardinality(positions)``, exactly what ADR 0017's statement counted, PostgreSQL's
  position limits included);
* ``<prefix>term_counts`` - ``df`` per ``(key, term)``;
* ``<prefix>key_counts`` - ``N`` per key.

Statement-level triggers on the entries table write all three from the inserted or deleted
rows' vectors, in the writer's own transaction (a caller's own ``INSERT``/``DELETE`` included;
no foreign key, so a caller may still drop the entries table alone, as before). So the index is
a function of the live rows: a projection rebuilt from position 0 rebuilds it, and no tracked
position moves. A store written by code older than the index gets it filled from its rows when
opened.

Both triggers take the key's ``key_counts`` row first and the term rows in one order, so two
writers of one key queue on that row instead of deadlocking over its terms; writers of one key
serialise (they did on the GIN index's pending list already, less visibly).

:func:`rank` answers exactly what ADR 0017's statement answers, scores bit-equal and ties by
``seq``: each term's contribution is the same SQL expression (:func:`contribution`, :func:`idf`)
over the same integers, added in the same order, and the rows it skips are proven unable to
enter the top ``k`` (:func:`~loom_memory.topk.top_k_scored`). ADR 0037 says why and what it
costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Dialect,
    Float,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Row,
    Select,
    Table,
    Text,
    any_,
    bindparam,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by

from loom_memory.postings import postings_table
from loom_memory.topk import MARGIN, Hit, TermStats, top_k_scored

K1 = 1.2
"""BM25's term-frequency saturation, as in Lucene, tantivy and FTS5."""

MIN_IDF = 1e-6
"""A term in over half the rows still counts, a little."""

ESSENTIAL, PROBED, JOINED = "essential", "probed", "joined"
"""How a step reads each term: its postings select the candidates; a candidate's posting is
looked up on the primary key; or the term's postings are read whole and joined by ``seq``."""

JOIN_RATIO = 8
"""Non-essential terms, rarest first, whose postings together number at most this many times
the candidates (the essential terms' postings) are read whole with the essential ones, not
looked up once per candidate: a lookup descends the primary key (~3 buffer hits, ~10 times a
posting read in a range, measured with EXPLAIN ANALYZE). Either way a step reads the same
``tf``, so the answer is the same."""


def idf(total: ColumnElement[int], df: ColumnElement[int]) -> ColumnElement[float]:
    """BM25's idf of a term in ``df`` of ``total`` rows, floored at :data:`MIN_IDF`, in SQL.

    One expression for every PostgreSQL ranking, so that the same integers give the same float.
    """
    return func.greatest(func.ln((total - df + 0.5) / (df + 0.5)), MIN_IDF)


def contribution(term_idf: ColumnElement[float], tf: ColumnElement[int]) -> ColumnElement[float]:
    """One term's part of a row's score: ``idf * tf * (k1 + 1) / (tf + k1)``."""
    return term_idf * (tf * (K1 + 1) / (tf + K1))


def bm25(
    term_idf: ColumnElement[float], tf: ColumnElement[int], lexeme: ColumnElement[str]
) -> ColumnElement[float]:
    """A row's score: the sum of its query terms' :func:`contribution`, in lexeme order.

    Summed in lexeme order: rows with the same terms and counts score bit-equal whatever order
    a plan delivers them in, so a tie really falls to ``seq``.
    """
    return func.sum(aggregate_order_by(contribution(term_idf, tf), lexeme))


@dataclass(frozen=True)
class TermIndex:
    """The three tables of a store's term index (see the module docstring), and the entries
    table whose rows a search step returns with its ranking."""

    postings: Table
    term_counts: Table
    key_counts: Table
    entries: Table
    steps: dict[tuple[str, ...], tuple[str, dict[str, Any]]] = field(
        default_factory=dict, compare=False
    )
    """Each search step's compiled SQL and default parameters, by shape (see ``_step``)."""

    @property
    def tables(self) -> tuple[Table, ...]:
        """The three tables: postings, term counts, key counts."""
        return (self.postings, self.term_counts, self.key_counts)


def term_index(prefix: str, metadata: MetaData, entries: Table) -> TermIndex:
    """Declare the term index of the store whose tables start with ``prefix``."""
    return TermIndex(
        entries=entries,
        postings=postings_table(prefix, metadata, keyed=True),
        term_counts=Table(
            f"{prefix}term_counts",
            metadata,
            Column("key", Text, nullable=False),
            Column("term", Text, nullable=False),
            Column("df", BigInteger, nullable=False),
            PrimaryKeyConstraint("key", "term"),
        ),
        key_counts=Table(
            f"{prefix}key_counts",
            metadata,
            Column("key", Text, primary_key=True),
            Column("rows", BigInteger, nullable=False),
        ),
    )


def index_ddl(prefix: str, entries: Table, index: TermIndex, *, created: set[str]) -> list[str]:
    """The triggers keeping ``index``, and the index rebuilt from the rows, when this open
    ``created`` the entries table or the index; when both existed, only the trigger functions
    (``CREATE OR REPLACE``, which the triggers keep calling): an open runs them only if the
    server holds a body older code wrote (``loom_memory.sql``'s ``_pending``).

    An index created beside existing entries (a store written by older code) finds it empty,
    and an entries table created beside an existing index would find it stale: either way it
    is emptied and filled from the rows. A new store (every table created here, as is a store
    whose entries table was dropped by hand: ``_create_schema`` drops the index with it) has
    nothing to empty or fill: only its triggers.
    """
    rows = entries.name
    postings, terms, keys = (table.name for table in index.tables)
    per_term = "FROM {rows} n, unnest(n.search_vector) v GROUP BY n.key, v.lexeme"

    def counted(sign: str, source: str) -> str:
        return (
            f"INSERT INTO {keys} AS c (key, rows) SELECT key, {sign}count(*) FROM {source} "
            "GROUP BY key ORDER BY key "
            "ON CONFLICT (key) DO UPDATE SET rows = c.rows + excluded.rows; "
            f"INSERT INTO {terms} AS c (key, term, df) SELECT n.key, v.lexeme, {sign}count(*) "
            f"{per_term.format(rows=source)} ORDER BY n.key, v.lexeme "
            "ON CONFLICT (key, term) DO UPDATE SET df = c.df + excluded.df;"
        )

    def posted(source: str) -> str:
        return (
            f"INSERT INTO {postings} (key, term, seq, tf) "
            "SELECT n.key, v.lexeme, n.seq, cardinality(v.positions) "
            f"FROM {source} n, unnest(n.search_vector) v"
        )

    inserted = f"{counted('', 'new_rows')} {posted('new_rows')};"
    deleted = (
        f"{counted('-', 'old_rows')} "
        f"DELETE FROM {postings} p USING old_rows o WHERE p.seq = o.seq; "
        f"DELETE FROM {terms} c USING (SELECT n.key, v.lexeme {per_term.format(rows='old_rows')})"
        " d WHERE c.key = d.key AND c.term = d.lexeme AND c.df = 0; "
        f"DELETE FROM {keys} c USING (SELECT DISTINCT key FROM old_rows) d "
        "WHERE c.key = d.key AND c.rows = 0;"
    )
    functions, triggers = [], []
    for event, table, body in (("insert", "NEW", inserted), ("delete", "OLD", deleted)):
        function, trigger = _function(prefix, event), f"{rows}_index_{event}"
        functions.append(
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {body} RETURN NULL; END $$"
        )
        triggers += [
            f"DROP TRIGGER IF EXISTS {trigger} ON {rows}",
            f"CREATE TRIGGER {trigger} AFTER {event.upper()} ON {rows} "
            f"REFERENCING {table} TABLE AS {table.lower()}_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {function}()",
        ]
    if rows not in created and postings not in created:
        return functions
    if {rows, postings, terms, keys} <= created:  # a new store: nothing to empty or count
        return [*functions, *triggers]
    return [
        *functions,
        *triggers,
        *(f"DELETE FROM {table}" for table in (postings, terms, keys)),
        posted(rows),
        f"INSERT INTO {terms} (key, term, df) SELECT key, term, count(*) FROM {postings} "
        "GROUP BY key, term",
        f"INSERT INTO {keys} (key, rows) SELECT key, count(*) FROM {rows} GROUP BY key",
    ]


def drop_ddl(prefix: str) -> list[str]:
    """Drop the trigger functions (the tables go with the store's metadata)."""
    return [
        f"DROP FUNCTION IF EXISTS {_function(prefix, event)}() CASCADE"
        for event in ("insert", "delete")
    ]


def _function(prefix: str, event: str) -> str:
    return f"{prefix}index_on_{event}"


def rank(
    conn: Connection, index: TermIndex, key: str, terms: Sequence[str], limit: int
) -> list[Row[Any]]:
    """The best ``limit`` rows at ``key`` holding any of ``terms``, best first, as ``(seq,
    score, entry_id, entry)``: ADR 0017's answer (BM25, ``b = 0``, ties by ``seq``), reading
    only postings of the key.

    One statement reads ``N`` and each term's ``df`` (:func:`_stats`); then each step of
    :func:`~loom_memory.topk.top_k_scored` is one statement (:func:`_step`) that also returns
    its ranked rows, so the last step's are the answer and no statement reads them after it. A
    query whose rarest term is in a few hundred rows scores those and stops; the thousands of
    rows holding only its common terms are never read.
    """
    stats = _stats(conn, index, key, terms)
    # In the database's collation order, the order ADR 0017's sum adds the terms in.
    wanted = set(terms)
    known = [term for term in stats.documents if term in wanted]
    if not known:
        return []
    rows: dict[int, Row[Any]] = {}

    def score(essential: Sequence[str]) -> list[Hit]:
        sql, parameters = _step(index, key, known, set(essential), stats, limit, conn.dialect)
        ranked = conn.exec_driver_sql(sql, parameters).all()
        rows.update((row.seq, row) for row in ranked)  # one snapshot: a seq's row never differs
        return [Hit(rowid=row.seq, score=row.score) for row in ranked]

    return [rows[hit.rowid] for hit in top_k_scored(known, stats, limit, score)]


def _step(
    index: TermIndex,
    key: str,
    known: list[str],
    essential: set[str],
    stats: TermStats,
    limit: int,
    dialect: Dialect,
) -> tuple[str, dict[str, Any]]:
    """One step's SQL and its parameters: the statement of :func:`_step_statement` for this
    shape (how many terms, how each is read), compiled once per shape and then only re-bound.

    Building and cache-keying a SQLAlchemy statement of this size cost more than running it
    (~3 ms a step, measured); the SQL text of a shape never changes, only its values do.
    """
    shape = _shape(known, essential, stats)
    cached = index.steps.get(shape)
    if cached is None:
        compiled = _step_statement(index, shape).compile(dialect=dialect)
        cached = index.steps[shape] = (str(compiled), dict(compiled.params))
    sql, defaults = cached
    read = [term for term, how in zip(known, shape, strict=True) if how != PROBED]
    return sql, {
        **defaults,
        "key": key,
        "rows": stats.rows,
        "essential": sorted(essential),
        "read": sorted(read),
        "bound": stats.upper_bound(
            [term for term, how in zip(known, shape, strict=True) if how == PROBED]
        ),
        "floor_offset": limit - 1,
        "limit": limit,
        **{f"term{i}": term for i, term in enumerate(known)},
        **{f"df{i}": stats.documents[term] for i, term in enumerate(known)},
    }


def _shape(known: list[str], essential: set[str], stats: TermStats) -> tuple[str, ...]:
    """How a step reads each known term: the essential ones select the candidates; the other
    terms, rarest first, are read whole while their postings together number at most
    :data:`JOIN_RATIO` times the candidates' (the essential terms' postings); the rest are
    probed per candidate."""
    budget = JOIN_RATIO * sum(stats.documents[term] for term in essential)
    joined = set()
    for term in sorted(
        (term for term in known if term not in essential), key=lambda t: stats.documents[t]
    ):
        if stats.documents[term] > budget:
            break
        joined.add(term)
        budget -= stats.documents[term]
    return tuple(
        ESSENTIAL if term in essential else JOINED if term in joined else PROBED for term in known
    )


def _step_statement(
    index: TermIndex, shape: tuple[str, ...]
) -> Select[tuple[int, float, str, str]]:
    """The best ``limit`` rows holding an essential term, scored on every known term (term
    ``i`` read as ``shape[i]`` says), with their ``entry_id`` and ``entry``; every value is a
    named parameter.

    Three things make it cheap and keep it exact:

    * The postings of the essential terms and of the joined ones are one range read of the
      primary key each, grouped by ``seq`` into one row per candidate (a row holding no
      essential term is dropped); a probed term of a candidate is looked up on the key,
      ``(key, term, seq)``, with ``tf`` in the index. A lookup descends the index (~3 buffer
      hits), a range read costs a fraction of a hit per posting, hence :data:`JOIN_RATIO`.
    * A candidate is probed only if what it has (its essential and joined terms' parts) plus
      the probed terms' bound reaches the ``limit``-th best of what the candidates have (a
      lower bound of the ``limit``-th score): a candidate below it cannot enter, ties included.
    * Each term's contribution is a column (one posting per row and term, so ``max`` is that
      posting's), and the score adds them, absent ones as 0, in the known terms' order, the
      collation order ADR 0017's ``sum(.. ORDER BY lexeme)`` adds them in: the same floats
      added in the same order, so the same score, bit for bit, without sorting each row's terms.
    """
    p = index.postings.c
    key = bindparam("key", type_=Text)
    rows = bindparam("rows", type_=BigInteger)
    term = [bindparam(f"term{i}", type_=Text) for i in range(len(shape))]
    weight = [idf(rows, bindparam(f"df{i}", type_=BigInteger)) for i in range(len(shape))]
    essential = bindparam("essential", type_=ARRAY(Text))
    held = (
        select(
            p.seq,
            *(
                func.max(contribution(weight[i], p.tf)).filter(p.term == term[i]).label(f"t{i}")
                for i, read in enumerate(shape)
                if read != PROBED
            ),
        )
        .where(p.key == key, p.term == any_(bindparam("read", type_=ARRAY(Text))))
        .group_by(p.seq)
        .having(func.bool_or(p.term == any_(essential)))
        .cte("held")
        .prefix_with("MATERIALIZED")
    )
    part = _added([held.c[f"t{i}"] for i, read in enumerate(shape) if read != PROBED])
    floor = (
        select(part)
        .order_by(part.desc())
        .offset(bindparam("floor_offset", type_=Integer))
        .limit(1)
        .scalar_subquery()
    )
    bound = bindparam("bound", type_=Float)
    other = index.postings.alias("other")
    probed = (
        select(
            held,
            *(
                select(other.c.tf)
                .where(other.c.key == key, other.c.term == term[i], other.c.seq == held.c.seq)
                .scalar_subquery()
                .label(f"t{i}")
                for i, read in enumerate(shape)
                if read == PROBED
            ),
        )
        .where(part + bound >= func.coalesce(floor, 0.0) * (1.0 - MARGIN))
        .cte("probed")
        .prefix_with("MATERIALIZED")  # each probe runs once, not once per use of its tf
    )
    parts = [
        contribution(weight[i], probed.c[f"t{i}"]) if read == PROBED else probed.c[f"t{i}"]
        for i, read in enumerate(shape)
    ]
    score = _added(parts).label("score")
    best = (
        select(probed.c.seq, score)
        .order_by(score.desc(), probed.c.seq)
        .limit(bindparam("limit", type_=Integer))
        .cte("best")
        .prefix_with("MATERIALIZED")  # the ``limit`` best first, then their rows by key
    )
    entry = index.entries.c
    return (
        select(best.c.seq, best.c.score, entry.entry_id, entry.entry)
        .join_from(best, index.entries, entry.seq == best.c.seq)
        .order_by(best.c.score.desc(), best.c.seq)
    )


def _added(parts: Sequence[ColumnElement[float]]) -> ColumnElement[float]:
    """``parts`` added left to right, an absent (NULL) part as 0: ``0 + x`` is ``x`` exactly."""
    total: ColumnElement[float] = func.coalesce(parts[0], 0.0)
    for part in parts[1:]:
        total = total + func.coalesce(part, 0.0)
    return total


def _stats(conn: Connection, index: TermIndex, key: str, terms: Sequence[str]) -> TermStats:
    """``N`` and each term's ``df`` at ``key``, as the index keeps them, by term in the
    database's collation order.

    A plain DBAPI statement: SQLAlchemy's per-statement work (building, cache-keying the
    select) cost a good part of a small search.
    """
    found = conn.exec_driver_sql(
        f"SELECT c.term, c.df, (SELECT k.rows FROM {index.key_counts.name} k WHERE k.key = "
        f"%(key)s) FROM {index.term_counts.name} c WHERE c.key = %(key)s AND "
        "c.term = ANY(%(terms)s) ORDER BY c.term",
        {"key": key, "terms": list(terms)},
    ).all()
    return TermStats(
        rows=found[0][2] if found else 0, documents={term: df for term, df, _ in found}
    )
