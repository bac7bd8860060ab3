"""SQLite's query plans of the statements an action runs: how a test reads which index a
search used, where its answer (joined back to the rows) could not tell."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, event

T = TypeVar("T")


def sqlite_plans(engine: Engine, marker: str, action: Callable[[], T]) -> tuple[T, list[str]]:
    """What ``action()`` returned, and the ``EXPLAIN QUERY PLAN`` of each statement it ran on
    ``engine`` holding ``marker``, its steps joined by `` | ``, in the order they ran."""
    ran: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if marker in statement:
            ran.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        result = action()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    with engine.connect() as conn:
        plans = [
            " | ".join(
                row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", parameters)
            )
            for sql, parameters in ran
        ]
    return result, plans
