"""A sealed text's ciphertext is never rewritten by the redactor (ADR 0012 with ADR 0049).

A sealed text (``loom.sealed:{...}``: a document's title and passages, a memory entry, a
recorded vector, a sealed execution's failure message) is redacted *before* it is sealed, and
its base64 ciphertext is random. Random base64 holds a run shaped like a Google API key
(``AIza`` and 35 token characters) about once in 250,000 sealed vectors; the log's redaction
pass then wrote a marker into the ciphertext, the envelope no longer parsed, and readers took
the mangled envelope for clear text (a CI run read a 4,096-byte vector's envelope as 1,379
floats). These tests plant such a run in a genuine envelope's ciphertext.
"""

from __future__ import annotations

import base64

import msgspec
import pytest

from loom_runtime import Redactor, SecretRefusedError
from loom_runtime.sealing import Sealed

RUN = "AIza" + "Sy" + "B" * 34
"""A Google-API-key-shaped run, 40 base64 characters (30 bytes): what a ciphertext may hold."""


def sealed_text(ciphertext: bytes, *, subject: str = "document:handbook") -> str:
    """A sealed text as :func:`~loom_runtime.seal_subject_text` stores one."""
    sealed = Sealed(subject, bytes(12), ciphertext)
    return "loom.sealed:" + msgspec.json.encode(sealed).decode()


PLANTED = sealed_text(base64.b64decode(RUN) + bytes(16))


def _through(redactor: Redactor, api: str, text: str) -> object:
    if api == "text":
        return redactor.text(text, path="event.title")
    if api == "value":
        return redactor.value({"passages": [text]}, path="event")
    raw = msgspec.Raw(msgspec.json.encode([text]))
    return bytes(redactor.raw(raw, path="event.entries"))


def _as_given(api: str, text: str) -> object:
    return {"text": text, "value": {"passages": [text]}}.get(api, msgspec.json.encode([text]))


@pytest.mark.parametrize("api", ["text", "value", "raw"])
@pytest.mark.parametrize("mode", ["redact", "refuse"])
def test_a_sealed_texts_ciphertext_is_stored_as_it_was_sealed(api: str, mode: str) -> None:
    redactor = Redactor(mode=mode)  # type: ignore[arg-type]
    assert _through(redactor, api, PLANTED) == _as_given(api, PLANTED)
    assert redactor.total == 0


@pytest.mark.parametrize("api", ["text", "value", "raw"])
def test_the_same_run_in_clear_text_is_redacted(api: str) -> None:
    """Control: the run is one the built-in patterns find, so the test above can fail."""
    clear = f'quoted: "{RUN}"'
    assert RUN not in str(_through(Redactor(), api, clear))
    with pytest.raises(SecretRefusedError):
        _through(Redactor(mode="refuse"), api, clear)


def _shapes() -> list[str]:
    whole = sealed_text(base64.b64decode(RUN) + bytes(16))
    body = whole.removeprefix("loom.sealed:")
    return [
        whole.replace(',"nonce":"AAAAAAAAAAAAAAAA"', ""),  # a member missing
        whole + " and more",  # text after it
        sealed_text(b"x" * 16, subject=f"document:{RUN}"),  # a subject holding a secret
        # Regression review: what msgspec decodes but ``seal_text`` never writes.
        whole[:-1] + f',"note":"{RUN}"}}',  # an unknown member
        whole[:-1] + f',"note":{{"deep":"{RUN}"}}}}',
        f'loom.sealed:{{"subject":"{RUN}",' + body[1:],  # a duplicate subject, the last wins
        whole.replace(",", ", "),  # whitespace
        whole.replace('"nonce":"AAAAAAAAAAAAAAAA"', '"nonce":"AAAA"'),  # a short nonce
    ]


@pytest.mark.parametrize("text", _shapes())
def test_text_shaped_almost_like_a_sealed_text_is_redacted(text: str) -> None:
    """Only a text exactly as ``seal_text`` writes one is passed by: anything else shaped
    like one is scanned as any text is, and a subject holding a secret (a genuine subject is
    made of identifiers, each refused at its boundary if it held one) is no sealed text."""
    assert RUN not in Redactor().text(text, path="event.title"), text
    with pytest.raises(SecretRefusedError):
        Redactor(mode="refuse").text(text, path="event.title")
