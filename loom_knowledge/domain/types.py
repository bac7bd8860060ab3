"""The values a corpus is made of: documents, passages, manifest records, reconcile results.

A :class:`Doc` is the unit a corpus is EDITED in; a :class:`Passage` is the unit it is
SEARCHED in. Everything else in ``loom_knowledge`` is the mapping between the two. All of them
are frozen msgspec Structs because they travel through the event log: what is encoded must be
exactly what was decided, and decoding it back must give an equal value.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from loom_knowledge.errors import InvalidDocumentError
from loom_memory import MAX_KEY_BYTES
from loom_runtime import MAX_DATA_DEPTH, json_problem, text_problem, too_deep

MAX_ID_BYTES: Final = 1_536
"""The longest document id, in bytes of UTF-8, on every backend. PostgreSQL's index rows hold
the scope's key (a scope is at most :data:`MAX_SCOPE_BYTES`) and a passage's entry id
(``<doc_id>#<index>``) side by side in at most 2,704 bytes; a longer id the log took could
not be indexed there, and its event, in the append-only log, stopped every scope for good."""

MAX_SCOPE_BYTES: Final = MAX_KEY_BYTES
"""The longest scope, in bytes of UTF-8: a memory key's bound (1,024)."""

MAX_REPEATED_BYTES: Final = 4 * 1024 * 1024
"""The most bytes a written document's title and meta may take once repeated in each of its
passages: (UTF-8 bytes of the title + bytes of the meta's JSON) x passages. Every passage
repeats them (each is searchable, and returned with the passage), so their size is multiplied
by the passage count: a 100 KB title on a 200-passage document wrote 243 MB and took 20 s on
SQLite, every rebuild paying it again. A 300 KB meta on a one-passage document still goes in;
a 4,000-passage book may carry 1 KB. Checked when a document is written, not when an event
is read: a revision stored before the bound still projects."""

MAX_META_DEPTH: Final = MAX_DATA_DEPTH - 1
"""How deeply a document's meta may nest: the index stores meta one level down, inside a
passage's content, which may nest :data:`~loom_runtime.codec.MAX_DATA_DEPTH` levels. Checked
when the :class:`Doc` is made and again when it is written, so a corpus never logs a document
it cannot index."""


def _check_string(value: str, *, doc_id: object, field: str) -> None:
    """Refuse a document string that cannot be stored faithfully (the runtime's text rule)."""
    problem = text_problem(value)
    if problem is not None:
        raise InvalidDocumentError(doc_id=doc_id, field=field, reason=problem)


def _check_json(value: object, *, doc_id: object, field: str) -> None:
    """Refuse meta values that would not come back equal from the log.

    Tuples come back as lists and NaN/infinity as ``null``, so a document holding one would
    fingerprint differently after a round trip and be rewritten by every sync.
    """
    found = json_problem(value, field)
    if found is not None:
        where, problem = found
        raise InvalidDocumentError(doc_id=doc_id, field=where, reason=problem)


class Doc(msgspec.Struct, frozen=True, kw_only=True):
    """A document as its source has it: the unit that is revised and deleted.

    ``meta`` is the caller's own vocabulary (source, section, author, ...) and travels
    verbatim. It is searchable text (ADR 0007), so a value stamped on every document matches
    every document. A ``Doc`` that cannot be stored faithfully cannot be constructed: the
    checks run here rather than at ingest, so a bad document fails where it was made. ``meta``
    is copied once checked, and every write checks the document again (:func:`check_doc`):
    ``doc.meta`` is still a dict anyone holding the document can change.
    """

    id: str
    text: str
    title: str | None = None
    meta: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        check_doc(self)
        if self.meta:
            # The caller's dict stays the caller's: a template reused for the next document,
            # changed after this one was checked, must not change (or poison) this one. Copied
            # through its JSON (checked to be plain JSON): a tenth of what deepcopy costs.
            copied = msgspec.json.decode(encoded_meta(self))
            msgspec.structs.force_setattr(self, "meta", copied)


def encoded_meta(doc: Doc, *, order: Literal["sorted"] | None = None) -> bytes:
    """``doc.meta`` as JSON, or :class:`InvalidDocumentError` for what msgspec cannot write
    that the JSON rule lets by (a float subclass such as numpy's ``float64``, an int past
    Python's 4,300-digit limit): typed, as every other refusal of a document."""
    try:
        return msgspec.json.encode(doc.meta, order=order)
    except (TypeError, ValueError) as exc:
        raise InvalidDocumentError(
            doc_id=doc.id, field="meta", reason=f"does not encode as JSON ({exc})"
        ) from exc


def check_doc(doc: Doc) -> None:
    """Refuse a document that cannot be stored faithfully: the checks a :class:`Doc` is made
    with, and which every write runs again before it decides anything.

    Run again because a made ``Doc`` can still change: its meta is a dict reachable through
    ``doc.meta``. A value changed after construction would be appended to the log and then
    refused by the corpus index, and the log is append-only, so every later catch-up of every
    scope would fail at that event for good (ADR 0010, amended "corpus review").
    """
    if not isinstance(doc.id, str) or not doc.id.strip():
        raise InvalidDocumentError(doc_id=doc.id, field="id", reason="must be a non-blank string")
    _check_string(doc.id, doc_id=doc.id, field="id")
    if len(doc.id) * 4 > MAX_ID_BYTES and (size := len(doc.id.encode())) > MAX_ID_BYTES:
        raise InvalidDocumentError(
            doc_id=f"{doc.id[:40]}...",
            field="id",
            reason=f"is {size:,} bytes of UTF-8, over {MAX_ID_BYTES:,} bytes (MAX_ID_BYTES)",
        )
    if not isinstance(doc.text, str):
        raise InvalidDocumentError(
            doc_id=doc.id, field="text", reason=f"is a {type(doc.text).__name__}, not a str"
        )
    _check_string(doc.text, doc_id=doc.id, field="text")
    if doc.title is not None:
        if not isinstance(doc.title, str):
            raise InvalidDocumentError(doc_id=doc.id, field="title", reason="must be a str or None")
        _check_string(doc.title, doc_id=doc.id, field="title")
    if doc.meta is not None:
        if not isinstance(doc.meta, dict):
            raise InvalidDocumentError(doc_id=doc.id, field="meta", reason="must be a dict or None")
        deep = too_deep(doc.meta, limit=MAX_META_DEPTH)
        if deep is not None:
            raise InvalidDocumentError(
                doc_id=doc.id,
                field=f"meta{deep}",
                reason=f"nests more than {MAX_META_DEPTH} levels deep (MAX_META_DEPTH)",
            )
        _check_json(doc.meta, doc_id=doc.id, field="meta")


class Passage(msgspec.Struct, frozen=True, kw_only=True):
    """One searchable piece of a document, as retrieval returns it.

    ``revision`` is the document revision the passage was cut from, so a recorded retrieval
    says which version of a document an answer was grounded in even after it is revised.
    """

    doc_id: str
    index: int
    text: str
    title: str | None = None
    meta: dict[str, Any] | None = None
    revision: int


class DocRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The manifest's row for one live document: enough to compare, count and remove it.

    ``passage_count`` IS the list of the document's passage ids (``id#0`` .. ``id#n-1``), so
    a revision can remove exactly its predecessor's passages. ``fingerprint_algorithm`` is
    kept beside ``fingerprint`` so a change of algorithm is visible rather than looking like
    an edit of every document. ``source`` is the one writer allowed to revise or delete the
    document (ADR 0005); ``None`` is a source, not "anyone".
    """

    id: str
    revision: int
    fingerprint: str
    fingerprint_algorithm: str
    passage_count: int
    source: str | None


class SyncResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a reconcile did (or, from a plan, would do), by document id.

    ``written`` and ``unchanged`` follow the input order; ``removed`` and ``retained``
    follow the manifest order. ``retained`` lists other sources' documents the reconcile
    protected: "deleted nothing" and "protected four documents it does not own" describe
    very different corpora, and only one is something an operator should stop noticing.
    """

    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    removed: tuple[str, ...]
    retained: tuple[str, ...]


class PlannedWrite(msgspec.Struct, frozen=True, kw_only=True):
    """A document a reconcile will write, with the revision and fingerprint to record."""

    doc: Doc
    revision: int
    fingerprint: str


class SyncPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The full classification of a reconcile; :attr:`result` is its :class:`SyncResult`.

    ``rehashed`` lists the written documents whose record was fingerprinted by another
    algorithm: they could not be compared, so they are rewritten, and saying so is what
    keeps an algorithm change from looking like an edit of the whole corpus.
    """

    source: str | None
    fingerprint_algorithm: str
    writes: tuple[PlannedWrite, ...]
    unchanged: tuple[str, ...]
    removed: tuple[str, ...]
    retained: tuple[str, ...]
    rehashed: tuple[str, ...]

    @property
    def result(self) -> SyncResult:
        """The plan as the result shape ``sync`` and ``plan_sync`` both return."""
        return SyncResult(
            written=tuple(write.doc.id for write in self.writes),
            unchanged=self.unchanged,
            removed=self.removed,
            retained=self.retained,
        )
