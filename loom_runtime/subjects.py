"""Erasure subjects named after a pair of names: a document (scope, doc id), a memory key
(memory, key) (ADRs 0055 and 0060).

The packages above the runtime seal what they store under such subjects; the runtime's own
are executions (:func:`~loom_runtime.sealing.subject_of`). One rule for every pair, so a
subject reads the same way, and is parsed back the same way, whatever it names.
"""

from __future__ import annotations

import hashlib
from typing import Final

import msgspec

SUBJECT_LENGTH: Final = 300
"""The key table's subject column holds this many characters (PostgreSQL enforces it)."""


def pair_subject(prefix: str, first: str, second: str) -> str:
    """``prefix`` then ``[first, second]`` as JSON, so neither name needs a separator it could
    itself contain (a doc id or a memory key may hold any text).

    A subject too long for the key table is ``prefix`` then ``sha256:`` and the digest of the
    readable one: the forget event then names the digest, and whoever holds the pair finds it
    by computing this again (:func:`subject_pair` answers None for it)."""
    named = prefix + msgspec.json.encode([first, second]).decode()
    if len(named) <= SUBJECT_LENGTH:
        return named
    return f"{prefix}sha256:{hashlib.sha256(named.encode()).hexdigest()}"


def subject_pair(prefix: str, subject: str) -> tuple[str, str] | None:
    """The pair a readable subject of ``prefix`` names (:func:`pair_subject`); None for a
    subject of another prefix, a digest, or text that is not such a pair."""
    if not subject.startswith(prefix + "["):
        return None
    try:
        return msgspec.json.decode(subject[len(prefix) :], type=tuple[str, str])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


__all__ = ["SUBJECT_LENGTH", "pair_subject", "subject_pair"]
