"""The stored form of sealed data (ADR 0049): :class:`Sealed` and the text that holds one.

Apart from :mod:`loom_runtime.sealing` because the redactor reads it too: a sealed text's
ciphertext is random base64, which now and then holds a run shaped like a secret, and the
redactor must know a sealed text when it meets one (ADR 0012, amended "ciphertext"). This
module depends on nothing of loom's, so both can import it.
"""

from __future__ import annotations

from typing import Final

import msgspec

MARK: Final = "loom.sealed"
"""The key of a sealed JSON value's one member, and the prefix of a sealed message. The mark
alone never decides that a field is sealed (a clear value may carry it: a sealed field copied
from another log); :func:`~loom_runtime.sealing.sealed_input` does, for a whole execution."""
TEXT_PREFIX: Final = MARK + ":"
"""How a sealed text begins: ``loom.sealed:{"subject":…,"nonce":…,"ciphertext":…}``."""


class Sealed(msgspec.Struct, frozen=True, gc=False):
    """One sealed field as stored: whose key opens it, the AES-GCM nonce and ciphertext.

    Untracked by the garbage collector (``gc=False``): its fields are text and bytes, so it
    can be in no reference cycle (msgspec found that per instance; now it is declared).
    """

    subject: str
    nonce: bytes
    ciphertext: bytes


UNREADABLE: Final = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
"""What decoding a stored text or value can raise: it is untrusted (ADR 0018), and JSON nested
deep enough makes msgspec raise ``RecursionError`` (a clear text that begins like a sealed
one and nests thousands of brackets), which is no crash of a read, only a value that is not
sealed."""
NONCE_BYTES: Final = 12
"""An AES-GCM nonce's length, as loom draws them."""
TAG_BYTES: Final = 16
"""The AES-GCM tag every ciphertext ends with."""
_sealed_decoder = msgspec.json.Decoder(Sealed)
_sealed_encoder = msgspec.json.Encoder()


def sealed_text(sealed: Sealed) -> str:
    """``sealed`` as a sealed text, the one way loom writes it."""
    return TEXT_PREFIX + _sealed_encoder.encode(sealed).decode()


def written_sealed_text(text: str) -> Sealed | None:
    """The sealed field of ``text`` if it is exactly a sealed text as loom writes one
    (:func:`sealed_text`: no other member, no space, a 12-byte nonce, room for the tag), else
    None. Stricter than :func:`sealed_of_text`, which msgspec satisfies with unknown members,
    a repeated member or spaces: what the redactor passes by must be ciphertext and nothing
    else (ADR 0012, amended "ciphertext")."""
    sealed = sealed_of_text(text)
    if (
        sealed is None
        or len(sealed.nonce) != NONCE_BYTES
        or len(sealed.ciphertext) < TAG_BYTES
        or sealed_text(sealed) != text
    ):
        return None
    return sealed


def sealed_of_text(text: str) -> Sealed | None:
    """The sealed field a text holds (the whole text, nothing before or after it), or None."""
    if not text.startswith(TEXT_PREFIX):
        return None
    try:
        return _sealed_decoder.decode(text[len(TEXT_PREFIX) :])
    except UNREADABLE:
        return None
