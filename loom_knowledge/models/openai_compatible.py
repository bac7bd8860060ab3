"""A :class:`~loom_knowledge.models.model.Model` over any OpenAI-compatible chat endpoint.

Standard library HTTP on purpose: the request shape is three fields, and an SDK would add a
dependency (and its retries and timeouts) to every install for a call loom records anyway. Use
it inside ``ctx.decide`` (``answer_from_corpus`` does), so the live call happens once and every
replay answers from the log.

The model is asked to reply with a JSON object ``{"answer": str, "cited_doc_ids": [str]}``
(one extra system message after the grounded request, and ``response_format`` json_object).
A reply that is not that shape is refused with :class:`ModelResponseError` rather than turned
into an answer with no citations.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from loom_knowledge.domain.grounding import GroundedRequest, to_openai_messages
from loom_knowledge.errors import ModelResponseError, ModelUnavailableError
from loom_knowledge.models.model import Answer

REPLY_FORMAT: Final = (
    'Reply with one JSON object: {"answer": "<your answer>", "cited_doc_ids": '
    '["<doc_id of every passage you used>"]}.'
)


class _Reply(msgspec.Struct):
    answer: str
    cited_doc_ids: list[str]


@dataclass(frozen=True, kw_only=True)
class OpenAICompatibleModel:
    """Answers grounded requests through ``POST {base_url}/chat/completions``."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0

    def answer(self, request: GroundedRequest) -> Answer:
        body = {
            "model": self.model,
            "messages": [*to_openai_messages(request), {"role": "system", "content": REPLY_FORMAT}],
            "response_format": {"type": "json_object"},
        }
        completion = self._post("/chat/completions", body)
        try:
            content = completion["choices"][0]["message"]["content"]
            reply = msgspec.json.decode(content, type=_Reply)
        except (KeyError, IndexError, TypeError, msgspec.DecodeError) as exc:
            raise ModelResponseError(
                f"{self.base_url} did not reply with {REPLY_FORMAT!r}: {exc}"
            ) from exc
        return Answer(text=reply.answer, cited_doc_ids=tuple(reply.cited_doc_ids))

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
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise ModelUnavailableError(
                f"{self.base_url} answered HTTP {exc.code}: {exc.read()[:300]!r}"
            ) from exc
        except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as exc:
            raise ModelUnavailableError(f"{self.base_url} could not be used: {exc}") from exc
