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
not their postings: the foreign key's cascade has deleted a deleted row's postings before an
``AFTER`` statement trigger runs, and the vector's lexemes are the entry's distinct terms
(the store writes one lexeme per term, :class:`~loom_memory.PostgresMemoryStore`), the same
set its postings hold.

Each trigger takes the key rows first, in key order, then the term rows in (key, term) order,
as the store's insert does: two writers of one key queue on the key's row and add to what the
other committed (``n = c.n + excluded.n`` under READ COMMITTED re-reads the row it waited for),
so the counts stay exact under concurrent writers.

:func:`position_triggers` keep the counts by position (:mod:`loom_memory.position_counts`,
ADR 0059) the same way, for every row an ``UPDATE`` or ``DELETE`` changes (ended or not),
after taking the key's lock (:func:`key_lock`).
"""

from __future__ import annotations

from loom_memory.position_counts import LEVELS_SQL, end_sql

_MOVED = "n.key IS DISTINCT FROM o.key"
_CHANGES = {
    "delete": "SELECT o.key, o.search_vector, -1 AS sign FROM old_rows o WHERE o.valid_to IS NULL",
    # A row's seq never changes (its postings refer to it): old and new rows pair by seq.
    "update": (
        "SELECT o.key, o.search_vector, -1 AS sign FROM old_rows o JOIN new_rows n "
        f"ON n.seq = o.seq WHERE o.valid_to IS NULL AND (n.valid_to IS NOT NULL OR {_MOVED}) "
        "UNION ALL SELECT n.key, n.search_vector, 1 FROM old_rows o JOIN new_rows n "
        f"ON n.seq = o.seq WHERE n.valid_to IS NULL AND (o.valid_to IS NOT NULL OR {_MOVED})"
    ),
}
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
        lexemes = f"{changed}, unnest(ch.search_vector) AS v"
        body = (
            f"INSERT INTO {rows} AS c (key, n) SELECT ch.key, sum(ch.sign) FROM {changed} "
            "GROUP BY ch.key HAVING sum(ch.sign) <> 0 ORDER BY ch.key "
            "ON CONFLICT (key) DO UPDATE SET n = c.n + excluded.n; "
            f"INSERT INTO {terms} AS c (key, term, df) SELECT ch.key, v.lexeme, sum(ch.sign) "
            f"FROM {lexemes} GROUP BY ch.key, v.lexeme HAVING sum(ch.sign) <> 0 "
            "ORDER BY ch.key, v.lexeme "
            "ON CONFLICT (key, term) DO UPDATE SET df = c.df + excluded.df; "
            f"DELETE FROM {terms} c USING (SELECT DISTINCT ch.key, v.lexeme FROM {lexemes}) d "
            "WHERE c.key = d.key AND c.term = d.lexeme AND c.df <= 0; "
            f"DELETE FROM {rows} c USING (SELECT DISTINCT ch.key FROM {changed}) d "
            "WHERE c.key = d.key AND c.n <= 0;"
        )
        statements += _statement_trigger(
            entries, _function(prefix, event), f"{entries}_count_{event}", event, body
        )
    return statements


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
    unchanged start cancel in the grouping. Buckets left at zero are deleted. Idempotent."""
    changed = (
        "o.key IS DISTINCT FROM n.key OR o.valid_from IS DISTINCT FROM n.valid_from "
        "OR o.valid_to IS DISTINCT FROM n.valid_to"
    )
    pairs = f"FROM old_rows o JOIN new_rows n ON n.seq = o.seq WHERE {changed}"
    events = {
        "delete": _changes_of("o", -1, "FROM old_rows o"),
        "update": f"{_changes_of('o', -1, pairs)} UNION ALL {_changes_of('n', 1, pairs)}",
    }
    statements = []
    for event, changes in events.items():
        fanned = f"({changes}) AS ch CROSS JOIN ({LEVELS_SQL}) AS l"
        lexemes = f"{fanned}, unnest(ch.search_vector) AS v"
        touched = "ch.key, l.level, ch.pos >> l.shift"
        body = (
            f"PERFORM {key_lock(prefix, 'd.key')} FROM (SELECT DISTINCT ch.key FROM "
            f"({changes}) AS ch ORDER BY ch.key) AS d; "
            f"INSERT INTO {rows} AS c (key, level, bucket, n) SELECT {touched}, sum(ch.sign) "
            f"FROM {fanned} WHERE ch.pos IS NOT NULL GROUP BY {touched} "
            f"HAVING sum(ch.sign) <> 0 ORDER BY {touched} "
            "ON CONFLICT (key, level, bucket) DO UPDATE SET n = c.n + excluded.n; "
            f"INSERT INTO {terms} AS c (key, level, term, bucket, df) SELECT ch.key, l.level, "
            f"v.lexeme, ch.pos >> l.shift, sum(ch.sign) FROM {lexemes} WHERE ch.pos IS NOT NULL "
            "GROUP BY 1, 2, 3, 4 HAVING sum(ch.sign) <> 0 ORDER BY 1, 2, 3, 4 "
            "ON CONFLICT (key, term, level, bucket) DO UPDATE SET df = c.df + excluded.df; "
            f"DELETE FROM {terms} c USING (SELECT DISTINCT ch.key, l.level, v.lexeme, "
            f"ch.pos >> l.shift AS bucket FROM {lexemes}) d WHERE c.key = d.key "
            "AND c.level = d.level AND c.term = d.lexeme AND c.bucket = d.bucket AND c.df = 0; "
            f"DELETE FROM {rows} c USING (SELECT DISTINCT {touched} AS bucket FROM {fanned}) d "
            "WHERE c.key = d.key AND c.level = d.level AND c.bucket = d.bucket AND c.n = 0;"
        )
        # Named to fire after the current counts' trigger of the same event (PostgreSQL fires
        # them in name order): that one takes the key's current count first, as an insert does.
        statements += _statement_trigger(
            entries, _function(prefix, f"at_{event}"), f"{entries}_count_{event}_at", event, body
        )
    return statements


def _statement_trigger(
    entries: str, function: str, trigger: str, event: str, body: str
) -> list[str]:
    """(Re)create ``function`` running ``body`` and the statement-level ``trigger`` calling it
    after each ``event`` on ``entries``, with the statement's rows as transition tables."""
    return [
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN {body} RETURN NULL; END $$",
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
