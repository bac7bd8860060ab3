"""An erased document's terms leave the SQLite search index's pages, not only its rows.

FTS5 records a delete as a tombstone segment and keeps the deleted terms in older segments
until a merge drops them; with the erased document's segment merged away from the later
writes' (twenty documents written after it, one transaction each), only an explicit merge
after the purge makes the raw file free of them (ADR 0055, amended by ADR 0060).
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom, MasterKey
from replay_tests.runtime.test_erasure import _raw_bytes_sqlite


def test_an_erased_documents_terms_are_in_no_page_of_the_index(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    token = uuid4().hex
    with Loom(url, encryption=MasterKey(b"p" * 32)) as loom:
        kb = open_knowledge_base(loom, "handbook")
        kb.put_doc(Doc(id="people/alice", title="Alice", text=f"Alice's badge is {token}."))
        for number in range(20):
            kb.put_doc(Doc(id=f"ops/{number}", title="Ops", text=f"Runbook step {number}."))
        assert [p.doc_id for p in kb.search(token)] == ["people/alice"]
        loom.erase(document="handbook:people/alice", reason="request", by="dpo")
        assert kb.search(token) == []
        assert [p.doc_id for p in kb.search("runbook step 7")][:1] == ["ops/7"]
    assert _raw_bytes_sqlite(url).count(token.encode()) == 0
