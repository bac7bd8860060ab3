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
"""

from __future__ import annotations

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
        function, trigger = _function(prefix, event), f"{entries}_count_{event}"
        statements += [
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {body} RETURN NULL; END $$",
            f"DROP TRIGGER IF EXISTS {trigger} ON {entries}",
            f"CREATE TRIGGER {trigger} AFTER {event.upper()} ON {entries} "
            f"REFERENCING {_TRANSITIONS[event]} FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        ]
    return statements


def drop_count_triggers(prefix: str) -> list[str]:
    """Drop the trigger functions, and with them the triggers (the tables go with the store)."""
    return [f"DROP FUNCTION IF EXISTS {_function(prefix, event)}() CASCADE" for event in _CHANGES]


def _function(prefix: str, event: str) -> str:
    return f"{prefix}count_on_{event}"
