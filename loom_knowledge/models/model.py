"""The model seam: a grounded request in, an answer with the doc ids it cites out.

The seam is a one-method protocol so a flow can be written, tested and replayed against
:class:`ExtractiveModel` (offline, deterministic, no keys) and pointed at a real provider later
without changing. The answer carries its citations as data, which is what lets
:func:`~loom_knowledge.domain.citations.assert_grounded` check them; and the tool calls it
asks for, the tokens it used and why it stopped, which is what a tool loop and an audit need.
Answers recorded before those existed decode with their defaults and encode to the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec

from loom_knowledge.domain.grounding import GroundedRequest, Message, ToolCall, unfence
from loom_knowledge.errors import InvalidOptionError

NO_ANSWER: Final = "The provided passages do not answer this question."

_TOKEN = re.compile(r"\w+")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_STOPWORDS: Final = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "i"}
    | {"if", "in", "is", "it", "of", "on", "or", "should", "the", "this", "to", "we", "what"}
    | {"when", "where", "which", "who", "why", "with", "you"}
)


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """The tokens a model call used, as the provider counted them."""

    input_tokens: int
    output_tokens: int


class Answer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A model's answer, the documents it claims to be based on, and the tools it asks for.

    ``tool_calls`` is set when the model asks for tools instead of (or before) answering;
    ``usage`` and ``finish_reason`` (``"stop"``, ``"tool_calls"``, ``"length"``) are the
    provider's, ``None`` when it did not say. Fields at their default are not encoded.
    """

    text: str
    cited_doc_ids: tuple[str, ...]
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None

    def to_message(self) -> Message:
        """This answer as the ``assistant`` turn of the next request's conversation."""
        if self.tool_calls:
            return Message(role="assistant", content=self.text, tool_calls=self.tool_calls)
        return Message(role="assistant", content=self.text)


class Model(Protocol):
    """Anything that answers a grounded request."""

    def answer(self, request: GroundedRequest) -> Answer: ...


def _terms(text: str) -> set[str]:
    return {token for token in _TOKEN.findall(text.lower()) if token not in _STOPWORDS}


@dataclass(frozen=True, kw_only=True)
class ExtractiveModel:
    """An offline model answering with the passage sentences that best match the question.

    Deterministic by construction (no randomness, ties broken by position in the request),
    so a test or demo can assert exact answers. It reads the request as a real model would:
    the question is the last user message without provenance, the passages are the
    messages with provenance,
    and it cites the documents of the sentences it used. It never invents a citation, which
    is exactly why it cannot exercise the citation check's failure path on its own.
    """

    max_sentences: int = 2

    def __post_init__(self) -> None:
        """Refused when built, not at the first answer: True was taken as 1, 1.5 failed
        slicing the ranked sentences, and "2" comparing with 1 (a TypeError)."""
        count = self.max_sentences
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidOptionError(f"max_sentences must be an int of at least 1, got {count!r}")

    def answer(self, request: GroundedRequest) -> Answer:
        questions = [
            m.content for m in request.messages if m.role == "user" and m.provenance is None
        ]
        question_terms = _terms(questions[-1]) if questions else set()
        scored: list[tuple[int, int, str, str]] = []
        for message in request.messages:
            if message.provenance is None:
                continue
            # Hard-wrapped text breaks lines mid-sentence, so whitespace is normalised first.
            body = " ".join(unfence(message.content).split())
            for sentence in _SENTENCE_BREAK.split(body):
                overlap = len(question_terms & _terms(sentence))
                if overlap:
                    scored.append((overlap, len(scored), sentence, message.provenance.doc_id))
        best = sorted(scored, key=lambda item: (-item[0], item[1]))[: self.max_sentences]
        if not best:
            return Answer(text=NO_ANSWER, cited_doc_ids=())
        in_request_order = sorted(best, key=lambda item: item[1])
        return Answer(
            text=" ".join(sentence for _, _, sentence, _ in in_request_order),
            cited_doc_ids=tuple(dict.fromkeys(doc_id for *_, doc_id in in_request_order)),
        )
