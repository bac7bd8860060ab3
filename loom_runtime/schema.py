"""Schema changes that many processes may attempt at once.

"Create if missing" is check-then-create, and PostgreSQL fails the loser of two concurrent
creators (``UniqueViolation`` on ``pg_type``, "tuple concurrently updated" on a function).
Workers starting together all create on first use, so every schema change loom makes takes one
advisory lock first. SQLite needs none: its writers are already serialised.
"""

from __future__ import annotations

from sqlalchemy import Connection

DDL_LOCK_KEY = 0x6C6F6F6D
"""The advisory lock key ("loom") every schema change of loom takes on PostgreSQL."""


def serialise_ddl(conn: Connection) -> None:
    """Make the rest of this transaction's schema changes wait for any other process's."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({DDL_LOCK_KEY})")
