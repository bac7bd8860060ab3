"""Erasing a document of a knowledge scope whose name holds a colon (ADR 0055, amended).

Scopes may hold any text, colons included (``tenant:acme``), while a document is named to
``loom erase --document`` and ``Loom.erase(document=...)`` as ``SCOPE:DOC_ID``. Split at the
first colon, ``tenant:acme:people/alice`` named scope ``tenant`` and could never erase the
document: a person's data the erasure could not reach. The name is now resolved against the
log (each colon a candidate split); a name that fits more than one document is refused, and
the pair form the forget log itself shows (``["SCOPE","DOC_ID"]``) names one exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.erasure import document_subject
from loom_runtime import ErasureSubjectError, Loom, MasterKey

KEY = MasterKey(b"e" * 32)


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'loom.db'}"


def _ids(loom: Loom, scope: str) -> set[str]:
    return {doc.id for doc in open_knowledge_base(loom, scope).list_docs()}


def test_a_document_of_a_scope_with_a_colon_is_erased_by_its_name(tmp_path: Path) -> None:
    with Loom(_url(tmp_path), encryption=KEY) as loom:
        kb = open_knowledge_base(loom, "tenant:acme")
        kb.sync([Doc(id="people/alice", text="Alice lives at 1 Secret Lane.")])
        report = loom.erase(document="tenant:acme:people/alice", reason="request", by="dpo")
        assert [s.subject for s in report.subjects] == [
            document_subject("tenant:acme", "people/alice")
        ]
        assert _ids(loom, "tenant:acme") == set()
        assert kb.search("Secret Lane") == []


def test_a_name_fitting_two_documents_is_refused_and_the_pair_form_names_one(
    tmp_path: Path,
) -> None:
    with Loom(_url(tmp_path), encryption=KEY) as loom:
        open_knowledge_base(loom, "a").sync([Doc(id="b:c", text="first document")])
        open_knowledge_base(loom, "a:b").sync([Doc(id="c", text="second document")])
        head = loom.log.position
        with pytest.raises(ErasureSubjectError) as refused:
            loom.erase(document="a:b:c", reason="request", by="dpo")
        message = str(refused.value)
        assert "scope 'a', document 'b:c'" in message
        assert "scope 'a:b', document 'c'" in message
        assert '["a:b","c"]' in message  # how to name one of them
        assert loom.log.position == head  # nothing written

        report = loom.erase(document='["a:b","c"]', reason="request", by="dpo")
        assert [s.subject for s in report.subjects] == [document_subject("a:b", "c")]
        assert _ids(loom, "a:b") == set()
        assert _ids(loom, "a") == {"b:c"}  # the other one is untouched


@pytest.mark.parametrize(
    "named", ['["a:b"]', '["a:b", 1]', '["a:b","c","d"]', '["", "c"]', '["a:b", " "]', "[x"]
)
def test_a_malformed_pair_is_a_typed_error_that_writes_nothing(tmp_path: Path, named: str) -> None:
    with Loom(_url(tmp_path), encryption=KEY) as loom:
        open_knowledge_base(loom, "a:b").sync([Doc(id="c", text="a document")])
        head = loom.log.position
        with pytest.raises(ErasureSubjectError, match="nothing was written"):
            loom.erase(document=named, reason="request", by="dpo")
        assert loom.log.position == head


def test_the_cli_erases_a_document_of_a_scope_with_a_colon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = _url(tmp_path)
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        open_knowledge_base(loom, "tenant:acme").sync([Doc(id="people/alice", text="Alice.")])
    runner = CliRunner()
    named = ["--document", "tenant:acme:people/alice", "--reason", "request", "--db", url]
    applied = runner.invoke(app, ["erase", *named, "--apply"])
    assert applied.exit_code == 0, applied.output
    assert "erased 1 document(s)" in applied.output
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        assert _ids(loom, "tenant:acme") == set()
