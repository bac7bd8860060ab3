"""A corpus written by code that keyed the counts by position level first (ADR 0062).

Opened by this code, the passage store's ``terms_at`` table is dropped and counted again from
the passages, keyed term first; searches as of every position of the history, and the current
one, answer exactly as before. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from loom_knowledge import Doc, KnowledgeBase, Passage, open_knowledge_base
from loom_knowledge.corpus.knowledge_base import corpus_index
from loom_runtime import Loom
from replay_tests.memory.test_position_counts_layout import (
    NEW_KEY,
    OLD_KEY,
    _key_level_first,
    _terms_key,
)

QUERIES = ("disk logs", "rotate", "inodes check", "certificates renew", "resolver dns disk")


def _answers(loom: Loom, kb: KnowledgeBase) -> list[list[Passage]]:
    """The ranked passages of each query as of every position, then now."""
    found = [
        kb.as_of(position).search(query, limit=5)
        for position in range(1, loom.log.position + 1)
        for query in QUERIES
    ]
    return found + [kb.search(query, limit=5) for query in QUERIES]


def test_a_corpus_keyed_level_first_answers_the_same_once_reopened(db_url: str) -> None:
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.sync(
            [
                Doc(id="disk.md", text="Disk full: rotate the logs."),
                Doc(id="dns.md", text="DNS down: check the resolver, then the disk."),
            ],
            source="repo",
        )
        kb.put_doc(
            Doc(id="disk.md", text="Disk full: check inodes, then rotate logs."), source="repo"
        )
        kb.put_doc(
            Doc(id="tls.md", text="Certificates expire: renew them, check the disk."), source="repo"
        )
        kb.remove_doc("dns.md", source="repo")
        before = _answers(loom, kb)
        store = corpus_index(loom).store
        _key_level_first(store)
        assert _terms_key(store) == OLD_KEY
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "ops")
        assert _answers(loom, kb) == before
        assert _terms_key(corpus_index(loom).store) == NEW_KEY
        assert any(before)  # the queries found something to compare
