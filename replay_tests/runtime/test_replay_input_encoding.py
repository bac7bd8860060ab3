"""A replay recognises an input it recorded by its bytes instead of redacting it again.

Redacting a decision's input walks every string in it: for an agent that sends its whole
conversation with every model call that walk grows with the conversation and dominated a
replay's own time (the capture benchmark). Redaction is idempotent and the recorded bytes are
its output, so an input whose plain encoding equals the recorded bytes needs no redaction.
These tests prove the shortcut fires, and that it never lets a secret through or hides a
changed input.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loom_runtime import DecisionInputChangedError, FlowContext, Loom, Redactor

SECRET = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34Yz56_-AbCdEf"


class CountingRedactor(Redactor):
    """The built-in redactor, counting the decision inputs it redacts."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs = 0

    def raw(self, raw: msgspec.Raw, *, path: str) -> msgspec.Raw:
        if path.startswith("input of"):
            self.inputs += 1
        return super().raw(raw, path=path)


def _conversation_flow(loom: Loom, turns: list[str]) -> None:
    @loom.flow("chat")
    def chat(ctx: FlowContext) -> list[str]:
        messages: list[dict[str, Any]] = []
        for turn in turns:
            messages.append({"role": "user", "content": turn})
            reply = ctx.decide("model", lambda: f"ok {len(messages)}", input={"messages": messages})
            messages.append({"role": "assistant", "content": reply})
        return [m["content"] for m in messages]


def test_a_replay_redacts_no_input_it_recorded(sqlite_url: str) -> None:
    turns = [f"question {n}" for n in range(20)]
    with Loom(sqlite_url) as recording:
        _conversation_flow(recording, turns)
        run = recording.run("chat")

    redactor = CountingRedactor()
    with Loom(sqlite_url, redactor=redactor) as loom:
        _conversation_flow(loom, turns)
        result = loom.replay(run.execution_id)

    assert result.identical, result.describe()
    assert redactor.inputs == 0


def test_an_input_recorded_redacted_still_matches_and_is_redacted_again(sqlite_url: str) -> None:
    """The plain bytes hold the secret, the recording the marker: no shortcut, same verdict."""
    turns = ["hello", f"my key is {SECRET}"]
    with Loom(sqlite_url) as recording:
        _conversation_flow(recording, turns)
        run = recording.run("chat")

    redactor = CountingRedactor()
    with Loom(sqlite_url, redactor=redactor) as loom:
        _conversation_flow(loom, turns)
        result = loom.replay(run.execution_id)

    assert result.identical, result.describe()
    assert redactor.inputs == 1  # the second turn carries the secret: redacted, then matched


def test_a_changed_input_is_still_a_divergence(sqlite_url: str) -> None:
    with Loom(sqlite_url) as recording:
        _conversation_flow(recording, ["a", "b"])
        run = recording.run("chat")

    with Loom(sqlite_url) as loom:
        _conversation_flow(loom, ["a", "c"])
        result = loom.replay(run.execution_id)

    assert any(isinstance(d, DecisionInputChangedError) for d in result.divergences)
