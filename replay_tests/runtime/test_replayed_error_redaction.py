"""A flow's own error message is compared as it was stored: redacted (ADR 0012, amended).

A flow raising with a secret its code adds (a DSN from configuration, with its password)
was recorded with the message redacted, and its faithful replay compared the recorded
message with the raw one: "not identical", and the verdict printed the secret redaction had
kept out of the log. A changed message still diverges (the control).
"""

from __future__ import annotations

from typing import Any

import pytest

from loom_runtime import Loom, OutcomeChangedError

PASSWORD = "hunter2-Zq8v"


def build(url: str, table: str = "orders") -> Loom:
    loom = Loom(url)

    @loom.flow("connect")
    def connect(ctx: Any) -> None:
        ctx.decide("probe", lambda: "down")
        raise ConnectionError(f"could not reach postgresql://app:{PASSWORD}@db/prod for {table}")

    return loom


def test_a_faithful_replay_of_a_failure_holding_a_secret_is_identical(sqlite_url: str) -> None:
    with build(sqlite_url) as loom:
        with pytest.raises(ConnectionError):
            loom.run("connect")
        [summary] = loom.executions()
        recorded = loom.execution(summary.execution_id).error
        assert recorded is not None and PASSWORD not in recorded[1]  # stored redacted
        result = loom.replay(summary.execution_id)
    assert result.identical, result.describe()


def test_a_changed_message_still_diverges_without_showing_the_secret(sqlite_url: str) -> None:
    with build(sqlite_url) as loom:
        with pytest.raises(ConnectionError):
            loom.run("connect")
        [summary] = loom.executions()
    with build(sqlite_url, table="invoices") as changed:
        result = changed.replay(summary.execution_id)
    [finding] = result.divergences
    assert isinstance(finding, OutcomeChangedError)
    assert "invoices" in finding.replayed
    assert PASSWORD not in result.describe()


def test_a_refusing_redactor_withholds_the_message_naming_its_pattern() -> None:
    """In refuse mode the replayed message is withheld, named by the secret's pattern (never
    by its value), as a span's is (``redaction.as_stored``)."""
    from loom_runtime.redaction import Redactor, as_stored

    refusing = Redactor(mode="refuse")
    shown = as_stored(refusing, f"could not reach postgresql://app:{PASSWORD}@db/prod", path="x")
    assert PASSWORD not in shown and shown.startswith("[withheld: it holds a ")
