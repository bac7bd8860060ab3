"""The audit of model calls that are not loom's grounded answering: a wrapped SDK client's and
an application's own ``kind="model"`` decision.

The audit guide promises "the exact request ..., the answer" of every model call. A
newcomer's review (6 December) found the text audit printed neither the input of a call whose
request is no grounded prompt nor the answer of any call whose value is no loom ``Answer``
(every wrapped client's), and the HTML page never the answer: the two facts an auditor opens
it for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from loom_knowledge.tools.audit import AuditedModelCall, audit
from loom_knowledge.tools.audit_render import render_html, render_text, returned
from loom_runtime import FlowContext, Loom, wrap
from replay_tests.capture.provider_server import ProviderServer
from replay_tests.deferred_import import deferred

if TYPE_CHECKING:
    import openai
else:
    openai = deferred("openai")

pytestmark = pytest.mark.xdist_group("provider-sdks")  # one worker imports the SDKs


def _before_outcome(text: str, marker: str) -> str:
    """The part of a rendering before its outcome (which holds the flow's output anyway)."""
    return text.split(marker)[0]


def test_an_own_model_decision_shows_what_it_was_asked_and_returned(tmp_path: Path) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:

        @loom.flow("own")
        def own(ctx: FlowContext, ticket: str) -> dict[str, str]:
            route = ctx.decide(
                "classify",
                lambda: "billing-desk",
                input={"prompt": f"Route: {ticket}"},
                kind="model",
            )
            return {"done": "yes", "echo": ticket if route else ""}

        report = audit(loom, str(loom.run("own", ticket="charged twice").execution_id))
    text = _before_outcome(render_text(report), "\noutput:")
    assert 'input: { "prompt": "Route: charged twice" }' in text
    assert "returned: billing-desk" in text
    page = _before_outcome(render_html(report), "Outcome:")
    assert "Route: charged twice" in page
    assert "billing-desk" in page


@pytest.mark.parametrize("stream", [False, True], ids=["reply", "stream"])
def test_a_wrapped_clients_answer_is_shown_as_its_message_text(
    tmp_path: Path, stream: bool
) -> None:
    """The stored reply is the provider's whole response (status, headers, body): the audit
    shows the text its message holds (a stream's assembled message), not 200 characters of
    headers."""
    with ProviderServer() as server, Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        client = wrap(openai.OpenAI(base_url=server.openai_url, api_key="sk-loopback"))

        @loom.flow("ask")
        def ask(ctx: FlowContext, question: str) -> str:
            messages: Any = [{"role": "user", "content": question}]
            if not stream:
                reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
                return f"length {len(reply.choices[0].message.content or '')}"
            chunks = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, stream=True
            )
            pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
            return f"length {len(''.join(pieces))}"

        report = audit(loom, str(loom.run("ask", question="why is the db slow?").execution_id))
    text = _before_outcome(render_text(report), "\noutput:")
    assert "returned: Echo: why is the db slow?" in text
    assert "Echo: why is the db slow?" in _before_outcome(render_html(report), "Outcome:")


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        (  # OpenAI chat: a tool call and no text
            {
                "choices": [
                    {
                        "message": {
                            "content": None,
                            "tool_calls": [
                                {"function": {"name": "lookup", "arguments": '{"q": "disk"}'}}
                            ],
                        }
                    }
                ]
            },
            'asks lookup({"q": "disk"})',
        ),
        (  # Anthropic: text, then a tool use
            {
                "type": "message",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "name": "lookup", "input": {"q": "disk"}},
                ],
            },
            'Checking.\nasks lookup({"q":"disk"})',
        ),
        (  # Responses: a function call item
            {"output": [{"type": "function_call", "name": "lookup", "arguments": "{}"}]},
            "asks lookup({})",
        ),
    ],
    ids=["chat", "anthropic", "responses"],
)
def test_a_reply_that_asks_for_a_tool_shows_the_call(reply: dict[str, Any], shown: str) -> None:
    """An agent's first model call usually answers with a tool call and no text: shown as
    the call it asks for, not as the reply's JSON cut at 200 characters."""
    stored = {"status": 200, "headers": [], "body": reply}
    call = AuditedModelCall(
        key="model",
        request=None,
        answer=None,
        citations=None,
        raw_input="{}",
        raw_output=msgspec.json.encode(stored).decode(),
    )
    assert returned(call) == shown
