"""The fingerprint that tells a reconcile whether a document changed.

It covers the WHOLE document — title, text and meta — because each of them is searchable
(ADR 0007): a fingerprint over the text alone would skip a retitled document and leave the old
title answering queries. The id is not hashed; it is the key the fingerprint is compared under.

The encoding is canonical (msgspec JSON with every mapping's keys sorted), so the same document
hashes the same whichever order its meta was built in. The algorithm's name is recorded with
each document (``DocRecord.fingerprint_algorithm``): if this encoding ever changes, the new
name makes the old fingerprints recognisably incomparable instead of silently "different".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec

from loom_knowledge.domain.chunking import Chunker, pack_paragraphs
from loom_knowledge.domain.types import Doc, check_doc, encoded_meta
from loom_knowledge.errors import InvalidOptionError

FINGERPRINT_ALGORITHM: Final = "sha256/msgspec-json-sorted/v1"
"""The name recorded with every fingerprint :func:`fingerprint` produces. Bump it with any
change to the encoding below."""


def fingerprint(doc: Doc) -> str:
    """The sha256 hex digest of the document's title, text and meta, canonically encoded.

    A document whose meta was changed after it was made so that it no longer encodes (a key
    that is not a str, a float subclass) is refused as its constructor would refuse it, typed.
    """
    content = {"title": doc.title, "text": doc.text, "meta": doc.meta}
    try:
        canonical = msgspec.json.encode(content, order="sorted")
    except (TypeError, ValueError):
        check_doc(doc)  # names what the JSON rule refuses
        encoded_meta(doc, order="sorted")  # and what msgspec does
        raise
    return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Fingerprinter:
    """A fingerprint function together with the algorithm name recorded beside its output.

    They travel as one value so that a reconcile can never hash with one function and
    record the name of another.
    """

    algorithm: str
    digest: Callable[[Doc], str]


DEFAULT_FINGERPRINTER: Final = Fingerprinter(algorithm=FINGERPRINT_ALGORITHM, digest=fingerprint)


_IDENTITY_LIMIT: Final = 200
"""The longest chunker identity taken: it is stored with every document the chunker cut."""


def fingerprinter_for(chunker: Chunker) -> Fingerprinter:
    """The fingerprinter of a scope cut by ``chunker``: the content's digest, under an
    algorithm name that also names the chunker when it has an ``identity``.

    A document is written again when its record's algorithm differs (:func:`reconcile`), so a
    scope opened with a chunker of another identity re-cuts every document at its next sync,
    instead of keeping passages cut another way for good. The default ``pack_paragraphs()``
    keeps :data:`FINGERPRINT_ALGORITHM`, the name every corpus written before this rule
    recorded, so an upgrade rewrites none of them.
    """
    identity = getattr(chunker, "identity", None)
    if identity is None or identity == pack_paragraphs().identity:
        return DEFAULT_FINGERPRINTER
    if not isinstance(identity, str) or not identity.strip() or len(identity) > _IDENTITY_LIMIT:
        raise InvalidOptionError(
            f"a chunker's identity must be a non-blank str of at most {_IDENTITY_LIMIT} "
            f"characters naming how it cuts, not {identity!r}"
        )
    return Fingerprinter(
        algorithm=f"{FINGERPRINT_ALGORITHM}; chunker={identity}", digest=fingerprint
    )
