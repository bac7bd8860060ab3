"""A decision's ``meta`` is sealed with its value (ADR 0049, amended 2026-12-02 "erasurerev").

``ctx.decide(..., retry=...)`` records each retried attempt's exception message in the
decision's meta, and an exception message is what a flow's input ends up in ("cannot reach
the account of alice@example.com"). The final failure's message was sealed while the same text
in a retried attempt was stored in clear: in the log's rows, readable without the master key,
and still there after the execution was erased.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from loom_runtime import EncryptionOffError, ErasedError, FlowContext, Loom, MasterKey
from loom_runtime.backoff import Backoff

KEY = MasterKey(b"k" * 32)
NO_PAUSE = Backoff(attempts=3, first_pause=0.0, max_pause=0.0)
PLANTED = "PLANTED-7c1e-1-Main-St"


def _register(loom: Loom) -> None:
    @loom.flow("lookup")
    def lookup(ctx: FlowContext, address: str) -> str:
        calls: list[int] = []

        def compute() -> str:
            calls.append(1)
            if len(calls) == 1:
                raise TimeoutError(f"timed out looking up {address}")
            return "found"

        return ctx.decide("lookup", compute, retry=NO_PAUSE)


def _raw_bytes(path: Path) -> bytes:
    return b"".join(
        candidate.read_bytes()
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )


def test_a_retried_attempts_message_is_sealed_opened_for_the_key_and_erased(
    tmp_path: Path,
) -> None:
    path = tmp_path / "loom.db"
    url = f"sqlite:///{path}"
    with Loom(url, encryption=KEY) as loom:
        _register(loom)
        run = loom.run("lookup", address=PLANTED)
        meta = loom.execution(run.execution_id).decisions["lookup"].meta
        assert meta is not None
        [attempt] = msgspec.json.decode(meta)["attempts"]
        assert attempt["message"] == f"timed out looking up {PLANTED}"  # opened for the key
        assert loom.replay(run.execution_id).identical
        rows = loom.log.rows(run.execution_id)
        assert not any(PLANTED.encode() in row.state for row in rows)  # sealed in the log
    with Loom(url) as keyless, pytest.raises(EncryptionOffError):
        keyless.execution(run.execution_id)
    with Loom(url, encryption=KEY) as loom:
        loom.erase(execution=run.execution_id, reason="request", by="dpo")
        with pytest.raises(ErasedError):
            loom.execution(run.execution_id)
        assert loom.log.verify().problem is None
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.execute("VACUUM")
    connection.close()
    assert PLANTED.encode() not in _raw_bytes(path)
