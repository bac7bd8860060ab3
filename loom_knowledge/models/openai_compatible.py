"""A :class:`~loom_knowledge.models.model.Model` over any OpenAI-compatible chat endpoint.

Standard library HTTP on purpose: the request shape is three fields, and an SDK would add a
dependency (and its retries and timeouts) to every install for a call loom records anyway. Use
it inside ``ctx.decide`` (``answer_from_corpus`` does), so the live call happens once and every
replay answers from the log.

The model is asked to reply with a JSON object ``{"answer": str, "cited_doc_ids": [str]}``
(one extra system message after the grounded request, and ``response_format`` json_object).
A reply that is not that shape is refused with :class:`ModelResponseError` rather than turned
into an answer with no citations.

Tool turns map both ways: the request's assistant and tool turns and its ``tools`` are sent in
the chat-completions shape, and a reply asking for tools (``tool_calls``) becomes an
:class:`Answer` carrying them (its text whatever content came with them, no citations: the
model has not answered yet). Usage and ``finish_reason`` are kept when the endpoint sends them.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from loom_knowledge.domain.grounding import (
    GroundedRequest,
    ToolCall,
    to_openai_messages,
    to_openai_tools,
)
from loom_knowledge.errors import ModelResponseError, ModelUnavailableError
from loom_knowledge.models.model import Answer, Usage

REPLY_FORMAT: Final = (
    'Reply with one JSON object: {"answer": "<your answer>", "cited_doc_ids": '
    '["<doc_id of every passage you used>"]}.'
)


class _Reply(msgspec.Struct):
    answer: str
    cited_doc_ids: list[str]


class _Function(msgspec.Struct):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct):
    id: str
    function: _Function


class _ChoiceMessage(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] = msgspec.field(default_factory=list)


class _Choice(msgspec.Struct):
    message: _ChoiceMessage
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int


class _Completion(msgspec.Struct):
    """The part of a chat completion this adapter reads; anything else is ignored."""

    choices: list[_Choice]
    usage: _Usage | None = None


@dataclass(frozen=True, kw_only=True)
class OpenAICompatibleModel:
    """Answers grounded requests through ``POST {base_url}/chat/completions``."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    """Sent as a bearer token; kept out of the repr, which logs and tracebacks show."""
    timeout: float = 60.0

    def answer(self, request: GroundedRequest) -> Answer:
        body = {
            "model": self.model,
            "messages": [*to_openai_messages(request), {"role": "system", "content": REPLY_FORMAT}],
            "response_format": {"type": "json_object"},
        }
        if request.tools:
            body["tools"] = to_openai_tools(request)
        completion = self._post("/chat/completions", body)
        cited: tuple[str, ...] = ()
        try:
            parsed = msgspec.convert(completion, type=_Completion)
            choice = parsed.choices[0]
            if choice.message.tool_calls:
                text = choice.message.content or ""
            else:
                reply = msgspec.json.decode(choice.message.content or "", type=_Reply)
                text, cited = reply.answer, tuple(reply.cited_doc_ids)
        except (IndexError, msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ModelResponseError(
                f"{self.base_url} did not reply with {REPLY_FORMAT!r} or tool calls: {exc}"
            ) from exc
        usage = parsed.usage
        return Answer(
            text=text,
            cited_doc_ids=cited,
            tool_calls=tuple(
                ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
                for call in choice.message.tool_calls
            ),
            usage=None
            if usage is None
            else Usage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens),
            finish_reason=choice.finish_reason,
        )

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        http_request = urllib.request.Request(
            self.base_url.rstrip("/") + path,
            data=json.dumps(body).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout) as response:
                data = response.read()
        except urllib.error.HTTPError as exc:
            raise ModelUnavailableError(
                f"{self.base_url} answered HTTP {exc.code}: {exc.read()[:300]!r}"
            ) from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            # Refused, timed out, closed without a reply, a body cut short, a garbled status
            # line: the endpoint could not be used (http.client's own errors escaped untyped).
            raise ModelUnavailableError(f"{self.base_url} could not be used: {exc!r}") from exc
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:
            # Not JSON, not UTF-8 (both ValueErrors), or nested past the parser's recursion
            # limit: the endpoint answered, but nothing that can be an answer.
            raise ModelResponseError(
                f"{self.base_url} replied with a body that is not JSON: {exc!s:.200}"
            ) from exc
