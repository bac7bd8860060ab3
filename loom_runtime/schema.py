"""Schema changes that many processes may attempt at once.

"Create if missing" is check-then-create, and PostgreSQL fails the loser of two concurrent
creators (``UniqueViolation`` on ``pg_type``, "tuple concurrently updated" on a function).
Workers starting together all create on first use, so every schema change loom makes takes one
advisory lock first. On SQLite the lock is the database's write lock, taken before the catalog is
read again: a log's engine holds it from ``BEGIN IMMEDIATE`` on, but pysqlite's default runs DDL
outside any transaction (it begins one only before INSERT, UPDATE or DELETE), so two stores
opened from one new file's URL both found a table missing and the later one failed with "table
... already exists".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Table

DDL_LOCK_KEY = 0x6C6F6F6D
"""The advisory lock key ("loom") every schema change of loom takes on PostgreSQL."""


def serialise_ddl(conn: Connection) -> None:
    """Make the rest of this transaction's schema changes wait for any other process's.

    On SQLite this begins a write transaction when the driver has none open (pysqlite's
    default), so the DDL that follows commits or rolls back whole with the caller's
    transaction; a deferred transaction the driver has already begun is left as it is.
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({DDL_LOCK_KEY})")
    elif conn.dialect.name == "sqlite" and not conn.connection.driver_connection.in_transaction:  # type: ignore[union-attr]
        conn.exec_driver_sql("BEGIN IMMEDIATE")


# One statement per backend: every named object of the schema, and each table's primary-key
# columns in key order (NULL for an object without one); on PostgreSQL its functions too, with
# their source. On PostgreSQL "the schema" is what the search path makes visible, as for
# SQLAlchemy's ``has_table`` and for loom's queries; functions are read from the search path's
# schemas by name, since ``pg_function_is_visible`` over every function made the query 25 ms.
# A key column's name is looked up by its index on pg_attribute: joined, the planner hashed all
# of pg_attribute (thousands of rows) for a few dozen keys, 1.5 ms a read against 0.9 ms.
# ``indkey`` (numbered from 0) lists the key's columns, then those it INCLUDEs: the first
# ``indnkeyatts`` are the key.
_CATALOG = {
    "postgresql": (
        "SELECT c.relname, CASE WHEN c.relkind IN ('r', 'p', 'f', 'v', 'm') THEN 'table' "
        "ELSE 'index' END, NULL, "
        "(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = k.attnum), "
        "k.n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
        "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
        "LEFT JOIN LATERAL unnest((i.indkey::int2[])[0:i.indnkeyatts - 1]) "
        "WITH ORDINALITY AS k(attnum, n) ON true "
        "WHERE pg_table_is_visible(c.oid) AND s.nspname <> 'pg_catalog' "
        "AND c.relkind IN ('r', 'p', 'f', 'v', 'm', 'i', 'I') "
        "UNION ALL SELECT p.proname, 'function', p.prosrc, NULL, NULL "
        "FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace "
        "WHERE s.nspname = ANY(current_schemas(false)) AND s.nspname <> 'pg_catalog' "
        "ORDER BY 1, 5"
    ),
    "sqlite": (
        "SELECT m.name, m.type, m.sql, p.name, p.pk FROM sqlite_master AS m "
        "LEFT JOIN pragma_table_info(m.name) AS p ON m.type = 'table' AND p.pk > 0 "
        "ORDER BY m.name, p.pk"
    ),
}


@dataclass(frozen=True)
class SchemaCatalog:
    """What a database's schema holds, read in one query by :func:`read_catalog`.

    Opening a store used to ask once per table (SQLAlchemy's ``create_all(checkfirst=True)``
    and ``has_table``) and reflect a primary key: on PostgreSQL a dozen round trips per open
    of an up-to-date schema, where one query answers all of them (ADR 0054).
    """

    tables: frozenset[str]
    """Tables and views (what ``create_all`` would find and not create)."""
    objects: Mapping[str, str | None]
    """Every named object (tables, indexes; on SQLite triggers too), with the statement that
    created it where the database keeps it verbatim (SQLite), else None."""
    primary_keys: Mapping[str, tuple[str, ...]]
    """Each table's primary-key columns, in key order."""
    functions: Mapping[str, str]
    """PostgreSQL's functions (SQLite has none), each with its source as the server keeps it
    (``pg_proc.prosrc``: a PL/pgSQL function's body between its dollar quotes). A release that
    changes a trigger's body changes no table, so an open compares the bodies to find it."""


def read_catalog(conn: Connection) -> SchemaCatalog:
    """The schema of ``conn``'s database (on PostgreSQL the relations its search path makes
    visible), in one query."""
    tables: set[str] = set()
    objects: dict[str, str | None] = {}
    keys: dict[str, tuple[str, ...]] = {}
    functions: dict[str, str] = {}
    for name, kind, sql, column, _ in conn.exec_driver_sql(_CATALOG[conn.dialect.name]):
        if kind == "function":
            functions[name] = sql
            continue
        objects[name] = sql
        if kind == "table":
            tables.add(name)
        if column is not None:
            keys[name] = (*keys.get(name, ()), column)
    return SchemaCatalog(frozenset(tables), objects, keys, functions)


def create_missing(conn: Connection, tables: Sequence[Table]) -> set[str]:
    """Create those of ``tables`` the database lacks (with their indexes); their names.

    The catalog is read once; only when a table is missing does this take the DDL lock
    (:func:`serialise_ddl`) and read it again, since another process may have created it
    meanwhile. An up-to-date schema costs one query and no lock.
    """
    existing = read_catalog(conn).tables
    if all(table.name in existing for table in tables):
        return set()
    serialise_ddl(conn)
    existing = read_catalog(conn).tables
    missing = [table for table in tables if table.name not in existing]
    for metadata in {id(table.metadata): table.metadata for table in missing}.values():
        mine = [table for table in missing if table.metadata is metadata]
        metadata.create_all(conn, tables=mine, checkfirst=False)
    return {table.name for table in missing}
