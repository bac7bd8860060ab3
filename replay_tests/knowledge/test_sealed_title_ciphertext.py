"""A document whose sealed title happens to hold a key-shaped run reads back (ADRs 0012, 0055).

The log's redaction pass once rewrote such a run inside the ciphertext: the title's envelope
no longer parsed, the revision read as clear text, and ``passages()`` returned envelopes for
the title and the text. AES-GCM is a stream cipher, so the test picks the title's plaintext
for a nonce it chooses, making the stored ciphertext begin with ``AIza`` and 36 token
characters: the genuine write path, with the run the random nonce would give once in ~10^5.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_knowledge.corpus.hybrid import passage_text
from loom_memory import EmbeddingTable, HashingEmbedder, embedding_projections
from loom_memory.embedding_events import (
    SubjectEmbeddingsRecorded,
    embeddings_stream,
    seal_vector,
)
from loom_memory.embedding_table import pack_vector
from loom_runtime import Loom, MasterKey, keyring_for, rebuild
from loom_runtime import sealing as sealing_module
from replay_tests.knowledge.test_document_erasure_embeddings import table_rows

KEY = MasterKey(b"t" * 32)
EMBEDDER = HashingEmbedder(dimension=64)
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
            if text == title:
                chosen.append(nonce)
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


def test_a_vector_damaged_when_it_was_stored_is_embedded_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression review: a log written before the fix may hold a sealed vector whose
    ciphertext the redactor marked. It cannot be opened, and the chain covers it (``loom
    verify`` passes), so reading it as corrupt made vector search fail for good. The event is
    skipped instead, with a warning: its text counts as not embedded, the next search embeds
    it again and records it, and a rebuild agrees. A vector is derived data; a memory entry,
    which is not, still reads as corrupt (``replay_tests/memory/test_sealed_text_reading.py``)."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY) as loom:
        kb = open_knowledge_base(loom, SCOPE, embedder=EMBEDDER, min_score=0.1)
        kb.sync([Doc(id=DOC, title="Keys", text="Rotate the signing keys every quarter.")])
        [passage] = kb.passages()
        subject = document_subject(SCOPE, DOC)
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        key = keyring.key(subject)
        text = passage_text(passage)
        digest = EmbeddingTable.address(text, key=key)
        sealed = seal_vector(
            key, subject, EMBEDDER.model, digest, pack_vector(EMBEDDER.embed([text])[0])
        )
        damaged = sealed.replace('"ciphertext":"', '"ciphertext":"[REDACTED:google-api-key]')
        fields = {"model": EMBEDDER.model, "subject": subject, "digests": [digest]}
        loom.log.append_replanned(
            embeddings_stream(EMBEDDER.model),
            lambda _version: (
                [(SubjectEmbeddingsRecorded, {**fields, "vectors": [damaged]})],
                None,
            ),
            what="a vector damaged before the fix",
        )
        with caplog.at_level(logging.WARNING, logger="loom.memory"):
            found = kb.search("signing keys", mode="vector")
        assert [p.doc_id for p in found] == [DOC]
        assert "are not sealed texts" in caplog.text
        recorded = loom.log.notifications(topics=[SubjectEmbeddingsRecorded.TOPIC])
        assert [loom.log.decode(r).digests for r in recorded] == [[digest], [digest]]
        [projection] = [
            p for p in embedding_projections(loom.log) if p.table.model == EMBEDDER.model
        ]
        live = table_rows(projection.table)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="loom.memory"):
            rebuild(loom.log, projection)
            rebuild(loom.log, projection)
        assert table_rows(projection.table) == live != []
        warned = [r for r in caplog.records if "sealed texts" in r.message]
        assert len(warned) == 1, warned  # a rebuild skips it again and says so once
