"""Identifiers near a secret pattern, fuzzed (ADR 0012).

The property: a doc id, source or memory key built from fragments of every built-in
pattern (and the text between them) is either stored exactly as given, or refused with the
package's typed identifier error having written nothing. Never rewritten: no stored id ever
holds a marker, and the store stays writable after either outcome.
"""

from __future__ import annotations

import string
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loom_knowledge import (
    CorpusIdentifierSecretError,
    Doc,
    KnowledgeBase,
    SourceConflictError,
    open_knowledge_base,
)
from loom_memory import EventSourcedMemory, MemoryEntry, MemoryIdentifierSecretError
from loom_runtime import Loom

FUZZ = settings.get_profile("loom-fuzz")

FRAGMENTS = st.sampled_from(
    [
        "Bearer ",
        "bearer authentication",
        "Basic ",
        "basic auth",
        "c3ZjOnB3ZA==",
        "https://svc:pw123456@wiki/",
        "redis://:",
        "://",
        "@",
        ":",
        "password=",
        "Password: ",
        '"password": "',
        "sk-",
        "sk-proj-",
        "sk-ant-",
        "ghp_",
        "github_pat_",
        "AIza",
        "xoxb-123456-",
        "AKIA",
        "-----BEGIN PRIVATE KEY-----",
        "abc123DEF456ghi789JKL0",
    ]
)
FILLER = st.text(alphabet=string.ascii_letters + string.digits + "._-/ ", max_size=24)
IDENTIFIERS = st.lists(st.one_of(FRAGMENTS, FILLER), min_size=1, max_size=5).map("".join)


@pytest.fixture
def loom(db_url: str) -> Iterator[Loom]:
    with Loom(db_url) as instance:
        yield instance


def _usable(name: str) -> bool:
    return bool(name.strip())


@FUZZ
@given(
    doc_id=IDENTIFIERS.filter(_usable), source=st.one_of(st.none(), IDENTIFIERS.filter(str.strip))
)
@example(doc_id="Bearer authentication.md", source="Bearer authentication")
@example(doc_id="https://svc:pw123456@wiki/page.md", source=None)
@example(doc_id="page.md", source="redis://:pw-123@cache")
def test_a_doc_id_or_source_is_stored_as_given_or_refused_whole(
    loom: Loom, doc_id: str, source: str | None
) -> None:
    """Stored exactly (id and source), or CorpusIdentifierSecretError with nothing written."""
    kb: KnowledgeBase = open_knowledge_base(loom, "fuzz-ids")
    before = (loom.log.position, kb.list_docs())
    try:
        record = kb.put_doc(Doc(id=doc_id, text="identifier probe"), source=source)
    except (CorpusIdentifierSecretError, SourceConflictError):  # examples share one corpus
        assert (loom.log.position, kb.list_docs()) == before
    else:
        assert (record.id, record.source) == (doc_id, source)
        assert doc_id in {passage.doc_id for passage in kb.passages()}
    assert all("[REDACTED:" not in r.id for r in kb.list_docs())
    kb.put_doc(Doc(id="still-writable", text=f"after {len(doc_id)}"))


@FUZZ
@given(key=IDENTIFIERS, entry_id=IDENTIFIERS)
@example(key="Bearer authentication.md", entry_id="Bearer authentication")
@example(key="https://svc:pw123456@wiki/page.md", entry_id="e")
def test_a_memory_key_or_entry_id_is_stored_as_given_or_refused_whole(
    loom: Loom, key: str, entry_id: str
) -> None:
    """Read back under the key given, or MemoryIdentifierSecretError with nothing appended."""
    memory = EventSourcedMemory(loom, name="fuzz-ids")
    before = (loom.log.position, memory.read(key))
    try:
        memory.append(key, [MemoryEntry(content="c", id=entry_id)])
    except MemoryIdentifierSecretError:
        assert (loom.log.position, memory.read(key)) == before
    else:
        assert memory.read(key)[-1].id == entry_id
    memory.append("still-writable", [MemoryEntry(content=len(key))])
