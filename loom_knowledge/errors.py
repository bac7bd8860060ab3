"""The errors ``loom_knowledge`` raises on purpose.

All of them derive from :class:`KnowledgeError`, itself a :class:`~loom_runtime.errors.LoomError`,
so "anything the corpus refused" is one ``except`` clause. Each carries the facts as attributes
(for code) and a message that says what happened and what to do next (for the operator reading a
nightly job's log). Errors about a bad *value* also derive from :class:`ValueError`, so msgspec
reports them as validation errors when a struct is decoded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loom_runtime import LoomError
from loom_runtime import SecretIdentifierError as RuntimeSecretIdentifierError


class KnowledgeError(LoomError):
    """Root of every error ``loom_knowledge`` raises on purpose."""


class InvalidOptionError(KnowledgeError, ValueError):
    """An option (a chunk size, a guard fraction) has a value the corpus cannot work with."""


class InvalidArgumentError(KnowledgeError, TypeError):
    """An argument is missing or of the wrong kind (``sync(None)``, ``retrieve(decide=None)``).

    Raised before anything is read or written, with what to pass instead; also a
    :class:`TypeError`, which is what Python itself would have raised, less helpfully.
    """


class InvalidDocumentError(KnowledgeError, ValueError):
    """A document cannot enter the corpus; ``field`` names the offending part (``meta.tags[2]``)."""

    def __init__(self, *, doc_id: object, field: str, reason: str) -> None:
        super().__init__(
            f"document {doc_id!r} cannot be stored: {field} {reason}; "
            "fix the document at its source and ingest it again"
        )
        self.doc_id = doc_id
        self.field = field
        self.reason = reason


class CorpusIdentifierSecretError(KnowledgeError, RuntimeSecretIdentifierError):
    """A document id, scope or source holds what looks like a secret; nothing was written.

    ``path`` names the field (``docs[3].id``, ``source``, ``scope``), never the value: every
    event, manifest row and passage id of a document repeats its id, and a redacted id would
    name another document.
    """


class DuplicateDocumentError(KnowledgeError, ValueError):
    """A reconcile was given the same document id more than once.

    Refused rather than "last one wins": which copy is current is exactly what the caller
    knows and the corpus does not.
    """

    def __init__(self, *, doc_ids: Sequence[str]) -> None:
        super().__init__(
            f"the input lists {len(doc_ids)} document id(s) more than once: "
            f"{', '.join(map(repr, doc_ids))}; pass each document exactly once"
        )
        self.doc_ids = tuple(doc_ids)


class SourceConflictError(KnowledgeError):
    """A writer tried to write documents another source owns.

    ``owners`` maps each refused document id to the source that owns it (``None`` is a
    source too). Refused, never re-stamped: re-stamping makes two writers fight over a
    document forever while every single run looks correct.
    """

    def __init__(self, *, writer: str | None, owners: Mapping[str, str | None]) -> None:
        listed = ", ".join(
            f"{doc_id!r} (owned by source {owner!r})" for doc_id, owner in owners.items()
        )
        super().__init__(
            f"source {writer!r} may not write {listed}; a document has one writer: "
            "write it from its owning source, or remove it there first"
        )
        self.writer = writer
        self.owners = dict(owners)


class MassDeleteRefusedError(KnowledgeError):
    """A reconcile would remove more of a source's documents than the guard allows.

    ``max_fraction`` is ``None`` when the refusal is the empty-input rule rather than the
    fraction rule.
    """

    def __init__(
        self,
        *,
        source: str | None,
        would_remove: int,
        owned: int,
        max_fraction: float | None,
    ) -> None:
        if max_fraction is None:
            why = "the input is empty"
        else:
            why = f"that is more than the guard's {max_fraction:.0%}"
        super().__init__(
            f"sync would remove {would_remove} of the {owned} {owned_documents(source)} "
            f"and {why}; if the source really dropped them, pass allow_mass_delete=True"
        )
        self.source = source
        self.would_remove = would_remove
        self.owned = owned
        self.max_fraction = max_fraction


class UngroundedCitationError(KnowledgeError):
    """An answer cited documents the model was never shown."""

    def __init__(self, *, ungrounded: Sequence[str], shown: Sequence[str]) -> None:
        super().__init__(
            f"the answer cites {', '.join(map(repr, ungrounded))}, which no retrieved passage "
            f"came from (shown: {', '.join(map(repr, shown)) or 'nothing'}); "
            "treat the answer as unsupported and do not present those citations"
        )
        self.ungrounded = tuple(ungrounded)
        self.shown = tuple(shown)


class TaintedSystemContentError(KnowledgeError):
    """Untrusted content (a passage) was put in a system position of a model request."""

    def __init__(self, *, provenance: str) -> None:
        super().__init__(
            f"untrusted content from {provenance!r} is in a system message; put instructions "
            "in the system message and each passage in its own user message "
            "(grounded_request does this)"
        )
        self.provenance = provenance


class InvalidPassageIdError(KnowledgeError, ValueError):
    """An entry id is not ``<doc_id>#<index>``, so the passage behind it names no document."""

    def __init__(self, *, entry_id: str, reason: str) -> None:
        super().__init__(
            f"{entry_id!r} is not a passage id ({reason}); passage ids are '<doc_id>#<index>', "
            "so this entry was not written by loom_knowledge: remove it from the corpus scope"
        )
        self.entry_id = entry_id
        self.reason = reason


class KnowledgeBaseOptionsError(KnowledgeError):
    """A scope was opened again with options that differ from the ones it is open with."""


class ModelUnavailableError(KnowledgeError):
    """A model endpoint could not be reached or answered with an HTTP error."""


class ModelResponseError(KnowledgeError):
    """A model endpoint answered, but not with an answer and its citations."""


class UnrecordedRetrievalError(KnowledgeError):
    """A retrieval inside a flow could not be recorded, so it was not run.

    A framework retriever (``loom_knowledge.bridges``) called synchronously inside an ASYNC
    flow cannot wait for the flow's ``ctx.decide``; searching unrecorded instead would leave a
    replay unable to answer. Call it the async way (``ainvoke``, ``aretrieve``) there.
    """


class EmbedderRequiredError(KnowledgeError, ValueError):
    """A vector or hybrid search was asked of a knowledge base opened without an embedder.

    Lexical search needs only the corpus; the other modes need the model that places the
    question and the passages in one vector space, and its similarity floor. Nothing was read.
    """

    def __init__(self, *, scope: str, mode: str) -> None:
        super().__init__(
            f"knowledge scope {scope!r} was opened without an embedder, so it cannot search in "
            f"mode {mode!r}: open it with open_knowledge_base(loom, {scope!r}, "
            "embedder=..., min_score=...) (e.g. loom_memory.HashingEmbedder() and 0.1, or a "
            "real model's embedder and its floor), or use mode='lexical'"
        )
        self.scope = scope
        self.mode = mode


def owned_documents(source: str | None) -> str:
    """Whose documents a refusal counts, in words: ``documents source 'wiki' owns``, or
    ``documents without a source`` (not ``source None``)."""
    return "documents without a source" if source is None else f"documents source {source!r} owns"


class ImportedExecutionError(KnowledgeError):
    """An execution imported from a bundle was asked what corpus it saw
    (:meth:`~loom_knowledge.KnowledgeBase.seen_by`): its recorded log position is the
    exporting log's, so this log's corpus at that position is not what it saw. Its recorded
    retrievals are (``loom audit``). ADR 0013, amended "imported"."""

    def __init__(self, *, execution_id: str, position: int, exported_at: str) -> None:
        super().__init__(
            f"execution {execution_id} was imported from another log (a bundle exported "
            f"{exported_at}): its log position {position} is that log's, and this log's corpus "
            "there is not what it saw; its recorded retrievals are (loom audit shows them)"
        )
        self.execution_id = execution_id
        self.position = position
        self.exported_at = exported_at
