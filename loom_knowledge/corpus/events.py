"""The corpus events: every ingest, removal and reconcile is one of these in the log.

One stream per scope (``knowledge:<scope>``), so writers of one corpus are ordered by the
stream's version and a stale writer is refused instead of interleaving. A reconcile appends its
document events *and* its :class:`CorpusReconciled` record in one transaction: the log never
holds half a sync.

A :class:`DocumentWritten` carries the passages exactly as the chunker cut them. A rebuild
therefore reproduces the index passage for passage even if the chunker's code changes later;
re-chunking is a new write, never a silent difference between two rebuilds.

A scope created with a stemmer opens its stream with :class:`TokenizerChosen`, in the same
append as its first write, so a rebuild, an as-of view or another process indexes and searches
it with that stemmer without being told. A scope whose stream has none is plain, as every
scope written before stemming existed is.

Scopes, document ids and sources are ``IDENTIFIERS``: never redacted (a redacted id would
re-issue revision 1 of another document), refused at the boundary if they hold a secret.
"""

from __future__ import annotations

from typing import Any

from loom_runtime import LogEvent

_TOPIC = "loom.knowledge"


class DocumentWritten(LogEvent):
    """A document revision was ingested; its passages supersede the previous revision's."""

    TOPIC = f"{_TOPIC}.DocumentWritten"
    IDENTIFIERS = ("scope", "doc_id", "fingerprint", "fingerprint_algorithm", "source")
    SEALED = ("title", "passages")  # under the document's key (ADR 0055)
    scope: str
    doc_id: str
    revision: int
    fingerprint: str
    fingerprint_algorithm: str
    source: str | None
    title: str | None
    meta: dict[str, Any] | None
    passages: list[str]


class DocumentRemoved(LogEvent):
    """A document was removed; ``revision`` is the revision that stopped being current."""

    TOPIC = f"{_TOPIC}.DocumentRemoved"
    IDENTIFIERS = ("scope", "doc_id", "source")
    scope: str
    doc_id: str
    revision: int
    source: str | None


class CorpusReconciled(LogEvent):
    """A sync ran: what it wrote, found unchanged, removed and retained (other sources')."""

    TOPIC = f"{_TOPIC}.CorpusReconciled"
    IDENTIFIERS = ("scope", "source", "written", "unchanged", "removed", "retained")
    scope: str
    source: str | None
    written: list[str]
    unchanged: list[str]
    removed: list[str]
    retained: list[str]


class TokenizerChosen(LogEvent):
    """A scope's passages are indexed and searched with ``stemmer``'s Snowball stems, for good.

    Only ever the first event of a scope's stream: a choice made after a document was indexed
    would leave that document's terms in another index.
    """

    TOPIC = f"{_TOPIC}.TokenizerChosen"
    IDENTIFIERS = ("scope", "stemmer")
    scope: str
    stemmer: str


CORPUS_TOPICS = (
    DocumentWritten.TOPIC,
    DocumentRemoved.TOPIC,
    CorpusReconciled.TOPIC,
    TokenizerChosen.TOPIC,
)
