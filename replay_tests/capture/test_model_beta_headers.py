"""A model call's beta-feature header is part of what its replay compares (ADR 0025, amended
"beta headers").

A wrapped client's request is compared by its JSON body alone. ``anthropic-beta`` (a 1M
context, interleaved thinking) and ``openai-beta`` switch features that change the answer,
and are sent as headers: code asking another beta feature replayed the recorded answer as
identical (an attack review). They are compared now, beside the body; a call without one is
compared by its body alone, as before, so its recording keeps its input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_runtime import DecisionInputChangedError, Loom, wrap
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import anthropic
else:
    anthropic = deferred("anthropic")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs

SAID: Any = [{"role": "user", "content": "hi"}]


def build(db: str, beta: str | None) -> Loom:
    loom = Loom(db)

    @loom.flow("ask")
    def ask(ctx: Any, url: str) -> str:
        client = wrap(anthropic.Anthropic(base_url=url, api_key="sk-ant-test"))
        headers = {} if beta is None else {"anthropic-beta": beta}
        reply = client.messages.create(
            model="claude-x", max_tokens=16, messages=SAID, extra_headers=headers
        )
        return reply.content[0].text  # type: ignore[union-attr]

    return loom


@pytest.mark.parametrize(
    ("recorded", "asked", "identical"),
    [
        ("context-1m-2025-08-07", "interleaved-thinking-2025-05-14", False),
        ("context-1m-2025-08-07", None, False),
        ("context-1m-2025-08-07", "context-1m-2025-08-07", True),  # the control
        (None, None, True),  # the control: no beta header, the body alone as before
    ],
)
def test_a_changed_beta_header_diverges(
    provider: ProviderServer,
    sqlite_url: str,
    recorded: str | None,
    asked: str | None,
    identical: bool,
) -> None:
    with build(sqlite_url, recorded) as loom:
        run = loom.run("ask", url=provider.anthropic_url)
        [decision] = loom.execution(run.execution_id).decisions.values()
    stored = msgspec.json.decode(decision.input)
    if recorded is None:
        assert stored == {"max_tokens": 16, "messages": SAID, "model": "claude-x"}
    else:
        assert stored["headers"] == {"anthropic-beta": recorded}
    provider.stop()
    with build(sqlite_url, asked) as fresh:
        result = fresh.replay(run.execution_id)
    assert result.identical is identical, result.describe()
    if not identical:
        assert [type(d) for d in result.divergences][:1] == [DecisionInputChangedError]
