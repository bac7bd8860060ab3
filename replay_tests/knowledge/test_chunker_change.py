"""A scope opened with another chunker re-chunks its documents on the next sync.

The fingerprint covers a document's content, not how it is cut, and the chunker was recorded
nowhere: a deploy that changed ``pack_paragraphs(2000)`` to ``pack_paragraphs(100)`` synced the
same files as unchanged and kept the old passages for good, with no way to re-chunk short of
removing every document. A chunker that says what it is (``identity``, as ``pack_paragraphs``
does) is part of the fingerprint's recorded algorithm, so documents fingerprinted under
another chunker are written again, cut by the new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from loom_knowledge import (
    FINGERPRINT_ALGORITHM,
    Doc,
    InvalidOptionError,
    open_knowledge_base,
    pack_paragraphs,
)
from loom_runtime import Loom

SCOPE = "handbook"
TEXT = "\n\n".join(f"Paragraph {n} of the runbook says what to do at step {n}." for n in range(12))
DOCS = [Doc(id=f"d{n}.md", text=TEXT) for n in range(3)]


def _longest(loom: Loom) -> int:
    return max(len(passage.text) for passage in open_knowledge_base(loom, SCOPE).passages())


def test_a_changed_chunker_rewrites_every_document_cut_by_it(sqlite_url: str) -> None:
    with Loom(sqlite_url) as first:
        open_knowledge_base(first, SCOPE, chunker=pack_paragraphs(2000)).sync(DOCS, source="s")
        assert _longest(first) > 100
    with Loom(sqlite_url) as deployed:  # a later deploy, another chunker
        kb = open_knowledge_base(deployed, SCOPE, chunker=pack_paragraphs(100))
        result = kb.sync(DOCS, source="s")
        assert sorted(result.written) == [doc.id for doc in DOCS]
        assert _longest(deployed) <= 100
        assert kb.sync(DOCS, source="s").unchanged == tuple(d.id for d in DOCS)


def test_the_default_chunker_keeps_the_algorithm_every_corpus_was_written_with(
    sqlite_url: str,
) -> None:
    """A scope cut by the default ``pack_paragraphs()`` records the same algorithm as before
    this rule, so no existing corpus is rewritten by an upgrade."""
    with Loom(sqlite_url) as loom:
        kb = open_knowledge_base(loom, SCOPE)
        kb.sync(DOCS, source="s")
        assert {record.fingerprint_algorithm for record in kb.list_docs()} == {
            FINGERPRINT_ALGORITHM
        }


def test_a_chunker_without_an_identity_is_not_told_apart(sqlite_url: str) -> None:
    """A plain function cannot say what it is: two of them are the same to the fingerprint,
    as before (give it an ``identity`` attribute to have a change re-chunk)."""

    def by_line(doc: Doc) -> Sequence[str]:
        return [line for line in doc.text.splitlines() if line]

    def whole(doc: Doc) -> Sequence[str]:
        return [doc.text]

    with Loom(sqlite_url) as loom:
        open_knowledge_base(loom, SCOPE, chunker=by_line).sync(DOCS, source="s")
    with Loom(sqlite_url) as loom:
        kb = open_knowledge_base(loom, SCOPE, chunker=whole)
        assert kb.sync(DOCS, source="s").written == ()
    whole.identity = "whole documents"  # type: ignore[attr-defined]
    with Loom(sqlite_url) as loom:
        kb = open_knowledge_base(loom, SCOPE, chunker=whole)
        assert sorted(kb.sync(DOCS, source="s").written) == [doc.id for doc in DOCS]


def test_a_chunker_identity_that_is_not_a_short_text_is_refused(sqlite_url: str) -> None:
    """The identity is stored with every document: a non-str or an over-long one is refused
    when the scope is opened, naming the rule, before anything is written."""

    def whole(doc: Doc) -> Sequence[str]:
        return [doc.text]

    with Loom(sqlite_url) as loom:
        for bad in (7, "", "x" * 201):
            whole.identity = bad  # type: ignore[attr-defined]
            with pytest.raises(InvalidOptionError, match="identity"):
                open_knowledge_base(loom, f"scope{len(str(bad))}", chunker=whole)
        assert loom.log.position == 0


def test_the_cli_refuses_to_recut_a_scope_an_app_cut_with_its_own_chunker(
    sqlite_url: str, tmp_path: Path
) -> None:
    """`loom knowledge sync` opens a scope with the default chunker: on a scope the app cuts
    with its own, an unchanged folder was "4 written" (every document re-cut), and the app's
    next sync re-cut them back, each time (a corpus fuzz review). The command now refuses,
    writing nothing, and says how: sync from the app, or ``--rechunk`` to re-cut on purpose."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import ExitCode, app

    folder = tmp_path / "docs"
    folder.mkdir()
    for doc in DOCS:
        (folder / doc.id).write_text(doc.text)
    synced = ["knowledge", "sync", str(folder), f"--scope={SCOPE}", "--source=s", "--apply"]
    with Loom(sqlite_url) as loom:
        open_knowledge_base(loom, SCOPE, chunker=pack_paragraphs(100)).sync(
            [Doc(id=doc.id, text=doc.text, title=None) for doc in DOCS], source="s"
        )
        position = loom.log.position
    for args in (synced, synced[:-1]):  # the dry run says so too
        refused = CliRunner().invoke(app, [*args, f"--db={sqlite_url}"])
        assert refused.exit_code == ExitCode.USAGE, refused.output
        assert "--rechunk" in refused.output and "3 document(s)" in refused.output
    with Loom(sqlite_url) as loom:
        assert loom.log.position == position  # nothing was written
    recut = CliRunner().invoke(app, [*synced, "--rechunk", f"--db={sqlite_url}"])
    assert recut.exit_code == 0, recut.output
    with Loom(sqlite_url) as loom:
        assert _longest(loom) > 100  # re-cut with the default, as asked
        again = CliRunner().invoke(app, [*synced, f"--db={sqlite_url}"])
        assert again.exit_code == 0, again.output  # the control: the default's own scope
        assert loom.log.position == position + len(DOCS) + 2  # one event for the unchanged
