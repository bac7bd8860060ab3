"""The events that put embeddings in the log: vectors a model returned, by text digest.

One stream per model, ``embeddings:<model>``: writers only append (blind, retried on
contention), and the address of a vector is ``(model, digest)``, never the stream version.
Vectors are stored as float32-exact JSON numbers, so what a projection stores is bit for bit
what the log holds. ``model`` and ``digests`` are identifiers: never redacted (a rewritten
digest would address another text), refused if one looked like a secret (ADR 0012).

With encryption on, the texts of a sealed subject (a corpus document) are recorded under it
instead (:class:`SubjectEmbeddingsRecorded`, ADR 0061): a plain digest confirms a guessed
text and a vector is derived from the text, so both must go when the subject's key goes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final
from uuid import UUID

from loom_runtime import (
    Keyring,
    LogCorruptError,
    LogEvent,
    open_subject_text,
    seal_subject_text,
    sealed_text_subject,
    stream_id,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_DIGEST_KEY_NONCE: Final = b"loom.digest\x00"
"""The one nonce the digest key is derived under (12 bytes). Sealing draws random nonces, so
it is never met there; encrypting the same plaintext under it always gives the same block."""
_DIGEST_KEY_INFO: Final = b"loom.embedding-digest-key"


class EmbeddingsRecorded(LogEvent):
    """``model`` embedded the texts whose SHA-256 digests are ``digests`` as ``vectors``."""

    TOPIC = "loom.memory.EmbeddingsRecorded"
    IDENTIFIERS = ("model", "digests")
    model: str
    digests: list[str]
    vectors: list[list[float]]


class SubjectEmbeddingsRecorded(LogEvent):
    """``model`` embedded texts of ``subject``: ``digests`` keyed under the subject's data key
    (:func:`keyed_digest`), ``vectors`` sealed under it (:func:`seal_vector`), so destroying
    the key leaves neither a digest that confirms a guessed text nor a vector."""

    TOPIC = "loom.memory.SubjectEmbeddingsRecorded"
    IDENTIFIERS = ("model", "subject", "digests")
    SEALED = ("vectors",)
    model: str
    subject: str
    digests: list[str]
    vectors: list[str]


def embeddings_stream(model: str) -> UUID:
    """The stream of one embedding model's recorded vectors."""
    return stream_id(f"embeddings:{model}")


def keyed_digest(key: AESGCM, text: str) -> str:
    """The address of a sealed subject's text: HMAC-SHA-256 of its UTF-8 under a key derived
    from the subject's data key, hex.

    The keyring hands out a data key only as its AES-GCM cipher, so the HMAC key is one
    AES-GCM encryption of a constant under a fixed nonce and label (a pseudo-random function
    of the data key; the same constant is the only plaintext ever encrypted under that
    nonce). Without the key, a digest neither confirms a guessed text nor matches the same
    text's digest under another subject."""
    derived = key.encrypt(_DIGEST_KEY_NONCE, bytes(32), _DIGEST_KEY_INFO)[:32]
    return hmac.new(derived, text.encode(), hashlib.sha256).hexdigest()


def _place(subject: str, model: str, digest: str) -> str:
    """A sealed vector's associated data: it opens only as this subject's, model's, text's."""
    return f"{subject}:embedding:{model}:{digest}"


def seal_vector(key: AESGCM, subject: str, model: str, digest: str, packed: bytes) -> str:
    """A packed vector (float32, little endian) sealed under ``subject``'s key."""
    encoded = base64.b64encode(packed).decode()
    return seal_subject_text(key, subject, encoded, _place(subject, model, digest))


def open_vectors(keyring: Keyring | None, event: SubjectEmbeddingsRecorded) -> list[bytes]:
    """The packed vectors of ``event`` in clear; :class:`~loom_runtime.ErasedError` once its
    subject's key is destroyed, :class:`~loom_runtime.EncryptionOffError` without a keyring,
    :class:`~loom_runtime.LogCorruptError` for a vector that is not a sealed text (every one
    is sealed: read as clear, an envelope decoded as base64 gave a vector of another width)."""
    if damaged(event):
        raise LogCorruptError(
            f"recorded vectors of model {event.model!r} hold one that is not a sealed text "
            "(every one is sealed): damaged when it was stored, by a loom before 5093c4b, or "
            "altered since"
        )
    places = (_place(event.subject, event.model, digest) for digest in event.digests)
    opened: Sequence[str] = [
        open_subject_text(keyring, vector, place)
        for vector, place in zip(event.vectors, places, strict=True)
    ]
    return [base64.b64decode(text) for text in opened]


def damaged(event: SubjectEmbeddingsRecorded) -> bool:
    """Whether ``event`` holds a vector that is not a sealed text: a loom before 5093c4b let
    its redactor write a marker into a ciphertext now and then (ADR 0012, amended
    "ciphertext"), before the chain hashed it, so ``loom verify`` passes and nothing can open
    it. A vector is derived data: the embedding projection skips such an event, its texts
    count as not embedded, and whatever embeds them next (a search, a memory's next open)
    records them again (ADR 0061, amended "sealed only")."""
    return not all(sealed_text_subject(vector) is not None for vector in event.vectors)
