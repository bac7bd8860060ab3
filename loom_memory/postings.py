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
count only the rows at the key that ``where`` admits. The arithmetic is done here, in Python,
from integers the database counted, summing each row's terms in term order: the same admitted
rows give bit-equal scores on either backend, whatever order a plan delivers them in. Ties fall
to the entry id, then the append order, so a search depends on what the admitted rows ARE, not
on when or in which order they were written, and ``where`` can select any past state exactly.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Connection,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    select,
)

K1 = 1.2
"""BM25's term-frequency saturation, as in Lucene, tantivy, FTS5 and ADR 0017."""

MIN_IDF = 1e-6
"""A term in over half the admitted rows still counts, a little (FTS5's and ADR 0017's floor)."""


def postings_table(prefix: str, metadata: MetaData) -> Table:
    """The side table: one row per (term, entry), searched by term, deleted with its entry.

    Deleted with the entry by the database itself, whoever deletes it (a caller's own
    ``DELETE`` included): on PostgreSQL by the foreign key's cascade, on SQLite (where foreign
    keys are off by default) by a trigger the backend adds (:meth:`SqliteMemoryStore._search_ddl`).
    A posting left behind would, on SQLite, collide with a re-used rowid.
    """
    return Table(
        f"{prefix}postings",
        metadata,
        Column("term", Text, nullable=False),
        Column(
            "seq",
            BigInteger().with_variant(Integer, "sqlite"),
            ForeignKey(f"{prefix}entries.seq", ondelete="CASCADE"),
            nullable=False,
        ),
        Column("tf", Integer, nullable=False),
        PrimaryKeyConstraint("term", "seq"),
        Index(f"{prefix}postings_seq", "seq"),
    )


def posting_rows(seq: int, terms: Sequence[str]) -> list[dict[str, object]]:
    """The postings of the entry ``seq`` whose indexed terms are ``terms``."""
    return [{"term": term, "seq": seq, "tf": tf} for term, tf in Counter(terms).items()]


def rank(
    conn: Connection,
    entries: Table,
    postings: Table,
    admitted: Sequence[ColumnElement[bool]],
    terms: Sequence[str],
    limit: int,
) -> list[int]:
    """The seqs of the best ``limit`` admitted rows containing any of ``terms``, best first.

    ``admitted`` restricts ``entries`` (the key, the caller's ``where``); orphan postings (an
    entry deleted behind the store's back) join to nothing and count nowhere.
    """
    total = conn.execute(select(func.count()).select_from(entries).where(*admitted)).scalar_one()
    found = conn.execute(
        select(postings.c.seq, postings.c.term, postings.c.tf, entries.c.entry_id)
        .join_from(postings, entries, postings.c.seq == entries.c.seq)
        .where(postings.c.term.in_(terms), *admitted)
    ).tuples()
    rows: dict[int, list[tuple[str, int]]] = defaultdict(list)
    names: dict[int, str] = {}
    for seq, term, tf, entry_id in found:
        rows[seq].append((term, tf))
        names[seq] = "" if entry_id is None else entry_id
    df = Counter(term for matched in rows.values() for term, _ in matched)
    idf = {
        term: max(math.log((total - count + 0.5) / (count + 0.5)), MIN_IDF)
        for term, count in df.items()
    }

    def score(matched: list[tuple[str, int]]) -> float:
        return sum(idf[term] * tf * (K1 + 1.0) / (tf + K1) for term, tf in sorted(matched))

    ranked = ((-score(matched), names[seq], seq) for seq, matched in rows.items())
    best = heapq.nsmallest(limit, ranked)
    return [seq for _, _, seq in best]
