"""How a document is cut into passages: the :class:`Chunker` seam and its default.

How a document splits is a property of the corpus and most of retrieval quality, so the
default here is deliberately plain and meant to be replaced for structured text. What it does
guarantee is the part that must not vary: no text is ever dropped, and no passage is longer
than the limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from loom_knowledge.domain.types import Doc, Passage
from loom_knowledge.errors import InvalidDocumentError, InvalidOptionError
from loom_runtime import text_problem

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s)")
_PARAGRAPH_JOIN = "\n\n"


class Chunker(Protocol):
    """Cuts a document into the texts of its passages, in reading order.

    A chunker may return no texts for a document with nothing to search; such a document is
    still listed in the manifest, so it can still be revised and removed.

    A chunker that has an ``identity`` attribute (a short ``str`` naming how it cuts, as
    ``pack_paragraphs(500)`` does) is recorded with every document it cut: a scope opened with
    a chunker of another identity writes its documents again, cut by it, at the next sync
    (:func:`~loom_knowledge.domain.fingerprint.fingerprinter_for`). One without (a plain
    function) cannot be told from another.
    """

    def __call__(self, doc: Doc) -> Sequence[str]: ...


def _cut_point(text: str, max_chars: int) -> int:
    """Where to end the next piece of an over-long paragraph (``0 < cut <= max_chars``).

    Prefers the last sentence end in the second half of the window (earlier ones would make
    stubby passages), then the last whitespace, then a hard cut: a 5,000-character URL or
    base64 blob still has to be stored somewhere.
    """
    window = text[: max_chars + 1]
    sentence_cuts = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() <= max_chars]
    if sentence_cuts and sentence_cuts[-1] >= max_chars // 2:
        return sentence_cuts[-1]
    space = max((i for i, char in enumerate(window) if char.isspace()), default=0)
    return space if space > 0 else max_chars


def _split_long(paragraph: str, max_chars: int) -> list[str]:
    """Split a paragraph longer than the limit into pieces within it, losing no text.

    Walks an offset and hands each cut only its window: slicing off the rest after every cut
    copied it, quadratic in the paragraph's length (a 16 MiB paragraph took 31 s)."""
    pieces: list[str] = []
    start, end = 0, len(paragraph)
    while end - start > max_chars:
        cut = _cut_point(paragraph[start : start + max_chars + 1], max_chars)
        pieces.append(paragraph[start : start + cut].rstrip())
        start += cut
        while start < end and paragraph[start].isspace():  # what lstrip() dropped
            start += 1
    if start < end:
        pieces.append(paragraph[start:])
    return pieces


@dataclass(frozen=True, kw_only=True)
class ParagraphPacker:
    """The default chunker: split on blank lines, then pack paragraphs greedily up to a limit.

    Whitespace-only text gives ZERO passages, not one empty passage: an empty passage would
    be an entry that answers nothing yet matches on its title and can be cited. Whitespace
    at paragraph edges is not kept; everything else is, in order. Two packers with the same
    limit compare equal, so "opened again with the same options" is decidable.
    """

    max_chars: int

    @property
    def identity(self) -> str:
        """How this packer cuts, recorded with the documents it cut (see :class:`Chunker`)."""
        return f"pack_paragraphs({self.max_chars})"

    def __post_init__(self) -> None:
        max_chars = self.max_chars
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise InvalidOptionError(
                f"max_chars must be a positive int, got {max_chars!r}; "
                "it is the longest passage, in characters"
            )

    def __call__(self, doc: Doc) -> list[str]:
        pieces = [
            piece
            for paragraph in _BLANK_LINE.split(doc.text.replace("\r\n", "\n"))
            if (stripped := paragraph.strip())
            for piece in _split_long(stripped, self.max_chars)
        ]
        passages: list[str] = []
        for piece in pieces:
            if passages and len(passages[-1]) + len(_PARAGRAPH_JOIN) + len(piece) <= self.max_chars:
                passages[-1] += _PARAGRAPH_JOIN + piece
            else:
                passages.append(piece)
        return passages


def pack_paragraphs(max_chars: int = 1000) -> ParagraphPacker:
    """The default :class:`Chunker`; ``max_chars`` is the longest passage, in characters."""
    return ParagraphPacker(max_chars=max_chars)


def to_passages(doc: Doc, *, revision: int, chunker: Chunker) -> list[Passage]:
    """Cut ``doc`` into the passages stored for its ``revision``, indexed from 0."""
    return [
        Passage(
            doc_id=doc.id,
            index=index,
            text=text,
            title=doc.title,
            meta=doc.meta,
            revision=revision,
        )
        for index, text in enumerate(chunker(doc))
    ]


def storable_passages(doc: Doc, texts: Iterable[object]) -> list[str]:
    """``texts``, a chunker's cut of ``doc``, as a write stores them; or
    :class:`InvalidDocumentError` naming the first the corpus index could not hold.

    A chunker is the application's code, and its passages go into the log before the index
    applies them: a passage that is not text, or holds a NUL or a lone surrogate, would be
    refused by the index after the append, and the event would stop every scope of the log
    for good. (Its search terms' size is the index's to check: :func:`~loom_knowledge.corpus.
    knowledge_base.check_passage_terms`.)
    """
    passages: list[str] = []
    for index, text in enumerate(texts):
        field = f"passages[{index}]"
        if not isinstance(text, str):
            raise InvalidDocumentError(
                doc_id=doc.id, field=field, reason=f"is a {type(text).__name__}, not a str"
            )
        problem = text_problem(text)
        if problem is not None:
            raise InvalidDocumentError(doc_id=doc.id, field=field, reason=problem)
        passages.append(text)
    return passages
