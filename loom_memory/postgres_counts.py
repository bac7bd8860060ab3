"""PostgreSQL triggers keeping a temporal store's current counts when rows end or go.

A :class:`~loom_memory.PostgresTemporalStore` keeps, like the SQLite one (ADR 0056), ``N`` per
key (``<prefix>current_rows``) and each term's document frequency per key
(``<prefix>current_terms``) over the current rows. The store's own insert counts what it
appends; these triggers uncount what stops being current, and count what becomes current
again, whoever issues the statement (a caller's own ``UPDATE`` or ``DELETE`` included):

* ``AFTER UPDATE``: a row ended (``valid_to`` NULL -> P), made current again, or moved to
  another key;
* ``AFTER DELETE``: a current row deleted.

Why statement-level with transition tables, not a trigger per row as on SQLite: one
``end_validity`` or ``clear`` changes many rows, and one grouped upsert per statement costs
far less than two statements per row. Why the terms come from the rows' ``search_vector``,
not their postings: the postings' own delete trigger may have run before these (a deleted
row's postings are then gone), and the vector's lexemes are the entry's distinct terms
(the store writes one lexeme per term, :class:`~loom_memory.PostgresMemoryStore`), the same
set its postings hold.

Each trigger takes the key rows first, in key order, then the term rows in (key, term) order,
as the store's insert does: two writers of one key queue on the key's row and add to what the
other committed (``n = c.n + excluded.n`` under READ COMMITTED re-reads the row it waited for),
so the counts stay exact under concurrent writers.

:func:`position_triggers` keep the counts by position (:mod:`loom_memory.position_counts`,
ADR 0059) the same way, for every row an ``UPDATE`` or ``DELETE`` changes (ended or not),
after taking the key's lock (:func:`key_lock`).

Each trigger sums its statement's changes once per table (a grouping that, for a reconcile
ending a thousand passages, is most of the statement's time): it adds the non-zero sums and
keeps the groups that can be at zero after it, those the addition left at zero and those whose
changes cancelled, then deletes those at zero (:class:`_Counts`). A zero can sit in a group
whose changes cancel: the store's insert adds without deleting, so a revision (an end, then an
append at the same position) leaves its shared terms' buckets at zero there, and a statement
deleting both rows must not leave the erased terms behind. So a statement deletes exactly
the rows at zero among the groups its changes touch, as when the delete grouped them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from loom_memory.position_counts import LEVELS_SQL, end_sql

_MOVED = "n.key IS DISTINCT FROM o.key"
_KEPT = "NOT o.key = ANY(gone)"
"""A deleted row whose key keeps rows: the changes of a key left with none are not summed,
its counts are deleted whole (:func:`_emptied`)."""
_CHANGES = {
    "delete": (
        "SELECT o.key, o.search_vector, -1 AS sign FROM old_rows o "
        f"WHERE o.valid_to IS NULL AND {_KEPT}"
    ),
    # A row's seq never changes (its postings refer to it): old and new rows pair by seq.
    "update": (
        "SELECT o.key, o.search_vector, -1 AS sign FROM old_rows o JOIN new_rows n "
        f"ON n.seq = o.seq WHERE o.valid_to IS NULL AND (n.valid_to IS NOT NULL OR {_MOVED}) "
        "UNION ALL SELECT n.key, n.search_vector, 1 FROM old_rows o JOIN new_rows n "
        f"ON n.seq = o.seq WHERE n.valid_to IS NULL AND (o.valid_to IS NOT NULL OR {_MOVED})"
    ),
}
_REPLACE = "CREATE OR REPLACE FUNCTION"
_TRANSITIONS = {
    "delete": "OLD TABLE AS old_rows",
    "update": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
}


def count_triggers(prefix: str, entries: str, *, rows: str, terms: str) -> list[str]:
    """The trigger functions and triggers keeping the count tables ``rows`` and ``terms`` of
    the ``entries`` table (idempotent: functions replaced, triggers dropped and recreated)."""
    statements = []
    for event, changes in _CHANGES.items():
        changed = f"({changes}) AS ch"
        counts = (
            _Counts(rows, ("key",), "n", f"SELECT ch.key, ch.sign FROM {changed}", "<= 0"),
            _Counts(
                terms,
                ("key", "term"),
                "df",
                f"SELECT ch.key, v.lexeme, ch.sign FROM {changed}, unnest(ch.search_vector) AS v",
                "<= 0",
            ),
        )
        # The key rows locked in key order before the emptied keys are read: a writer adding
        # rows of a key upserts its key row first, so it has committed (and its rows are
        # seen) or waits until this statement's transaction ends.
        key_rows = (
            f"PERFORM 1 FROM {rows} WHERE key IN (SELECT o.key FROM old_rows o) "
            "ORDER BY key FOR UPDATE;"
        )
        statements += _statement_trigger(
            entries,
            _function(prefix, event),
            f"{entries}_count_{event}",
            event,
            counts,
            lock=key_rows if event == "delete" else "",
            emptied=_emptied(entries, counts) if event == "delete" else "",
        )
    return statements


def replaced_functions(statements: list[str]) -> list[str]:
    """The function statements of ``statements`` (from :func:`count_triggers` or
    :func:`position_triggers`): what an open of existing tables runs to replace a body that
    older code wrote, since ``CREATE OR REPLACE`` keeps the function the triggers call."""
    return [statement for statement in statements if statement.startswith(_REPLACE)]


def drop_count_triggers(prefix: str) -> list[str]:
    """Drop the trigger functions, and with them the triggers (the tables go with the store)."""
    return [f"DROP FUNCTION IF EXISTS {_function(prefix, event)}() CASCADE" for event in _CHANGES]


def _function(prefix: str, event: str) -> str:
    return f"{prefix}count_on_{event}"


def position_triggers(prefix: str, entries: str, *, rows: str, terms: str) -> list[str]:
    """The trigger functions and triggers writing the changes by position
    (:mod:`loom_memory.position_counts`) of the rows an ``UPDATE`` or ``DELETE`` of
    ``entries`` changes: a deleted row's changes taken out, an updated row's (its key, start
    or end changed) taken out and put back as they now are; the opposite changes of an
    unchanged start cancel in the grouping. The buckets the statement touched that are at zero
    are deleted. Idempotent."""
    changed = (
        "o.key IS DISTINCT FROM n.key OR o.valid_from IS DISTINCT FROM n.valid_from "
        "OR o.valid_to IS DISTINCT FROM n.valid_to"
    )
    pairs = f"FROM old_rows o JOIN new_rows n ON n.seq = o.seq WHERE {changed}"
    events = {
        "delete": _changes_of("o", -1, f"FROM old_rows o WHERE {_KEPT}"),
        "update": f"{_changes_of('o', -1, pairs)} UNION ALL {_changes_of('n', 1, pairs)}",
    }
    statements = []
    for event, changes in events.items():
        counts = (
            _Counts(rows, ("key", "level", "bucket"), "n", _at_every_level(changes), "= 0"),
            _Counts(
                terms,
                ("key", "level", "term", "bucket"),
                "df",
                _at_every_level(changes, terms=True),
                "= 0",
            ),
        )
        # A delete locks every key it deleted rows of (the changes leave out the emptied
        # ones, known only once their writers are waited for).
        keys = "old_rows" if event == "delete" else f"({changes})"
        lock = (
            f"PERFORM {key_lock(prefix, 'd.key')} FROM (SELECT DISTINCT ch.key FROM "
            f"{keys} AS ch ORDER BY ch.key) AS d;"
        )
        # Named to fire after the current counts' trigger of the same event (PostgreSQL fires
        # them in name order): that one takes the key's current count first, as an insert does.
        statements += _statement_trigger(
            entries,
            _function(prefix, f"at_{event}"),
            f"{entries}_count_{event}_at",
            event,
            counts,
            lock=lock,
            emptied=_emptied(entries, counts) if event == "delete" else "",
        )
    return statements


def _emptied(entries: str, counts: tuple[_Counts, _Counts]) -> str:
    """PL/pgSQL putting in ``gone`` the keys a delete left with no row of ``entries`` and
    deleting every count of theirs (term rows first), all of which are zero once their rows
    are gone: a key cleared (a projection's reset, ``clear``) is not summed row by row, term
    by term and level by level, the most of a rebuild's reset (2.0 of 2.1 s for 2,704
    passages). Run after the trigger's lock: a writer of such a key has committed (its rows
    are seen, the key is not emptied) or waits for this transaction."""
    rows, terms = counts
    return (
        "SELECT coalesce(array_agg(d.key), '{}') INTO gone FROM (SELECT DISTINCT o.key "
        f"FROM old_rows o) AS d WHERE NOT EXISTS (SELECT 1 FROM {entries} AS e "
        "WHERE e.key = d.key); "
        f"IF cardinality(gone) > 0 THEN DELETE FROM {terms.table} WHERE key = ANY(gone); "
        f"DELETE FROM {rows.table} WHERE key = ANY(gone); END IF;"
    )


def _at_every_level(changes: str, *, terms: bool = False) -> str:
    """The ``changes`` (of ``(key, search_vector, pos, sign)``) summed per position of each
    key, and of each of its terms with ``terms``, then fanned out to every level's bucket:
    ``(key, level[, term], bucket, sum)``. The sums per bucket, and the buckets touched (a
    position whose changes cancel is kept, at 0), are those of fanning out every change, for
    a third of the rows to group (one per position, not one per change and level)."""
    term, lexeme = (", term", ", v.lexeme") if terms else ("", "")
    source = f"({changes}) AS ch" + (", unnest(ch.search_vector) AS v" if terms else "")
    summed = (
        f"SELECT ch.key{lexeme}, ch.pos, sum(ch.sign) FROM {source} WHERE ch.pos IS NOT NULL "
        f"GROUP BY ch.key{lexeme}, ch.pos"
    )
    picked = ", z.term" if terms else ""
    return (
        f"SELECT z.key, l.level{picked}, z.pos >> l.shift, z.sign FROM ({summed}) "
        f"AS z (key{term}, pos, sign) CROSS JOIN ({LEVELS_SQL}) AS l"
    )


@dataclass(frozen=True)
class _Counts:
    """One count table a trigger keeps: its ``columns`` (a group of changes, in the order its
    rows are locked), its ``count`` column, the ``changes`` (a SELECT of the columns' values
    then each change's sign) and the test of a row left at ``zero``, to be deleted."""

    table: str
    columns: tuple[str, ...]
    count: str
    changes: str
    zero: str

    def declare(self, name: str) -> str:
        """The PL/pgSQL variables ``name_<column>``: the groups to delete, an array a column."""
        return " ".join(f"{name}_{column} {_TYPES[column]}[];" for column in self.columns)

    def add(self, name: str) -> str:
        """Sum the changes per group once, add each non-zero sum (in column order: the lock
        order), and keep in the variables ``name`` every group the statement touched that can
        be at zero: those the addition left at zero, and those whose changes cancelled (the
        module docstring says how one holds a zero)."""
        columns = ", ".join(self.columns)
        returned = ", ".join(f"c.{column}" for column in self.columns)
        gathered = ", ".join(f"array_agg(z.{column})" for column in self.columns)
        into = ", ".join(f"{name}_{column}" for column in self.columns)
        return (
            f"WITH g AS (SELECT {columns}, sum(s.sign) AS d FROM ({self.changes}) "
            f"AS s ({columns}, sign) GROUP BY {columns}), "
            f"up AS (INSERT INTO {self.table} AS c ({columns}, {self.count}) "
            f"SELECT {columns}, d FROM g WHERE d <> 0 ORDER BY {columns} "
            f"ON CONFLICT ({columns}) DO UPDATE SET {self.count} = c.{self.count} + "
            f"excluded.{self.count} RETURNING {returned}, c.{self.count} AS d) "
            f"SELECT {gathered} INTO {into} FROM (SELECT {columns} FROM up WHERE d {self.zero} "
            f"UNION ALL SELECT {columns} FROM g WHERE d = 0) AS z;"
        )

    def prune(self, name: str) -> str:
        """Delete the groups kept in the variables ``name`` that are at zero."""
        columns = ", ".join(self.columns)
        arrays = ", ".join(f"{name}_{column}" for column in self.columns)
        matched = " AND ".join(f"c.{column} = z.{column}" for column in self.columns)
        return (
            f"IF {name}_{self.columns[0]} IS NOT NULL THEN DELETE FROM {self.table} AS c "
            f"USING unnest({arrays}) AS z ({columns}) WHERE {matched} "
            f"AND c.{self.count} {self.zero}; END IF;"
        )


_TYPES = {"key": "text", "term": "text", "level": "integer", "bucket": "bigint"}


def _statement_trigger(
    entries: str,
    function: str,
    trigger: str,
    event: str,
    counts: tuple[_Counts, _Counts],
    *,
    lock: str = "",
    emptied: str = "",
) -> list[str]:
    """(Re)create ``function`` and the statement-level ``trigger`` calling it after each
    ``event`` on ``entries``, with the statement's rows as transition tables: the function
    takes ``lock``, adds to the key rows then the term rows of ``counts``, and deletes the
    ones left at zero, term rows first."""
    rows, terms = counts
    declare = f"{rows.declare('r')} {terms.declare('t')} gone text[] := '{{}}';"
    body = f"{lock} {emptied} {rows.add('r')} {terms.add('t')} {terms.prune('t')} {rows.prune('r')}"
    return [
        f"{_REPLACE} {function}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ DECLARE {declare} BEGIN {body} RETURN NULL; END $$",
        f"DROP TRIGGER IF EXISTS {trigger} ON {entries}",
        f"CREATE TRIGGER {trigger} AFTER {event.upper()} ON {entries} "
        f"REFERENCING {_TRANSITIONS[event]} FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
    ]


def key_lock(prefix: str, key: str) -> str:
    """SQL taking the transaction's lock on the counts by position of the key ``key`` (an
    expression) of the store with table prefix ``prefix``.

    Every writer of those counts takes it, in key order, before touching them: writers of one
    key then queue, instead of taking bucket rows (shared by nearby positions and common
    terms) in different orders across their statements and deadlocking. The current counts
    get the same from the key's row in ``current_rows``, which a statement touching no
    current row does not take."""
    return f"pg_advisory_xact_lock(hashtextextended('{prefix}' || {key}, 0))"


def drop_position_triggers(prefix: str) -> list[str]:
    """Drop the functions of :func:`position_triggers`, and with them the triggers."""
    return [
        f"DROP FUNCTION IF EXISTS {_function(prefix, f'at_{event}')}() CASCADE"
        for event in _TRANSITIONS
    ]


def _changes_of(row: str, sign: int, source: str) -> str:
    """The changes of the rows ``row`` of ``source`` (``sign`` 1: as they are; -1: taken
    out) as ``(key, search_vector, pos, sign)``: each row's start, and its end (NULL while
    current, then left out)."""
    return (
        f"SELECT {row}.key, {row}.search_vector, {row}.valid_from AS pos, {sign} AS sign "
        f"{source} UNION ALL SELECT {row}.key, {row}.search_vector, {end_sql(row)}, {-sign} "
        f"{source}"
    )
