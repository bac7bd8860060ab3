"""Postings: a ``(term, seq, tf)`` side table, and BM25 with the statistics of the admitted rows.

Why a store would want it: FTS5's ``bm25()`` takes the row count ``N``, each term's document
frequency and the average length from its WHOLE index (every key, every row ever appended and
not deleted), and breaks ties by rowid. A caller that keeps history as rows and searches it
through ``where=`` (the corpus keeps every revision of a passage, ADR 0014) then ranks a current
search with the statistics of superseded rows, and an "as of" search with today's: re-syncing
one document back and forth made it sink for its own question. PostgreSQL counted the admitted
rows already (ADR 0017) but broke ties by append order, which history also changes.

A store built with ``postings=True`` keeps one row per distinct term of each entry, with its
count, written and deleted with the entry in the same transaction, and ranks every search with
:func:`rank`: BM25 with ``k1 = 1.2``, no length normalisation (``b = 0``, as ADR 0017 chose for
PostgreSQL) and ``idf = max(ln((N - df + 0.5) / (df + 0.5)), 1e-6)``, where ``N`` and ``df``
count only the rows at the key that ``where`` admits. Scores are exact integers (see
:func:`rank`), so the same admitted rows score the same whatever order a plan adds their terms
in, on either backend. Ties fall to the entry id, then the append order: a search depends on
what the admitted rows ARE, not on when or in which order they were written, and ``where`` can
select any past state exactly.

Cost: a search reads the postings of its terms (every row ever kept at any key) and the seqs of
the admitted rows (give ``where``'s columns a covering index with the key); it scores every
admitted row that matches, unlike :mod:`loom_memory.topk`, because a filter's statistics are not
known before counting. The exception is a temporal store's search of its current rows, whose
statistics are kept as rows are written, or of the rows valid at a position, whose statistics
are kept by position (:mod:`loom_memory.position_counts`): :func:`rank_pruned` returns the
same pairs scoring only the rows that can reach the top (ADR 0056).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    Engine,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    ScalarSelect,
    Table,
    Text,
    case,
    func,
    inspect,
    literal,
    select,
)

MIN_IDF = 1e-6
"""A term in over half the admitted rows still counts, a little (FTS5's and ADR 0017's floor)."""

IDF_SCALE = 2**32
"""Scores are integers: ``idf`` in units of 2**-32, so a sum is exact in any order."""


def postings_table(prefix: str, metadata: MetaData, *, keyed: bool = False) -> Table:
    """The side table: one row per (term, entry), searched by term, deleted with its entry.

    Clustered by ``(term, seq)`` (``WITHOUT ROWID`` on SQLite) so a term's postings, counts
    included, are one range read. Deleted with the entry by the database itself, whoever
    deletes it (a caller's own ``DELETE`` included), by a trigger each backend adds: per row on
    SQLite, per statement on PostgreSQL. No foreign key: SQLite does not enforce one by
    default, and PostgreSQL checked it for every posting inserted, a fifth of a corpus sync
    (ADR 0044, amended "no foreign key"). A posting left behind would, on SQLite, collide
    with a re-used rowid.

    ``keyed`` leads each posting with its entry's key, clustered by ``(key, term, seq)``: a
    search that ranks within a key and knows its statistics already (a plain PostgreSQL store,
    :mod:`loom_memory.postgres_terms`) then reads only the postings of its key and terms,
    without visiting the entries to test their key. Its postings are deleted by that module's
    trigger, not a foreign key.
    """
    return Table(
        f"{prefix}postings",
        metadata,
        *([Column("key", Text, nullable=False)] if keyed else []),
        Column("term", Text, nullable=False),
        Column("seq", BigInteger().with_variant(Integer, "sqlite"), nullable=False),
        Column("tf", Integer, nullable=False),
        PrimaryKeyConstraint(
            *(["key"] if keyed else []),
            "term",
            "seq",
            # PostgreSQL: a term's postings, counts included, are read from the index alone
            # (no visit to the table per posting); SQLite's WITHOUT ROWID table is the index.
            postgresql_include=["tf"],
        ),
        Index(f"{prefix}postings_seq", "seq"),
        sqlite_with_rowid=False,
    )


def built_with_postings(engine: Engine, prefix: str) -> bool:
    """Whether the store at ``prefix`` was built with ``postings=True``: read from its
    tables, for code that opens a store it did not build (an erasure). A plain PostgreSQL
    store's term index has the same table name, led by the entry's key."""
    name = postings_table(prefix, MetaData()).name
    schema = inspect(engine)
    if not schema.has_table(name):
        return False
    return "key" not in {column["name"] for column in schema.get_columns(name)}


def posting_rows(seq: int, counts: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """The postings ``(term, seq, tf)`` of the entry ``seq`` whose indexed terms are counted in
    ``counts`` (each term's frequency)."""
    return [(term, seq, tf) for term, tf in counts.items()]


def rank(
    conn: Connection,
    entries: Table,
    postings: Table,
    admitted: Sequence[ColumnElement[bool]],
    terms: Sequence[str],
    limit: int,
) -> list[tuple[int, int]]:
    """The ``(seq, score)`` of every admitted row containing any of ``terms`` that scores at
    least the ``limit``-th best score, best first, ties in append order (the caller breaks them
    by entry id: it reads those rows anyway).

    Two statements. The first counts ``N`` (the rows ``admitted`` selects from ``entries``: the
    key and the caller's ``where``) and each term's document frequency among them; ``idf`` is
    computed here from those integers and bound into the second, which sums each row's
    ``idf * tf * (k1 + 1) / (tf + k1)`` in integers (``idf`` scaled by :data:`IDF_SCALE`; with
    ``k1 = 1.2``, as in Lucene, tantivy, FTS5 and ADR 0017, the saturation is the exact fraction
    ``11 tf / (5 tf + 6)``, taken by integer division), so a row's score
    is the same whatever order a plan adds its terms in, and the same on either backend.
    Orphan postings (an entry deleted behind the store's back) match no admitted seq.
    """
    matching = _matching(entries, postings, admitted, terms)
    rows, documents = _statistics(conn, postings, matching)
    if not documents:
        return []
    idf = {term: idf_weight(rows, df) for term, df in documents.items()}
    weight = case(
        {term: literal(value, BigInteger) for term, value in idf.items()}, value=postings.c.term
    )
    tf = postings.c.tf
    score = func.sum(weight * 11 * tf // (5 * tf + 6)).label("score")
    scores = (
        select(postings.c.seq, score)
        .where(*matching.where)
        .group_by(postings.c.seq)
        .cte("scores")
        .prefix_with("MATERIALIZED")
    )
    threshold = (
        select(scores.c.score).order_by(scores.c.score.desc()).offset(limit - 1).limit(1)
    ).scalar_subquery()
    best = conn.execute(
        select(scores.c.seq, scores.c.score)
        .where(scores.c.score >= func.coalesce(threshold, 0))
        .order_by(scores.c.score.desc(), scores.c.seq)
    ).tuples()
    return list(best)


def _matching(
    entries: Table,
    postings: Table,
    admitted: Sequence[ColumnElement[bool]],
    terms: Sequence[str],
) -> _Matching:
    """The postings of ``terms`` whose rows ``admitted`` selects, and ``N``."""
    rows = select(entries.c.seq).where(*admitted).cte("admitted").prefix_with("MATERIALIZED")
    # seq + 0: reach the postings by term and test their seqs against the admitted set. On the
    # bare column SQLite probed (term, seq) once per admitted row and term instead, ~2x slower.
    return _Matching(
        where=(postings.c.term.in_(terms), (postings.c.seq + 0).in_(select(rows.c.seq))),
        total=select(func.count()).select_from(rows).scalar_subquery(),
    )


@dataclass(frozen=True)
class _Matching:
    """What :func:`rank`'s two statements share: which postings match, and ``N``."""

    where: tuple[ColumnElement[bool], ...]
    total: ScalarSelect[int]


def _statistics(
    conn: Connection, postings: Table, matching: _Matching
) -> tuple[int, dict[str, int]]:
    counted = conn.execute(
        select(postings.c.term, func.count(), matching.total)
        .where(*matching.where)
        .group_by(postings.c.term)
    ).all()
    rows = counted[0][2] if counted else 0
    return rows, {term: df for term, df, _ in counted}


def idf_weight(rows: int, documents: int) -> int:
    """The scaled idf of a term in ``documents`` of ``rows`` rows, as :func:`rank` binds it."""
    return round(IDF_SCALE * max(math.log((rows - documents + 0.5) / (documents + 0.5)), MIN_IDF))


def driver_mark(conn: Connection) -> str:
    """The parameter mark of ``conn``'s driver in ``exec_driver_sql``: ``?`` or ``%s``."""
    return "?" if conn.dialect.name == "sqlite" else "%s"


def term_bound(weight: int) -> int:
    """The most one term of scaled idf ``weight`` can add to a row's score, in any row.

    A term adds ``weight * 11 * tf // (5 tf + 6)`` (:func:`rank`); ``11 tf / (5 tf + 6)`` is
    below ``11 / 5`` for every ``tf``, so the floor of the product is at most
    ``weight * 11 // 5``. Exact integers: a bound off by one would prune a row that ties.
    """
    return weight * 11 // 5


@dataclass(frozen=True)
class Admission:
    """The rows of a key a pruned ranking admits, as SQL over the entries aliased ``e``.

    ``source`` is the FROM item (``<entries> AS e``, with an index hint where one is needed),
    ``condition`` tests a row (``e.key`` and ``e.seq`` are tested besides), ``parameters``
    fill its marks. The current rows and the rows valid at a position differ only here
    (:mod:`loom_memory.validity` builds both)."""

    source: str
    condition: str
    parameters: tuple[Any, ...] = ()


def rank_pruned(
    conn: Connection,
    *,
    postings: str,
    admission: Admission,
    key: str,
    rows: int,
    documents: dict[str, int],
    limit: int,
    scored: list[int] | None = None,
) -> list[tuple[int, int]]:
    """What :func:`rank` returns for the rows at ``key`` that ``admission`` admits, scoring
    only rows that can reach the ``limit``-th best score (exact MaxScore pruning).

    ``rows`` and ``documents`` are the counts :func:`rank` would take: the admitted rows at
    the key and, per query term, how many of them hold it (read from counts kept as rows are
    written for the current rows; for the rows valid at a position, summed from the changes
    kept by position, :mod:`loom_memory.position_counts`). Each term's contribution
    is bounded by :func:`term_bound`. The rarest terms are "essential": only rows holding one
    are scored, each on every term. Rows holding only the other terms score at most the sum
    of those terms' bounds; once that sum is strictly below the ``limit``-th best score among
    the scored rows, no such row can reach it (a row tying it would have to be returned, so
    the cut is strict), and every row scoring at least it is among those scored. Otherwise
    the next rarest term turns essential and the scoring repeats, down to scoring every match
    as :func:`rank` does. A candidate's admission is tested on its entry alone
    (``admission``). ``scored``, when given, receives how many rows each round scored (for
    tests: the pruning must be seen to happen).
    """
    present = sorted(term for term, count in documents.items() if count > 0)
    if rows <= 0 or not present:
        return []
    weight = {term: idf_weight(rows, documents[term]) for term in present}
    bound = {term: term_bound(weight[term]) for term in present}
    order = sorted(present, key=lambda term: (bound[term], term))  # most common first
    weights = " ".join("WHEN ? THEN ?" for _ in present)
    weight_values = tuple(value for term in present for value in (term, weight[term]))
    every = ", ".join("?" * len(present))
    split = len(order) - 1  # order[split:] are essential
    while True:
        # A round whose essential terms hold fewer than ``limit`` rows in all cannot find
        # ``limit`` rows: it would end by turning the next term essential, so do that now.
        while split > 0 and sum(documents[term] for term in order[split:]) < limit:
            split -= 1
        essential = order[split:]
        found: Sequence[Any]
        if conn.dialect.name == "postgresql":
            found = _postgres_round(conn, postings, admission, key, order, split, weight, limit)
        else:
            marks = ", ".join("?" * len(essential))
            found = conn.exec_driver_sql(
                f"WITH candidates AS MATERIALIZED (SELECT DISTINCT p.seq FROM {postings} AS p "
                f"WHERE p.term IN ({marks}) AND EXISTS (SELECT 1 FROM {admission.source} "
                f"WHERE e.key = ? AND e.seq = p.seq AND {admission.condition})) "
                f"SELECT p.seq, sum((CASE p.term {weights} END) * 11 * p.tf / (5 * p.tf + 6)) "
                f"FROM candidates JOIN {postings} AS p ON p.seq = candidates.seq "
                f"AND p.term IN ({every}) GROUP BY p.seq ORDER BY 2 DESC, p.seq",
                (*essential, key, *admission.parameters, *weight_values, *present),
            ).all()
        if scored is not None:
            scored.append(len(found))
        if split == 0:
            threshold = found[limit - 1][1] if len(found) >= limit else 0
            return [(seq, score) for seq, score in found if score >= threshold]
        if len(found) < limit:
            split -= 1
            continue
        threshold = found[limit - 1][1]
        if sum(bound[term] for term in order[:split]) < threshold:
            return [(seq, score) for seq, score in found if score >= threshold]
        while split > 0 and sum(bound[term] for term in order[:split]) >= threshold:
            split -= 1


def _postgres_round(
    conn: Connection,
    postings: str,
    admission: Admission,
    key: str,
    order: list[str],
    split: int,
    weight: dict[str, int],
    limit: int,
) -> list[tuple[int, int]]:
    """One round of :func:`rank_pruned` on PostgreSQL: the rows holding an essential term
    (``order[split:]``), each with its full score, best first; a row that cannot reach the
    ``limit``-th best may be left out.

    The essential terms' shares are summed from one range read of their postings (``tf`` is
    in the key, ``(term, seq) INCLUDE (tf)``); their ``limit``-th best sum is a floor under
    the ``limit``-th best score (a row's score is at least its essential part), so a row whose
    essential part plus the other terms' bounds is below that floor is dropped unprobed, and
    every other row has each other term's count probed on the key. As a join, PostgreSQL's
    planner read every posting of the common terms, the very rows the pruning spares. The same
    integers are added, so the same scores (psycopg binds a small int as a smallint, which
    ``11 *`` would overflow: hence the casts).
    """
    essential, others = order[split:], order[:split]
    share = "* 11 * p.tf / (5 * p.tf + 6)"
    cases = " ".join("WHEN %s THEN %s::bigint" for _ in essential)
    probes = "".join(
        f" + coalesce((SELECT %s::bigint {share} FROM {postings} AS p "
        "WHERE p.term = %s AND p.seq = c.seq), 0)"
        for _ in others
    )
    found = conn.exec_driver_sql(
        f"WITH candidates AS MATERIALIZED (SELECT p.seq, sum((CASE p.term {cases} END) {share}) "
        f"AS part FROM {postings} AS p WHERE p.term IN ({', '.join(['%s'] * len(essential))}) "
        f"AND EXISTS (SELECT 1 FROM {admission.source} WHERE e.key = %s AND e.seq = p.seq "
        f"AND {admission.condition}) GROUP BY p.seq) "
        f"SELECT c.seq, c.part{probes} FROM candidates AS c WHERE c.part + %s >= coalesce("
        "(SELECT part FROM candidates ORDER BY part DESC OFFSET %s LIMIT 1), 0) "
        "ORDER BY 2 DESC, c.seq",
        (
            *(value for term in essential for value in (term, weight[term])),
            *essential,
            key,
            *admission.parameters,
            *(value for term in others for value in (weight[term], term)),
            sum(term_bound(weight[term]) for term in others),
            limit - 1,
        ),
    ).all()
    return [(seq, score) for seq, score in found]
