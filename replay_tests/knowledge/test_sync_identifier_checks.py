"""An unchanged sync does not scan its document ids again; a secret id is refused every time.

A sync checks every doc id at its boundary, and the mapper checks them again in the
``CorpusReconciled`` event that lists them all (ADR 0012). A redactor remembers the names it
found clean (patterns never change), but it used to remember 256, first in first out: a sync
of more ids than that found none of them remembered and ran every pattern over each, twice.
These tests count the redactor's pattern scans (``secret_in``), not time: an unchanged re-sync
of 600 documents scans no id, and a secret id (never remembered) is scanned and refused on
every attempt, also after thousands of clean ids have been remembered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom_knowledge import Doc, KnowledgeError, open_knowledge_base
from loom_runtime import Loom, Redactor, SecretIdentifierError

SECRET_ID = "https://svc:pw123456@wiki/page.md"
"""A doc id holding a password in a URL: the built-in patterns refuse it."""


class Counting(Redactor):
    """The built-in redactor, counting the names it scans with its patterns."""

    def __init__(self) -> None:
        super().__init__()
        self.scanned: list[str] = []

    def secret_in(self, value: str) -> str | None:
        self.scanned.append(value)
        return super().secret_in(value)


def test_an_unchanged_resync_scans_no_document_id(tmp_path: Path) -> None:
    """The second, unchanged sync of 600 documents scans none of their ids (the first scans
    each; with 256 remembered names the second scanned all 600 at least twice)."""
    redactor = Counting()
    docs = [
        Doc(id=f"manual/page-{n}.md", text=f"Page {n} rotates the disk logs.") for n in range(600)
    ]
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=redactor) as loom:
        kb = open_knowledge_base(loom, "ops")
        kb.sync(docs, source="wiki")
        assert {doc.id for doc in docs} <= set(redactor.scanned)  # the control: each scanned
        redactor.scanned.clear()
        position = loom.log.position
        kb.sync(docs, source="wiki")
        assert loom.log.position == position + 1  # one CorpusReconciled listing all 600
        assert not [name for name in redactor.scanned if name.startswith("manual/")]


def test_a_secret_id_is_refused_every_time(tmp_path: Path) -> None:
    """A secret doc id is scanned and refused on each attempt, never remembered as clean."""
    redactor = Counting()
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", redactor=redactor) as loom:
        kb = open_knowledge_base(loom, "ops")
        for _ in range(3):
            with pytest.raises(KnowledgeError):
                kb.put_doc(Doc(id=SECRET_ID, text="text"), source="wiki")
        assert redactor.scanned.count(SECRET_ID) == 3
        assert loom.log.position == 0


def test_a_secret_among_remembered_names_is_refused() -> None:
    """After 20,000 clean names are remembered, a list of them with a secret is refused,
    naming the secret's index, and only the secret is scanned."""
    redactor = Counting()
    names = [f"team/runbook-{n}.md" for n in range(20_000)]
    redactor.check_identifier(names, path="ids")
    redactor.scanned.clear()
    with pytest.raises(SecretIdentifierError) as raised:
        redactor.check_identifier([*names, SECRET_ID], path="ids")
    assert raised.value.path == "ids[20000]"
    assert redactor.scanned == [SECRET_ID]
