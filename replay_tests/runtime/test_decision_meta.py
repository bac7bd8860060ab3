"""A decision's ``meta``: what was measured while deciding, stored beside the value.

Stored only when given (events without it keep their exact bytes, so older rows and newer
rows of the same event class read the same), redacted like an input, and never compared by a
replay: a latency differs on every run.
"""

from __future__ import annotations

import msgspec
import sqlalchemy as sa

from loom_runtime import FlowContext, Loom, Redactor, current_context

SECRET = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34Yz56_-AbCdEf"


def _states(loom: Loom) -> list[dict[str, object]]:
    with loom.log.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT topic, state FROM stored_events ORDER BY rowid")
        ).fetchall()
    return [
        msgspec.json.decode(bytes(state))
        for topic, state in rows
        if topic.endswith("DecisionRecorded") or topic.endswith("DecisionFailed")
    ]


def test_meta_is_stored_beside_the_value_and_only_when_given(sqlite_url: str) -> None:
    with Loom(sqlite_url, redactor=Redactor()) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            plain = ctx.decide("plain", lambda: "v")
            context = current_context()
            assert context is not None
            opened = context.open_decision("measured", kind="model")
            opened.record("answer", meta={"latency_ms": 12.5, "note": f"key {SECRET}"})
            failing = context.open_decision("broken", kind="model")
            failing.fail(ValueError("boom"), meta={"attempts": 3})
            return plain

        run = loom.run("f")
        decisions = loom.execution(run.execution_id).decisions
        states = _states(loom)

    assert "meta" not in states[0], "a decision without meta keeps its exact stored bytes"
    assert msgspec.json.decode(decisions["measured"].meta or b"null") == {
        "latency_ms": 12.5,
        "note": "key sk-proj-[REDACTED:openai-key]",
    }
    assert msgspec.json.decode(decisions["broken"].meta or b"null") == {"attempts": 3}
    assert decisions["plain"].meta is None


def test_meta_is_not_compared_by_a_replay(sqlite_url: str) -> None:
    """Two runs measure different latencies: the replay is identical all the same."""
    latencies = iter([1.0, 999.0])

    with Loom(sqlite_url) as loom:

        @loom.flow("f")
        def f(ctx: FlowContext) -> str:
            context = current_context()
            assert context is not None
            opened = context.open_decision("call", kind="model")
            if opened.recorded:
                return str(opened.value)
            return str(opened.record("answer", meta={"latency_ms": next(latencies)}))

        run = loom.run("f")
        result = loom.replay(run.execution_id)

    assert result.identical, result.divergences
