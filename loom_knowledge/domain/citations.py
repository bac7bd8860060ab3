"""Citation checks: did the answer cite only documents the model was actually shown?

A citation outside the retrieved set was not misread from a passage; there was no passage.
Because the retrieval is recorded, the set of documents the model could have read is known
exactly, which makes this the one hallucination in a grounded answer that is DECIDABLE rather
than judged. The check is membership only, by design: whether a claim follows from the cited
passage needs a judge, and folding that in would turn a decidable check into an approximate
one. Ids are compared exactly (no case folding, no trimming): a near-miss id names a document
that was not shown.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from loom_knowledge.domain.arguments import items_of
from loom_knowledge.domain.types import Passage
from loom_knowledge.errors import UngroundedCitationError


class CitationCheck(msgspec.Struct, frozen=True, kw_only=True):
    """The cited doc ids split by whether a shown passage came from them, in citation order."""

    grounded: tuple[str, ...]
    ungrounded: tuple[str, ...]
    shown: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether every cited document was shown."""
        return not self.ungrounded


def check_citations(cited_doc_ids: Iterable[str], passages: Iterable[Passage]) -> CitationCheck:
    """Split ``cited_doc_ids`` (deduplicated, first occurrence kept) into grounded and not.

    Raises :class:`InvalidArgumentError`, naming the argument, when ``cited_doc_ids`` is not an
    iterable of ``str`` ids or is one ``str`` (iterated, ``"ab"`` would be the ids ``a`` and
    ``b``, and a document never shown would be called grounded), and when ``passages`` is not
    an iterable of :class:`Passage`.
    """
    shown = [passage.doc_id for passage in items_of(passages, "passages", Passage)]
    return citations_against(cited_doc_ids, shown)


def citations_against(cited_doc_ids: Iterable[str], shown_doc_ids: Iterable[str]) -> CitationCheck:
    """:func:`check_citations` against the ids of the documents shown (an audit reads them
    from a recorded request's provenance, not from passages)."""
    shown = tuple(dict.fromkeys(shown_doc_ids))
    shown_set = set(shown)
    cited = dict.fromkeys(items_of(cited_doc_ids, "cited_doc_ids", str))
    return CitationCheck(
        grounded=tuple(doc_id for doc_id in cited if doc_id in shown_set),
        ungrounded=tuple(doc_id for doc_id in cited if doc_id not in shown_set),
        shown=shown,
    )


def assert_grounded(cited_doc_ids: Iterable[str], passages: Iterable[Passage]) -> tuple[str, ...]:
    """Return the cited doc ids, or raise :class:`UngroundedCitationError` naming unshown ones
    (:class:`InvalidArgumentError` for arguments :func:`check_citations` refuses)."""
    check = check_citations(cited_doc_ids, passages)
    if not check.ok:
        raise UngroundedCitationError(ungrounded=check.ungrounded, shown=check.shown)
    return check.grounded
