"""A document whose sealed title happens to hold a key-shaped run reads back (ADRs 0012, 0055).

The log's redaction pass once rewrote such a run inside the ciphertext: the title's envelope
no longer parsed, the revision read as clear text, and ``passages()`` returned envelopes for
the title and the text. AES-GCM is a stream cipher, so the test picks the title's plaintext
for a nonce it chooses, making the stored ciphertext begin with ``AIza`` and 36 token
characters: the genuine write path, with the run the random nonce would give once in ~10^5.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_runtime import Loom, MasterKey, keyring_for
from loom_runtime import sealing as sealing_module

KEY = MasterKey(b"t" * 32)
SCOPE, DOC = "handbook", "ops/keys"
_RUN = re.compile(r"AIza[0-9A-Za-z_-]{36}")
_HEAD = base64.b64decode("AIza")  # the ciphertext's first three bytes
_REST = b"x" * 27  # the plaintext of its next 27, whatever the cipher makes of them


def _planted_title(aead: Any) -> tuple[bytes, str]:
    """A nonce and a printable title whose ciphertext under it opens with the run."""
    for counter in range(100_000):
        nonce = counter.to_bytes(12, "big")
        stream = aead.encrypt(nonce, bytes(30), b"")[:30]  # the keystream, whatever the AD
        head = bytes(a ^ b for a, b in zip(_HEAD, stream, strict=False))
        plaintext = head + _REST
        ciphertext = bytes(a ^ b for a, b in zip(plaintext, stream, strict=True))
        if all(0x21 <= byte <= 0x7E for byte in head) and _RUN.fullmatch(
            base64.b64encode(ciphertext).decode()
        ):
            return nonce, plaintext.decode() + " runbook"
    raise AssertionError("no nonce found")  # pragma: no cover


def test_a_title_whose_ciphertext_holds_a_key_shaped_run_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        aead = keyring.ensure(document_subject(SCOPE, DOC), position=loom.log.position)
        nonce, title = _planted_title(aead)
        seal_text, urandom = sealing_module.seal_text, os.urandom
        chosen: list[bytes] = []

        def seal_with_nonce(aead: Any, subject: str, text: str, ad: bytes) -> str:
            chosen.append(nonce) if text == title else None
            return seal_text(aead, subject, text, ad)

        def nonce_or_random(size: int) -> bytes:
            return chosen.pop() if chosen and size == 12 else urandom(size)

        monkeypatch.setattr(sealing_module, "seal_text", seal_with_nonce)
        monkeypatch.setattr(os, "urandom", nonce_or_random)
        kb.sync([Doc(id=DOC, title=title, text="Rotate the keys every quarter.")])
        monkeypatch.undo()
        stored = loom.log.engine.raw_connection().execute("SELECT state FROM stored_events")
        states = [bytes(state).decode() for (state,) in stored]
        assert any(_RUN.search(state) for state in states)  # the run is there
        [passage] = open_knowledge_base(loom, SCOPE).passages()
    assert (passage.title, passage.text) == (title, "Rotate the keys every quarter.")
