"""A read-only PostgreSQL URL (a hot standby, or ``default_transaction_read_only``) serves the
commands that only read (ADR 0015, amended 2026-12-05 "read-only").

Opening the log ran its schema's DDL every time (``CREATE TYPE``, ``CREATE TABLE IF NOT
EXISTS``, the append functions), and a read-only transaction refuses DDL: every command,
``loom verify`` and ``executions show`` included, failed with eventsourcing's traceback.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import make_url

from loom_runtime import ConfigurationError, Loom

pytestmark = pytest.mark.postgres


def _read_only(url: str) -> str:
    return (
        make_url(url)
        .update_query_dict({"options": "-cdefault_transaction_read_only=on"})
        .render_as_string(hide_password=False)
    )


def test_a_read_only_url_reads_a_log_that_is_there(pg_url: str) -> None:
    with Loom(pg_url) as loom:

        @loom.flow("f")
        def f(ctx: Any) -> int:
            return int(ctx.decide("d", lambda: 2))

        run = loom.run("f")
    with Loom(_read_only(pg_url)) as replica:
        assert [s.execution_id for s in replica.executions()] == [run.execution_id]
        assert replica.execution(run.execution_id).output is not None
        assert replica.log.verify().ok


def test_a_read_only_url_without_a_log_says_so(pg_url: str) -> None:
    with Loom(_read_only(pg_url)) as replica, pytest.raises(ConfigurationError, match="read-only"):
        replica.executions()
