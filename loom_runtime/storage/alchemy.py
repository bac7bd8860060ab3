"""eventsourcing-sqlalchemy as the persistence, for either URL (``persistence="sqlalchemy"``).

Imported only when that persistence is chosen: the ``sqlalchemy`` extra. It keeps no hash
chain (``loom verify`` says so), and measured slower on the write path than the built-in
modules (docs/benchmarks.md), so it stays a configuration choice, not the default.
"""

from __future__ import annotations

from typing import Any

from eventsourcing_sqlalchemy.factory import Factory as SQLAlchemyFactory
from sqlalchemy import Engine, event

from loom_runtime.storage.forks import engine_renewed_in_child


class LoomSQLAlchemyFactory(SQLAlchemyFactory):
    """eventsourcing-sqlalchemy, with the same durability and lock-timeout settings as the
    built-in modules: it has no options for either, so they are set on each new connection."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        engine = self.datastore.engine
        if not isinstance(engine, Engine):
            return  # a caller-supplied session or connection keeps its own settings
        engine_renewed_in_child(engine)
        synchronous = self.env.get("LOOM_SQLITE_SYNCHRONOUS", "NORMAL")
        lock_timeout_ms = int(self.env.get("LOOM_LOCK_TIMEOUT_MS", "5000"))

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            if engine.dialect.name == "sqlite":
                cursor.execute(f"PRAGMA busy_timeout={lock_timeout_ms}")  # first: the next waits
                cursor.execute(f"PRAGMA synchronous={synchronous}")
            else:
                cursor.execute(f"SET lock_timeout = {lock_timeout_ms}")
            cursor.close()
