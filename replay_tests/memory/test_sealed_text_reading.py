"""A stored vector or memory entry that should be sealed and is not reads as corrupt, never as
clear data (ADRs 0060 and 0061, amended "sealed only").

A subject's recorded vector and a sealed memory entry have a clear form that can never begin
like a sealed text (base64 has no ``.`` or ``:``; a clear entry is a JSON object, not a
string). So such a text that does not parse as a sealed one was altered (by hand, or once by
the log's redactor writing a marker into its ciphertext): a CI run decoded one vector's whole
envelope as base64 and searched with 1,379 floats for a 1,024-wide embedder.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_memory import EventSourcedMemory, InMemoryMemoryStore, MemoryEntry
from loom_memory.embedding_events import SubjectEmbeddingsRecorded, open_vectors, seal_vector
from loom_memory.erasure import memory_subject, open_entries
from loom_memory.errors import ProjectionFailedError
from loom_memory.events import MemoryAppended
from loom_runtime import LogCorruptError, Loom, MasterKey, keyring_for, stream_id
from loom_runtime import sealing as sealing_module

KEY = MasterKey(b"v" * 32)
SUBJECT = 'document:["handbook","ops/keys"]'
PACKED = bytes(range(16))  # four float32s


def _vectors_event(vector: str) -> SubjectEmbeddingsRecorded:
    return SubjectEmbeddingsRecorded(
        originator_id=stream_id("embeddings:m"),
        originator_version=1,
        timestamp=datetime.now(UTC),
        model="m",
        subject=SUBJECT,
        digests=["d"],
        vectors=[vector],
    )


def test_a_vector_that_is_not_a_sealed_text_is_corrupt(tmp_path: Path) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY) as loom:
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        aead = keyring.ensure(SUBJECT, position=loom.log.position)
        sealed = seal_vector(aead, SUBJECT, "m", "d", PACKED)
        assert open_vectors(keyring, _vectors_event(sealed)) == [PACKED]  # control
        marked = sealed.replace('"ciphertext":"', '"ciphertext":"[REDACTED:google-api-key]')
        clear = base64.b64encode(PACKED).decode()
        for altered in (marked, clear, sealed[:-1]):
            with pytest.raises(LogCorruptError, match="altered"):
                open_vectors(keyring, _vectors_event(altered))


def test_a_memory_entry_stored_as_a_string_that_is_not_a_sealed_text_is_corrupt(
    tmp_path: Path,
) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=KEY) as loom:
        keyring = keyring_for(loom.log.engine)
        assert keyring is not None
        keyring.ensure(memory_subject("notes", "k"), position=loom.log.position)  # live
        event = MemoryAppended(
            originator_id=stream_id("memory:notes"),
            originator_version=1,
            timestamp=datetime.now(UTC),
            memory="notes",
            key="k",
            entries=[msgspec.Raw(msgspec.json.encode('loom.sealed:{"subject":"memory:x"'))],
        )
        with pytest.raises(LogCorruptError, match="altered"):
            open_entries(keyring, event)


def test_a_memory_key_holding_a_damaged_entry_can_be_erased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression review: the entry an older loom's redactor damaged (a marker written into
    its ciphertext, before the chain hashed it) cannot be read, so its memory's projection
    refuses, naming the key. Erasing the key is the remedy, and it failed on that entry too
    (the erasure looks for recalls of the key's entries first): a data-protection request
    must not fail on data nobody can read. After it, the memory reads again."""
    real = sealing_module.seal_text

    def damaged(aead: Any, subject: str, text: str, ad: bytes) -> str:
        sealed = real(aead, subject, text, ad)
        if "second" not in text:
            return sealed
        return sealed.replace('"ciphertext":"', '"ciphertext":"[REDACTED:google-api-key]')

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        memory = EventSourcedMemory(loom, store=InMemoryMemoryStore())
        memory.append("alice", [MemoryEntry(content="first note", id="a1")])
        memory.append("bob", [MemoryEntry(content="bob's note", id="b1")])
        monkeypatch.setattr(sealing_module, "seal_text", damaged)
        with pytest.raises(ProjectionFailedError, match="erasing the key drops it"):
            memory.append("alice", [MemoryEntry(content="second note", id="a2")])  # logged
        monkeypatch.undo()
    with Loom(url, encryption=KEY) as loom:
        with pytest.raises(LogCorruptError, match=r"key 'alice': entry 0 of version 2"):
            EventSourcedMemory(loom, store=InMemoryMemoryStore())
        report = loom.erase(memory_key="memory:alice", reason="damaged entry", by="dpo")
        assert report.applied
        reopened = EventSourcedMemory(loom, store=InMemoryMemoryStore())
        assert [entry.id for entry in reopened.read("bob")] == ["b1"]
        assert reopened.read("alice") == []
