"""A framework's text splitter as a loom :class:`~loom_knowledge.Chunker`.

LangChain's splitters (``RecursiveCharacterTextSplitter``...) and LlamaIndex's node parsers
(``SentenceSplitter``...) both cut text with ``split_text(text) -> list[str]``; that method is
all loom needs, so one adapter serves both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from loom_knowledge.domain.types import Doc


class TextSplitter(Protocol):
    """What loom uses of a framework's splitter."""

    def split_text(self, text: str) -> list[str]: ...


@dataclass(frozen=True)
class SplitterChunker:
    """``open_knowledge_base(loom, scope, chunker=SplitterChunker(splitter))``.

    Equal chunkers wrap the same splitter object, so reopening a scope with the chunker it
    was opened with is accepted and with another splitter refused (a corpus cut two ways
    would only show as worse retrieval). Blank pieces are dropped: they match nothing.
    """

    splitter: TextSplitter

    def __call__(self, doc: Doc) -> list[str]:
        return [text for text in self.splitter.split_text(doc.text) if text.strip()]
