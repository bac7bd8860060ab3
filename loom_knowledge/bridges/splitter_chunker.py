"""A framework's text splitter as a loom :class:`~loom_knowledge.Chunker`.

LangChain's splitters (``RecursiveCharacterTextSplitter``...) and LlamaIndex's node parsers
(``SentenceSplitter``...) both cut text with ``split_text(text) -> list[str]``; that method is
all loom needs, so one adapter serves both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from loom_knowledge.domain.chunking import storable_passages
from loom_knowledge.domain.types import Doc
from loom_knowledge.errors import InvalidDocumentError

_CLASS_CHARS: Final = 150
"""The most of a splitter's class path kept in an identity (the limit is 200 characters)."""


class TextSplitter(Protocol):
    """What loom uses of a framework's splitter."""

    def split_text(self, text: str) -> list[str]: ...


@dataclass(frozen=True)
class SplitterChunker:
    """``open_knowledge_base(loom, scope, chunker=SplitterChunker(splitter))``.

    Equal chunkers wrap the same splitter object, so reopening a scope with the chunker it
    was opened with is accepted and with another splitter refused (a corpus cut two ways
    would only show as worse retrieval). Blank pieces are dropped: they match nothing. What
    is not a list (or tuple, or iterator) of texts is refused, naming the document.
    """

    splitter: TextSplitter

    @property
    def identity(self) -> str:
        """The splitter's class and a digest of its settings, recorded with every document it
        cut: a scope reopened (by another process) with a splitter of another class or
        settings cuts its documents again at the next sync, as with any chunker that has an
        identity (:func:`~loom_knowledge.domain.fingerprint.fingerprinter_for`).

        The settings are the splitter's attributes (LangChain keeps ``_chunk_size``,
        ``_separators``... there; a LlamaIndex parser, a pydantic model, its fields): plain
        values as they are, a function or class by its qualified name, any other object by
        its type only. So what a splitter holds elsewhere (a LlamaIndex parser's private
        tokenizer) or in an object of the same type is not told apart (ADR 0041).
        """
        kind = type(self.splitter)
        name = f"{kind.__module__}.{kind.__qualname__}"[-_CLASS_CHARS:]
        try:
            attributes: Mapping[str, Any] = vars(self.splitter)
        except TypeError:  # no __dict__ (slots, a C type): its class is all that is known
            attributes = {}
        settings = json.dumps(_setting(attributes), sort_keys=True, ensure_ascii=True)
        digest = hashlib.sha256(settings.encode()).hexdigest()[:16]
        return f"split_text:{name}:{digest}"

    def __call__(self, doc: Doc) -> list[str]:
        pieces = self.splitter.split_text(doc.text)
        if not isinstance(pieces, list | tuple | Iterator):
            # A str would be cut per character, a set in hash order; None is no answer.
            raise InvalidDocumentError(
                doc_id=doc.id,
                field="passages",
                reason=(
                    f"are a {type(pieces).__name__} from {type(self.splitter).__name__}"
                    ".split_text, not a list of str"
                ),
            )
        return [text for text in storable_passages(doc, pieces) if text.strip()]


def _setting(value: object) -> object:
    """``value`` as JSON that is the same in every process: no object address, no hash
    order."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_setting(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((_setting(item) for item in value), key=json.dumps)
    if isinstance(value, Mapping):
        # A key is a setting too: str() of an object key holds its address, new each process.
        return {json.dumps(_setting(key)): _setting(item) for key, item in value.items()}
    qualname = getattr(value, "__qualname__", None)
    if isinstance(qualname, str):  # a function, method or class: its name
        return f"{getattr(value, '__module__', None)}.{qualname}"
    return f"<{type(value).__module__}.{type(value).__qualname__}>"
