"""A document's text is redacted before it is sealed (ADR 0012 with ADR 0055).

Sealing hides a secret from every redaction pattern, so a document ingested into an encrypted
log must be redacted first, exactly as the log redacts it in clear: the index, search and
passages read back the same text either way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom, MasterKey

SECRET = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"


@pytest.mark.parametrize("key", [None, MasterKey(b"q" * 32)], ids=["clear", "sealed"])
def test_a_documents_title_and_passages_are_redacted_before_sealing(
    tmp_path: Path, key: MasterKey | None
) -> None:
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=key) as loom:
        kb = open_knowledge_base(loom, "handbook")
        kb.sync([Doc(id="ops/keys", title=f"Key {SECRET}", text=f"The key is {SECRET}.")])
        [passage] = kb.passages()
        assert "MIIEvQIBADAN" not in passage.text and passage.text.startswith("The key is ")
        assert "MIIEvQIBADAN" not in (passage.title or "")
