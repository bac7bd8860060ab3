"""Counts at any position: how many rows of a key, and of its rows holding each term, were
valid at log position P, kept as the rows are written so that a search as of P reads them
(ADR 0059).

A temporal row is valid at P when ``valid_from <= P`` and it was never ended or ``P <
valid_to`` (:class:`~loom_memory.validity.ValidAt`). Its whole effect on the counts at every
position is two changes: ``+1`` at ``valid_from`` and, once ended, ``-1`` at
``max(valid_from, valid_to)`` (a row ended no later than it began is never valid: both changes
land on one position and cancel). ``N`` or a term's document frequency at P is then the sum
of the changes at positions ``<= P``.

Summed one position at a time, that is as many changes as the term has rows (the as-of
search this replaces read as many postings). So the changes are kept summed per bucket of
positions at three levels: every position (level 0), blocks of 2**8 (level 1) and blocks of
2**16 (level 2). The sum up to P takes the level-2 blocks wholly below P's, the level-1
blocks of P's level-2 block below P's own, and the positions of P's level-1 block up to P:
at most 256 + 256 rows per term, plus one per 65,536 positions of the log (a few hundred at
ten million positions), whatever the term's number of rows.

Why changes and not the count at each position: a change is one additive upsert
(``+= sign``), the same whatever order rows arrive in and whoever else writes (two writers
add to what the other committed, as the current counts do, ADR 0056); a running count would
rewrite every later position when a row is written, ended or erased in the past. A row's
changes are removed when it is deleted (an erasure, a ``clear``), so a bucket left at zero is
deleted too: no term of an erased row stays in these tables unless a live row still counts it.

Each store writes the changes of what it inserts (``TemporalSqlStore._insert``), and
triggers write those of an end, a move and a delete, whoever issues them: per row on SQLite
(:func:`sqlite_triggers`), per statement on PostgreSQL
(:func:`loom_memory.postgres_counts.position_triggers`). On SQLite, the ends a store makes in
``append_at_batch`` are counted with its inserts instead, in one :func:`bucketed` call, so a
revision's end and append cancel on their shared terms before any upsert.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
)

SHIFTS = (0, 8, 16)
"""Level ``i`` sums the changes of positions ``p`` with the same ``p >> SHIFTS[i]``."""

SELF_COUNTED = -1
"""The level of a marker row a store puts in ``rows`` for a key while it ends rows of the key
and counts their ends itself (:func:`sqlite_triggers`): no read sums it, and the store deletes
it in the same transaction, so no other connection ever sees it."""

LEVELS_SQL = " UNION ALL ".join(
    f"SELECT {level} AS level, {shift} AS shift" if level == 0 else f"SELECT {level}, {shift}"
    for level, shift in enumerate(SHIFTS)
)
"""The levels as rows ``(level, shift)``, to fan one change out to each level's bucket."""


TERMS_KEY = ("key", "term", "level", "bucket")
"""The primary key of the ``terms`` table, term before level: a write adds to a term's three
levels at once, and so keyed they are neighbours in the B-tree, mostly on one page, where
keyed level first each level of each term written dirtied a page of its own (ADR 0062)."""


def declare_tables(metadata: MetaData, *, rows: str, terms: str) -> None:
    """Declare ``rows`` (key, level, bucket, n) and ``terms`` (key, term, level, bucket, df):
    keyed so that one level's buckets of a key (and term) in a range are one range read."""
    Table(
        rows,
        metadata,
        Column("key", Text, nullable=False),
        Column("level", Integer, nullable=False),
        Column("bucket", BigInteger, nullable=False),
        Column("n", Integer, nullable=False),
        PrimaryKeyConstraint("key", "level", "bucket"),
        sqlite_with_rowid=False,
    )
    Table(
        terms,
        metadata,
        Column("key", Text, nullable=False),
        Column("level", Integer, nullable=False),
        Column("term", Text, nullable=False),
        Column("bucket", BigInteger, nullable=False),
        Column("df", Integer, nullable=False),
        PrimaryKeyConstraint(*TERMS_KEY),
        sqlite_with_rowid=False,
    )


def row_changes(valid_from: int | None, valid_to: int | None) -> list[tuple[int, int]]:
    """The ``(position, sign)`` changes a row valid from ``valid_from`` to ``valid_to`` makes
    to the counts (none for a row with no ``valid_from``: it is valid at no position)."""
    if valid_from is None:
        return []
    if valid_to is None:
        return [(valid_from, 1)]
    return [(valid_from, 1), (max(valid_from, valid_to), -1)]


Change = tuple[str, int, int, Collection[str]]
"""``(key, position, sign, distinct terms)``: one row's ``+1`` or ``-1`` at a position."""


def inserted_changes(
    inserted: Iterable[tuple[str, int | None, int | None, Collection[str]]],
) -> list[Change]:
    """The changes of inserted rows given as ``(key, valid_from, valid_to, distinct terms)``."""
    return [
        (key, position, sign, held)
        for key, valid_from, valid_to, held in inserted
        for position, sign in row_changes(valid_from, valid_to)
    ]


def ended_changes(
    ended: Iterable[tuple[str, int | None, Collection[str]]], position: int
) -> list[Change]:
    """The changes of current rows given as ``(key, valid_from, distinct terms)`` ended at
    ``position``: each row's ``-1`` moves from nowhere to ``max(valid_from, position)``."""
    return [
        (key, max(valid_from, position), -1, held)
        for key, valid_from, held in ended
        if valid_from is not None
    ]


def bucketed(
    changes: Iterable[Change],
) -> tuple[list[tuple[str, int, int, int]], list[tuple[str, str, int, int, int]]]:
    """The upserts for the ``rows`` (key, level, bucket, n) and ``terms`` (:data:`TERMS_KEY`,
    df) tables of ``changes``: summed per bucket, zeros left out, sorted (the order every
    writer takes the rows in, and the tables' key order).

    A revision's end and its append counted in one call cancel on their shared terms, so the
    buckets they would leave at zero are never written (ADR 0059, amended)."""
    # Each bucket's terms are counted from its rows' term sets in one Counter (a C loop over
    # them all), its ends' counted apart and taken out; summing per-position counters into
    # the coarser levels was a Python loop per term and position, and sorting the upserts as
    # 5-tuples compared their equal keys again and again. The upserts are made level by level,
    # buckets in order, then sorted (stably) by term and by key: the order of the tuples.
    rows: Counter[tuple[str, int, int]] = Counter()
    added: list[dict[tuple[str, int], list[Collection[str]]]] = [{} for _ in SHIFTS]
    taken: list[dict[tuple[str, int], list[Collection[str]]]] = [{} for _ in SHIFTS]
    for key, position, sign, held in changes:
        side = added if sign > 0 else taken
        for level, shift in enumerate(SHIFTS):
            bucket = position >> shift
            rows[key, level, bucket] += sign
            side[level].setdefault((key, bucket), []).append(held)
    terms: list[tuple[str, str, int, int, int]] = []
    for level, (plus, minus) in enumerate(zip(added, taken, strict=True)):
        for key, bucket in sorted(plus.keys() | minus.keys()):
            counted = Counter(chain.from_iterable(plus.get((key, bucket), ())))
            for term, df in Counter(chain.from_iterable(minus.get((key, bucket), ()))).items():
                counted[term] -= df
            terms += [(key, term, level, bucket, df) for term, df in counted.items() if df]
    terms.sort(key=itemgetter(1))
    terms.sort(key=itemgetter(0))
    return sorted((*where, n) for where, n in rows.items() if n), terms


def ranges(position: int) -> list[tuple[int, int | None, int]]:
    """``(level, first, last)`` bucket ranges (``first`` None: unbounded) whose changes are
    exactly those at positions ``<= position``, each position counted once."""
    found: list[tuple[int, int | None, int]] = []
    for level, shift in enumerate(SHIFTS):
        last = position >> shift if level == 0 else (position >> shift) - 1
        if level + 1 < len(SHIFTS):
            above = SHIFTS[level + 1]
            found.append((level, (position >> above) << (above - shift), last))
        else:
            found.append((level, None, last))
    return found


def read_counts(
    conn: Connection, *, rows: str, terms: str, key: str, words: Sequence[str], position: int
) -> tuple[int, dict[str, int]]:
    """``N`` at ``key`` and the document frequency of each of ``words`` (non-empty) at
    ``position``, in one statement: the sums of each level's range (:func:`ranges`)."""
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    word_marks = ", ".join([mark] * len(words))
    parts: list[str] = []
    parameters: list[Any] = []
    for table, column, tested, extra in (
        (rows, "n", "", ()),
        (terms, "df", f" AND term IN ({word_marks})", tuple(words)),
    ):
        label = "CAST(NULL AS TEXT)" if table == rows else "term"
        grouped = "" if table == rows else " GROUP BY term"
        for level, first, last in ranges(position):
            low = "" if first is None else f" AND bucket >= {mark}"
            parts.append(
                f"SELECT {label}, sum({column}) FROM {table} WHERE key = {mark} "
                f"AND level = {mark}{tested}{low} AND bucket <= {mark}{grouped}"
            )
            parameters += [key, level, *extra, *([] if first is None else [first]), last]
    total = 0
    documents: Counter[str] = Counter()
    for term, count in conn.exec_driver_sql(" UNION ALL ".join(parts), tuple(parameters)):
        if term is None:
            total += count or 0
        else:
            documents[term] += count
    return total, {term: df for term, df in documents.items() if df > 0}


def end_sql(row: str) -> str:
    """SQL for where ``row`` (a table alias or ``old``/``new``) stops being valid: NULL while
    current, else ``max(valid_from, valid_to)`` (NULL too without a ``valid_from``)."""
    return (
        f"CASE WHEN {row}.valid_to IS NULL THEN NULL WHEN {row}.valid_to > {row}.valid_from "
        f"THEN {row}.valid_to ELSE {row}.valid_from END"
    )


def refill_statements(*, entries: str, postings: str, rows: str, terms: str) -> list[str]:
    """Empty ``rows`` and ``terms`` and count every row of ``entries`` into them (a store
    opened without the tables, or whose entries table was recreated): same SQL on both
    backends. Level 0 is counted from the rows, each higher level from level 0 (a third of
    the grouping of fanning every change out to every level)."""
    changes = (
        f"SELECT e.seq, e.key, e.valid_from AS pos, 1 AS sign FROM {entries} AS e "
        f"UNION ALL SELECT e.seq, e.key, {end_sql('e')}, -1 FROM {entries} AS e"
    )
    statements = [
        f"DELETE FROM {rows}",
        f"DELETE FROM {terms}",
        f"INSERT INTO {rows} (key, level, bucket, n) SELECT ch.key, 0, ch.pos, sum(ch.sign) "
        f"FROM ({changes}) AS ch WHERE ch.pos IS NOT NULL GROUP BY ch.key, ch.pos "
        "HAVING sum(ch.sign) <> 0",
        f"INSERT INTO {terms} (key, level, term, bucket, df) SELECT ch.key, 0, p.term, ch.pos, "
        f"sum(ch.sign) FROM ({changes}) AS ch JOIN {postings} AS p ON p.seq = ch.seq "
        "WHERE ch.pos IS NOT NULL GROUP BY ch.key, p.term, ch.pos HAVING sum(ch.sign) <> 0",
    ]
    for level, shift in enumerate(SHIFTS[1:], start=1):
        statements += [
            f"INSERT INTO {rows} (key, level, bucket, n) SELECT key, {level}, bucket >> {shift}, "
            f"sum(n) FROM {rows} WHERE level = 0 GROUP BY key, bucket >> {shift} "
            "HAVING sum(n) <> 0",
            f"INSERT INTO {terms} (key, level, term, bucket, df) SELECT key, {level}, term, "
            f"bucket >> {shift}, sum(df) FROM {terms} WHERE level = 0 "
            f"GROUP BY key, term, bucket >> {shift} HAVING sum(df) <> 0",
        ]
    return statements


def sqlite_triggers(*, entries: str, postings: str, rows: str, terms: str) -> list[str]:
    """SQLite's per-row triggers writing the changes of an end, a move and a delete.

    An end is not counted while the key's :data:`SELF_COUNTED` marker is in ``rows``: the
    store's own ends are counted with its inserts (``TemporalSqlStore.append_at_batch``).

    An end (only ``valid_to`` changed) moves the row's ``-1`` from its old end to its new
    one; a move (its key or ``valid_from`` changed) takes all its changes out and puts them
    back; a delete (BEFORE: the entry's postings go with it afterwards) takes them out and
    deletes the buckets left at zero."""

    def change(key: str, seq: str, position: str, sign: int) -> str:
        at = f"({position})"
        return (
            f"INSERT INTO {rows} (key, level, bucket, n) SELECT {key}, l.level, "
            f"{at} >> l.shift, {sign} FROM ({LEVELS_SQL}) AS l WHERE {at} IS NOT NULL "
            "ON CONFLICT (key, level, bucket) DO UPDATE SET n = n + excluded.n; "
            f"INSERT INTO {terms} (key, level, term, bucket, df) SELECT {key}, l.level, "
            f"p.term, {at} >> l.shift, {sign} FROM {postings} AS p, ({LEVELS_SQL}) AS l "
            f"WHERE p.seq = {seq} AND {at} IS NOT NULL "
            "ON CONFLICT (key, term, level, bucket) DO UPDATE SET df = df + excluded.df;"
        )

    def changes(row: str, sign: int) -> str:
        return change(f"{row}.key", f"{row}.seq", f"{row}.valid_from", sign) + change(
            f"{row}.key", f"{row}.seq", end_sql(row), -sign
        )

    def zeros(row: str) -> str:
        buckets = " OR ".join(
            f"(level = {level} AND bucket IN ({row}.valid_from >> {shift}, "
            f"({end_sql(row)}) >> {shift}))"
            for level, shift in enumerate(SHIFTS)
        )
        held = f"(SELECT term FROM {postings} WHERE seq = {row}.seq)"
        return (
            f"DELETE FROM {rows} WHERE key = {row}.key AND n = 0 AND ({buckets}); "
            f"DELETE FROM {terms} WHERE key = {row}.key AND df = 0 AND term IN {held} "
            f"AND ({buckets});"
        )

    same = "old.key IS new.key AND old.valid_from IS new.valid_from"
    counted_by_store = (
        f"EXISTS (SELECT 1 FROM {rows} WHERE key = new.key AND level = {SELF_COUNTED} "
        "AND bucket = 0)"
    )
    return [
        # Replaced at every open: a store written before the store counted its own ends has
        # the trigger without the marker's test, and would count those ends twice.
        f"DROP TRIGGER IF EXISTS {entries}_at_end",
        f"CREATE TRIGGER {entries}_at_end AFTER UPDATE OF valid_to ON {entries} "
        f"WHEN {same} AND old.valid_to IS NOT new.valid_to AND NOT {counted_by_store} BEGIN "
        f"{change('new.key', 'new.seq', end_sql('old'), 1)} "
        f"{change('new.key', 'new.seq', end_sql('new'), -1)} END",
        f"CREATE TRIGGER IF NOT EXISTS {entries}_at_move AFTER UPDATE OF key, valid_from "
        f"ON {entries} WHEN NOT ({same}) BEGIN {changes('old', -1)} {zeros('old')} "
        f"{changes('new', 1)} END",
        f"CREATE TRIGGER IF NOT EXISTS {entries}_at_delete BEFORE DELETE ON {entries} "
        f"BEGIN {changes('old', -1)} {zeros('old')} END",
    ]
