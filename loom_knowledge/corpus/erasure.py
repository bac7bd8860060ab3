"""Erasing a corpus document: its subject, its sealed text, and what the erasure covers (ADR 0055).

A document (scope + doc id) is one erasure subject for every revision it ever had: a data
protection request names a document, not a revision, and one key per document lets a later
revision be written under the key the earlier ones used. When the log is encrypted, a
:class:`~loom_knowledge.corpus.events.DocumentWritten` stores its ``title`` and each of its
``passages`` sealed under that key (:func:`seal_written`); what orders, routes and audits the
corpus stays in clear: scope, doc id, revision, fingerprint, source, meta (the filters read
it) and the passage count.

Erasing it (``loom erase --document SCOPE:DOC_ID``, :meth:`loom_runtime.Loom.erase` with
``document=``) destroys the key and appends the forget event; the corpus index forgets the
document when it applies that event (:mod:`loom_knowledge.corpus.corpus_index`), and a
rebuild, finding the key gone and the same event, ends in the same state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

import msgspec

from loom_knowledge.corpus.events import CORPUS_TOPICS, CorpusReconciled, DocumentWritten
from loom_knowledge.corpus.keys import stream_name
from loom_runtime import (
    ErasedError,
    ErasedSubject,
    ErasureSubjectError,
    executions_holding,
    keyring_for,
    open_subject_text,
    pair_subject,
    seal_subject_text,
    sealed_after,
    sealed_text_subject,
    stream_id,
    subject_pair,
)

if TYPE_CHECKING:
    from loom_runtime import Keyring, Loom, Precondition

DOCUMENT: Final = "document:"
"""The prefix of a document's subject: ``document:["<scope>","<doc id>"]``."""


def document_subject(scope: str, doc_id: str) -> str:
    """The subject a document's text is sealed under, every revision of it: scope and id as a
    pair (:func:`~loom_runtime.pair_subject`); a pair too long for the key table is named by
    its digest (the forget event then names the digest, and the corpus index finds the
    document by it)."""
    return pair_subject(DOCUMENT, scope, doc_id)


def named_document(subject: str) -> tuple[str, str] | None:
    """The (scope, doc id) a readable document subject names; None for another subject or
    a digest (:func:`document_subject`)."""
    return subject_pair(DOCUMENT, subject)


def _place(subject: str, revision: int, field: str) -> str:
    """Where a sealed text is stored (its associated data): the document, revision, field."""
    return f"{subject}:{revision}:{field}"


def seal_written(loom: Loom, fields: dict[str, Any]) -> dict[str, Any]:
    """A ``DocumentWritten``'s fields with its title and passages sealed under the document's
    key, when the log is encrypted (as they are otherwise).

    The key is made on the document's first sealed write and read again from the key table on
    every later one, so a write after the document was erased is
    :class:`~loom_runtime.SubjectErasedError` and nothing is appended."""
    keyring = keyring_for(loom.log.engine)
    if keyring is None:
        return fields
    subject = document_subject(fields["scope"], fields["doc_id"])
    aead = keyring.ensure(subject, position=loom.log.position)
    revision = fields["revision"]
    redactor = loom.log.redactor

    def sealed(text: str, field: str, shown: str) -> str:
        # Redacted before it is sealed, as the log would redact it in clear (ADR 0012): a
        # ciphertext hides a secret from every pattern. A refusal names the field as the
        # clear event's would (``shown``), so a dry run's refusal reads the same.
        path = f"{DocumentWritten.TOPIC}.{shown}"
        clear = text if redactor is None else redactor.text(text, path=path)
        return seal_subject_text(aead, subject, clear, _place(subject, revision, field))

    title = fields["title"]
    return {
        **fields,
        "title": None if title is None else sealed(title, "title", "title"),
        "passages": [
            sealed(text, f"passages.{index}", f"passages[{index}]")
            for index, text in enumerate(fields["passages"])
        ],
    }


def prepare_keys(loom: Loom, scope: str, doc_ids: Sequence[str]) -> None:
    """Make the keys of the documents a sync is about to write, in one transaction, when the
    log is encrypted (:func:`seal_written` then finds them made)."""
    keyring = keyring_for(loom.log.engine)
    if keyring is not None and doc_ids:
        subjects = [document_subject(scope, doc_id) for doc_id in doc_ids]
        keyring.ensure_all(subjects, position=loom.log.position)


def refuse_erased(
    loom: Loom, scope: str, doc_ids: Sequence[str], erased: Mapping[str, int]
) -> None:
    """Raise the :class:`~loom_runtime.SubjectErasedError` a write of ``doc_ids`` would meet,
    for a plan that writes nothing (``plan_sync``, a dry-run sync): the key table's own
    refusal, read for the documents the corpus index found ``erased`` (id to forget event)."""
    keyring = keyring_for(loom.log.engine)
    if keyring is None:
        return
    for doc_id in doc_ids:
        if doc_id in erased:
            keyring.live_key(document_subject(scope, doc_id))  # destroyed: raises


def documents_live(loom: Loom, scope: str, doc_ids: Sequence[str]) -> Precondition | None:
    """What the append of a write sealing ``doc_ids`` must find in its own transaction when
    the log is encrypted and can read it: every document's key still live. So a write that
    read a key live just before another process erased the document is refused
    (:class:`~loom_runtime.SubjectErasedError`, nothing appended), never stored under the
    destroyed key; a log that cannot read one relies on :func:`seal_written`'s read."""
    keyring = keyring_for(loom.log.engine)
    if keyring is None or not doc_ids or not loom.log.checks_preconditions:
        return None
    return keyring.all_live_precondition(document_subject(scope, doc_id) for doc_id in doc_ids)


def _is_sealed(event: DocumentWritten, position: int, clear_upto: int) -> bool:
    """Whether a revision is stored sealed: its texts all look sealed, and it was stored
    after ``clear_upto`` (:func:`_clear_upto`), where something could first be sealed; a
    revision stored before is an outsider's clear text, whatever it looks like. A revision
    with no text at all (no title, no passages) stored after it was written under the
    subject's key like any other: it is erasable, not "recorded before encryption"."""
    texts = [*event.passages, *([] if event.title is None else [event.title])]
    return position > clear_upto and all(sealed_text_subject(text) is not None for text in texts)


def _clear_upto(loom: Loom) -> int:
    """The last log position where nothing can be sealed: :func:`~loom_runtime.sealed_after`,
    or the head while the log has no data key (read first: a sealed write made meanwhile
    lands past it)."""
    head = loom.log.position
    after = sealed_after(loom.log.engine)
    return head if after is None else after


def _scope_events(loom: Loom, scope: str, topics: Sequence[str]) -> list[tuple[int, Any]]:
    """The events of ``topics`` in ``scope``'s stream, with their log positions (which
    :func:`_is_sealed` needs): read by topic across the log, an erasure's cost, not a
    read's."""
    stream = stream_id(stream_name(scope))
    return [
        (record.position, loom.log.decode(record))
        for record in loom.log.notifications(topics=topics)
        if record.stream == stream
    ]


def open_written(
    keyring: Keyring | None, event: DocumentWritten, *, clear: bool = False
) -> tuple[str | None, list[str]] | None:
    """A written revision's title and passages in clear; None once the document was erased
    (its key destroyed). A sealed revision read without a key is
    :class:`~loom_runtime.EncryptionOffError`: never indexed as if it were empty.

    ``clear``: the revision was stored where nothing can be sealed (at or before
    :func:`~loom_runtime.sealed_after`), so its texts are as written, whatever they look like:
    a title or body that begins like a sealed text is an outsider's text, not a ciphertext."""
    if clear:
        return event.title, list(event.passages)
    subject = document_subject(event.scope, event.doc_id)
    try:
        title = (
            None
            if event.title is None
            else open_subject_text(keyring, event.title, _place(subject, event.revision, "title"))
        )
        passages = [
            open_subject_text(keyring, text, _place(subject, event.revision, f"passages.{index}"))
            for index, text in enumerate(event.passages)
        ]
    except ErasedError:
        return None
    return title, passages


def document_subjects(loom: Loom, value: str) -> tuple[list[ErasedSubject], list[str]]:
    """The ``loom.erasure`` entry point for ``document``: the document ``value`` names
    (:func:`_named_in_log`) as its subject and how many of its revisions are sealed, and the
    revisions stored in clear before encryption was switched on (``<subject>@<revision>``:
    not erasable).

    Reads the scope's stream from the log, not the corpus index: the log is what holds the
    text. A document the log never held is :class:`~loom_runtime.ErasureSubjectError`.
    The subject's ``held_by`` names the executions that retrieved it
    (:func:`executions_that_retrieved`): copies this erasure does not reach."""
    scope, doc_id, revisions = _named_in_log(loom, value)
    subject = document_subject(scope, doc_id)
    sealed = 0
    clear: list[str] = []
    clear_upto = _clear_upto(loom)
    for position, event in revisions:
        if _is_sealed(event, position, clear_upto):
            sealed += 1
        else:
            clear.append(f"{subject}@{event.revision}")
    if not sealed:
        return [], clear
    held_by = tuple(str(e) for e in executions_that_retrieved(loom, scope, doc_id))
    return [
        ErasedSubject(subject=subject, execution_id=None, events=sealed, held_by=held_by)
    ], clear


def _named_in_log(loom: Loom, value: str) -> tuple[str, str, list[tuple[int, DocumentWritten]]]:
    """The scope, doc id and written revisions of the document ``value`` names: ``SCOPE:DOC_ID``
    or the pair form a document's subject shows, ``["SCOPE","DOC_ID"]``.

    A scope may hold colons (``tenant:acme``), so ``SCOPE:DOC_ID`` is tried at each colon and
    resolved by the log: the one split whose scope held that document. A name two documents
    fit (scope ``a`` with document ``b:c``, scope ``a:b`` with ``c``) is refused, naming both
    and their pair forms; the pair form is never ambiguous. Anything else is
    :class:`~loom_runtime.ErasureSubjectError`: a name must not erase a document it was not
    meant for."""
    if value.startswith("["):
        try:
            scope, doc_id = msgspec.json.decode(value, type=tuple[str, str])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ErasureSubjectError(
                f'name a document as SCOPE:DOC_ID or ["SCOPE","DOC_ID"] (a JSON pair of '
                f"strings), not {value!r}: {exc}; nothing was written"
            ) from None
        splits = [(scope, doc_id)]
    else:
        splits = [(value[:at], value[at + 1 :]) for at, c in enumerate(value) if c == ":"]
    splits = [(scope, doc_id) for scope, doc_id in splits if scope.strip() and doc_id.strip()]
    if not splits:
        raise ErasureSubjectError(
            f'name a document as SCOPE:DOC_ID or ["SCOPE","DOC_ID"], not {value!r}; nothing '
            "was written"
        )
    found = [
        (scope, doc_id, revisions)
        for scope, doc_id in splits
        if (revisions := _revisions(loom, scope, doc_id))
    ]
    if len(found) == 1:
        return found[0]
    if found:
        fits = "; ".join(
            f"scope {scope!r}, document {doc_id!r}: {_pair(scope, doc_id)}"
            for scope, doc_id, _ in found
        )
        raise ErasureSubjectError(
            f"{value!r} names more than one document ({fits}); name one by its pair form; "
            "nothing was written"
        )
    (scope, doc_id), *others = splits
    nor = "".join(f", nor scope {s!r} a document {d!r}" for s, d in others)
    raise ErasureSubjectError(
        f"knowledge scope {scope!r} never held a document {doc_id!r}{nor} in the log at "
        f"{loom.settings.url!r}; nothing was written (ids are matched exactly)"
    )


def _revisions(loom: Loom, scope: str, doc_id: str) -> list[tuple[int, DocumentWritten]]:
    """Every revision of ``doc_id`` written to ``scope``, from the log, with its position."""
    return [
        (position, event)
        for position, event in _scope_events(loom, scope, (DocumentWritten.TOPIC,))
        if event.doc_id == doc_id
    ]


def _pair(scope: str, doc_id: str) -> str:
    return msgspec.json.encode([scope, doc_id]).decode()


def documents_written_before(
    loom: Loom, scope: str, cutoff: datetime
) -> tuple[list[ErasedSubject], list[str]]:
    """The ``loom.retention`` entry point for ``document``: every document of ``scope`` whose
    last revision was written, and last found unchanged by a sync, before ``cutoff`` (its
    newest text is older than the policy's age and no sync has confirmed it since), as erasure
    subjects, with the executions that retrieved each; and the revisions of those documents
    stored in clear (not erasable).

    The last write, not the first: a document still being revised is still in use, and one key
    covers every revision, so it is erased when its newest revision ages out (its older ones
    with it). A sync that finds a document unchanged writes no revision, yet the document is
    current in its source: erasing it would take it out of search and refuse every later sync
    of that source (it would hold an erased document). A scope the log never held is
    :class:`~loom_runtime.ErasureSubjectError` (a typo in a crontab should fail loudly, not
    erase nothing every night)."""
    last: dict[str, datetime] = {}
    sealed: dict[str, int] = {}
    clear: dict[str, list[str]] = {}
    seen = False
    clear_upto = _clear_upto(loom)
    for position, event in _scope_events(loom, scope, CORPUS_TOPICS):
        seen = True
        if isinstance(event, CorpusReconciled):
            for doc_id in event.unchanged:  # found current by its source's sync: in use
                last[doc_id] = event.timestamp
        elif isinstance(event, DocumentWritten):
            doc_id = event.doc_id
            last[doc_id] = event.timestamp
            if _is_sealed(event, position, clear_upto):
                sealed[doc_id] = sealed.get(doc_id, 0) + 1
            else:
                named = f"{document_subject(scope, doc_id)}@{event.revision}"
                clear.setdefault(doc_id, []).append(named)
    if not seen:
        raise ErasureSubjectError(
            f"the log at {loom.settings.url!r} holds no knowledge scope {scope!r}; nothing was "
            "written (scopes are matched exactly)"
        )
    old = [doc_id for doc_id, written in last.items() if written < cutoff]
    holders = _retrieved_by(loom, scope, {doc_id for doc_id in old if doc_id in sealed})
    subjects = [
        ErasedSubject(
            subject=document_subject(scope, doc_id),
            execution_id=None,
            events=sealed[doc_id],
            held_by=tuple(str(e) for e in holders.get(doc_id, ())),
        )
        for doc_id in old
        if doc_id in sealed
    ]
    return subjects, [named for doc_id in old for named in clear.get(doc_id, ())]


class _Request(msgspec.Struct, frozen=True):
    """The part of a recorded retrieval's input that names its scope."""

    scope: str


class _Retrieved(msgspec.Struct, frozen=True):
    """The part of a recorded passage that names its document."""

    doc_id: str


def executions_that_retrieved(loom: Loom, scope: str, doc_id: str) -> list[UUID]:
    """The live executions whose recorded retrievals of ``scope`` returned a passage of
    ``doc_id``: their records keep its text under their own keys, which erasing the document
    does not reach (ADR 0055), so an erasure's report names them.

    Finds candidates by the decisions' kind (in clear), then opens only those executions;
    an execution already erased, or one this Loom cannot open, holds nothing readable here.
    One pass over the log's decisions: an erasure is rare, and its dry run reads only."""
    return _retrieved_by(loom, scope, {doc_id}).get(doc_id, [])


def _retrieved_by(loom: Loom, scope: str, doc_ids: set[str]) -> dict[str, list[UUID]]:
    """For each of ``doc_ids``, the live executions that retrieved it from ``scope``."""
    found: dict[str, list[UUID]] = {}
    if not doc_ids:
        return found
    for execution in executions_holding(loom, "retrieval"):
        retrieved: set[str] = set()
        for decision in execution.decisions.values():
            retrieved |= _retrieved(decision, scope)
        for doc_id in sorted(retrieved & doc_ids):
            found.setdefault(doc_id, []).append(execution.id)
    return found


def _retrieved(decision: Any, scope: str) -> set[str]:
    """The documents of ``scope`` a recorded retrieval returned passages of."""
    if decision.kind != "retrieval" or decision.value is None or decision.input is None:
        return set()
    try:
        request = msgspec.json.decode(decision.input, type=_Request)
        passages = msgspec.json.decode(decision.value, type=list[_Retrieved])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return set()  # a retrieval of another shape (the application's own)
    return {p.doc_id for p in passages} if request.scope == scope else set()


__all__ = [
    "document_subject",
    "document_subjects",
    "documents_live",
    "documents_written_before",
    "executions_that_retrieved",
    "named_document",
    "open_written",
    "prepare_keys",
    "seal_written",
]
