"""A sealed append racing its key's destruction: it commits first (and is erased with the
rest), or it waits for the destruction and is refused, never stored under the destroyed key
(ADR 0049, amended "row lock").

The append reads "key still live" in its own transaction (a ``Precondition``). On SQLite
that read waits for the database's one write lock, which the destroying transaction holds.
On PostgreSQL it was a plain ``SELECT``: it read the last committed row without waiting for
an uncommitted ``UPDATE`` that was destroying the key, so the append committed after the
destruction, under a key nobody holds, and the write reported success. The read now takes
the row's share lock (``FOR SHARE``): it waits for the destroying transaction, then reads
the key gone.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_engine, text

from loom_runtime import FlowContext, Loom, MasterKey, SubjectErasedError

KEY = MasterKey(b"r" * 32)


@pytest.mark.waits  # the flow is given 1 s to reach the key row
def test_an_append_waits_for_its_key_being_destroyed_and_is_refused(db_url: str) -> None:
    ready, go = threading.Event(), threading.Event()
    started: dict[str, str] = {}
    outcome: dict[str, object] = {}
    with Loom(db_url, encryption=KEY) as loom:

        @loom.flow("two")
        def two(ctx: FlowContext, n: int) -> int:
            ctx.decide("first", lambda: n)
            started["subject"] = f"execution:{ctx.execution_id}"
            ready.set()
            go.wait(30)
            return ctx.decide("second", lambda: n + 1)

        def run() -> None:
            try:
                outcome["run"] = loom.run("two", n=1)
            except BaseException as exc:  # the refusal is what the test looks for
                outcome["error"] = exc

        flow = threading.Thread(target=run)
        flow.start()
        assert ready.wait(30)
        engine = create_engine(db_url)
        try:
            with engine.connect() as conn:
                destroying = conn.begin()
                conn.execute(
                    text(
                        "UPDATE loom_subject_keys SET wrapped_key = NULL, erased_position = 999"
                        " WHERE subject = :subject"
                    ),
                    {"subject": started["subject"]},
                )
                go.set()
                flow.join(1)  # the append reaches the key row while it is being destroyed
                destroying.commit()
        finally:
            engine.dispose()
        flow.join(30)
    assert not flow.is_alive()
    assert isinstance(outcome.get("error"), SubjectErasedError), outcome
