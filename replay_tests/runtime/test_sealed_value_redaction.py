"""A sealed execution's values are redacted before they are sealed (ADR 0012 with ADR 0049).

The log's own redaction pass stores a sealed field unread (``mapper.holds_no_text``): its
ciphertext hides every secret from every pattern, so the guarantee rests on the codec having
redacted each value as it was encoded, before the sealer saw it. These tests pin that for
every sealed JSON field a flow writes: its input, a decision's value and input, its output.
"""

from __future__ import annotations

import msgspec

from loom_runtime import FlowContext, Loom, MasterKey

KEY = MasterKey(b"r" * 32)
SECRET = "AKIAIOSFODNN7EXAMPLE"


def _echo(ctx: FlowContext, text: str) -> str:
    seen = ctx.decide("value", lambda: {"note": f"key {text} in use"})
    ctx.decide("asked", lambda: "done", input={"about": text})
    return str(seen["note"])


def test_a_secret_in_a_sealed_value_input_or_output_is_redacted_before_it_is_sealed(
    db_url: str,
) -> None:
    """Opened with the key, every sealed field holds the redaction, never the secret."""
    with Loom(db_url, encryption=KEY) as loom:
        loom.flow("echo")(_echo)
        run = loom.run("echo", text=SECRET)
        rows = loom.log.rows(run.execution_id)
        execution = loom.execution(run.execution_id)
    assert all(b"loom.sealed" in row.state for row in rows)  # sealed, then
    opened = [
        bytes(execution.input),
        bytes(execution.decisions["value"].value),
        bytes(execution.decisions["asked"].input),
        bytes(execution.output or b""),
    ]
    assert all(SECRET.encode() not in field for field in opened), opened
    assert all(b"[REDACTED" in field for field in opened), opened
    assert msgspec.json.decode(execution.decisions["asked"].value) == "done"
