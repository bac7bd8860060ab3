"""The pure classification behind ``sync`` and ``plan_sync``: what a reconcile writes and removes.

One function decides and both verbs call it, because a sync is destructive (the input is the
COMPLETE set; anything of the source's missing from it is removed) and a dry run computed by a
second code path would be a preview of a different operation. It reads only the manifest and
the input, and writes nothing, so its refusals happen before any write: a refused sync changes
nothing at all.

Two rules protect a corpus from its writers:

* **One writer per document** (ADR 0005). A reconcile only touches its own source's documents;
  other sources' documents are ``retained`` and reported. ``None`` is a source like any other,
  not a wildcard. A document nobody holds may be created by anyone; a document another source
  holds is refused, never re-stamped.
* **The mass-delete guard** (ADR 0006). An empty input, or one that would remove more than
  ``max_removal_fraction`` of the source's documents, is refused unless the caller passes
  ``allow_mass_delete=True``: a failed export that returns nothing must not wipe the corpus.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

from loom_knowledge.domain.fingerprint import DEFAULT_FINGERPRINTER, Fingerprinter
from loom_knowledge.domain.types import Doc, DocRecord, PlannedWrite, SyncPlan
from loom_knowledge.errors import (
    DuplicateDocumentError,
    InvalidOptionError,
    MassDeleteRefusedError,
    SourceConflictError,
)
from loom_runtime import finite_real

DEFAULT_MAX_REMOVAL_FRACTION: Final = 0.5
"""A reconcile may remove at most half of a source's documents without an override.

Half, because a real source rarely drops most of its documents in one run, while a truncated
or failed export typically drops nearly all of them. Note that on a small corpus this trips
easily (removing 1 of 1 is 100%); that is the point of the override.
"""


def ensure_writable(*, doc_id: str, record: DocRecord | None, source: str | None) -> None:
    """Refuse a single write by ``source`` to a document another source owns.

    For writes outside a reconcile (an upsert, a removal); :func:`reconcile` applies the
    same rule to a whole input at once.
    """
    if record is not None and record.source != source:
        raise SourceConflictError(writer=source, owners={doc_id: record.source})


def check_allow_mass_delete(allow_mass_delete: object) -> None:
    """Refuse a mass-delete override that is not a real ``bool``.

    The override lets one sync remove every document of a source, so only ``True`` may: a
    truthy stand-in (the string ``"false"`` read from a config file or the environment) would
    otherwise wipe the corpus the guard exists to protect (ADR 0006, amended "corpus review").
    """
    if not isinstance(allow_mass_delete, bool):
        raise InvalidOptionError(
            f"allow_mass_delete must be True or False, not {type(allow_mass_delete).__name__} "
            f"{allow_mass_delete!r}: it lets a sync remove every document of its source, so "
            "parse a flag from configuration into a bool first"
        )


def check_max_removal_fraction(fraction: object) -> float:
    """``fraction`` as a float, refused unless a real number from 0 to 1 (numpy's floats and
    ``Fraction`` are): ``True`` would be taken as 1.0, a guard that never fires, and a string
    failed the comparison untyped."""
    number = finite_real(fraction)
    if number is None or not 0.0 <= number <= 1.0:
        raise InvalidOptionError(
            f"max_removal_fraction must be a real number from 0 to 1, got {fraction!r}; "
            "it is the share of a source's documents one sync may remove"
        )
    return number


def reconcile(
    *,
    manifest: Mapping[str, DocRecord],
    docs: Sequence[Doc],
    source: str | None,
    fingerprinter: Fingerprinter = DEFAULT_FINGERPRINTER,
    max_removal_fraction: float = DEFAULT_MAX_REMOVAL_FRACTION,
    allow_mass_delete: bool = False,
) -> SyncPlan:
    """Classify a reconcile of ``source`` against the COMPLETE input ``docs``.

    ``manifest`` maps each live doc id to its record. ``source`` has no default on purpose:
    a caller states which writer it speaks for, even when that writer is ``None``.

    A document is written when it is new, when its fingerprint changed, or when its record
    was fingerprinted by another algorithm (listed in ``rehashed``). Raises
    :class:`DuplicateDocumentError`, :class:`SourceConflictError` (naming every conflicting
    document) or :class:`MassDeleteRefusedError`, and :class:`InvalidOptionError` for an
    override that is not a bool; nothing is classified partially.
    """
    check_allow_mass_delete(allow_mass_delete)
    max_removal_fraction = check_max_removal_fraction(max_removal_fraction)
    duplicates = [doc_id for doc_id, seen in Counter(doc.id for doc in docs).items() if seen > 1]
    if duplicates:
        raise DuplicateDocumentError(doc_ids=duplicates)
    conflicts = {
        doc.id: record.source
        for doc in docs
        if (record := manifest.get(doc.id)) is not None and record.source != source
    }
    if conflicts:
        raise SourceConflictError(writer=source, owners=conflicts)

    writes: list[PlannedWrite] = []
    unchanged: list[str] = []
    rehashed: list[str] = []
    for doc in docs:
        record = manifest.get(doc.id)
        digest = fingerprinter.digest(doc)
        if record is None:
            writes.append(PlannedWrite(doc=doc, revision=1, fingerprint=digest))
        elif (record.fingerprint_algorithm, record.fingerprint) == (
            fingerprinter.algorithm,
            digest,
        ):
            unchanged.append(doc.id)
        else:
            if record.fingerprint_algorithm != fingerprinter.algorithm:
                rehashed.append(doc.id)
            writes.append(PlannedWrite(doc=doc, revision=record.revision + 1, fingerprint=digest))

    incoming = {doc.id for doc in docs}
    owned = [doc_id for doc_id, record in manifest.items() if record.source == source]
    removed = [doc_id for doc_id in owned if doc_id not in incoming]
    retained = [doc_id for doc_id, record in manifest.items() if record.source != source]

    if removed and not allow_mass_delete:
        if not docs:
            raise MassDeleteRefusedError(
                source=source, would_remove=len(removed), owned=len(owned), max_fraction=None
            )
        if len(removed) / len(owned) > max_removal_fraction:
            raise MassDeleteRefusedError(
                source=source,
                would_remove=len(removed),
                owned=len(owned),
                max_fraction=max_removal_fraction,
            )

    return SyncPlan(
        source=source,
        fingerprint_algorithm=fingerprinter.algorithm,
        writes=tuple(writes),
        unchanged=tuple(unchanged),
        removed=tuple(removed),
        retained=tuple(retained),
        rehashed=tuple(rehashed),
    )
