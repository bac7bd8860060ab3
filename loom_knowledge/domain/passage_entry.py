"""How a passage is stored as a memory entry: its id, and the content the index sees (ADR 0007).

A store indexes the string and number leaves of an entry's content, so the shape a passage is
stored in decides what it matches. The doc id and the passage index are therefore kept OUT of
the content: the doc id would be a term matching every passage of its document, and the index
would make a search for "0" match the first passage of every document. The revision stays out
for the same reason (a search for "2" would match every second revision). They live in the entry
id, ``<doc_id>#<index>``, which stores must round-trip and never index, and the revision lives
in the manifest. Title and meta ARE content, and therefore searchable: a question is often
phrased in a title, and meta is the caller's own vocabulary.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import InvalidPassageIdError

_SEPARATOR = "#"


class PassageContent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The searchable content of a stored passage: text, and title and meta when present."""

    text: str
    title: str | None = None
    meta: dict[str, Any] | None = None


def format_passage_id(doc_id: str, index: int) -> str:
    """The entry id of passage ``index`` of ``doc_id``: ``<doc_id>#<index>``.

    Derived, never stored separately: a document's passage count is its list of entry ids.
    """
    if not doc_id or isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidPassageIdError(
            entry_id=f"{doc_id}{_SEPARATOR}{index}",
            reason="needs a non-empty doc id and an index >= 0",
        )
    return f"{doc_id}{_SEPARATOR}{index}"


def parse_passage_id(entry_id: str) -> tuple[str, int]:
    """Split an entry id into ``(doc_id, index)``, reading the index from the RIGHT.

    From the right because a doc id may itself contain ``#`` (``guide.md#install``), while
    the index never does. Only the exact form :func:`format_passage_id` writes is accepted
    (no sign, no leading zeros), so every accepted id round-trips to itself. Anything else is
    refused rather than read as a passage of some guessed document: a wrong doc id here would
    flow straight into a citation.
    """
    doc_id, separator, index = entry_id.rpartition(_SEPARATOR)
    if not separator:
        raise InvalidPassageIdError(entry_id=entry_id, reason=f"it has no {_SEPARATOR!r}")
    if not doc_id:
        raise InvalidPassageIdError(entry_id=entry_id, reason="the doc id is empty")
    if not (index.isascii() and index.isdigit()) or (len(index) > 1 and index[0] == "0"):
        raise InvalidPassageIdError(
            entry_id=entry_id, reason=f"{index!r} is not a canonical passage index"
        )
    return doc_id, int(index)


def passage_content(passage: Passage) -> PassageContent:
    """What is written to the index for ``passage``: never its doc id, index or revision."""
    return PassageContent(text=passage.text, title=passage.title, meta=passage.meta)


def passage_from_entry(*, entry_id: str, content: PassageContent, revision: int) -> Passage:
    """Rebuild a passage read from the index; ``revision`` comes from the manifest record.

    Raises :class:`InvalidPassageIdError` for an entry id that names no passage.
    """
    doc_id, index = parse_passage_id(entry_id)
    return Passage(
        doc_id=doc_id,
        index=index,
        text=content.text,
        title=content.title,
        meta=content.meta,
        revision=revision,
    )
