"""A framework splitter as a chunker: its odd output refused typed, its settings recorded.

``SplitterChunker`` wraps application code (any ``split_text``), whose passages go into the
log: what is not a list of texts is an :class:`InvalidDocumentError` naming the document,
never a str cut per character or an ``AttributeError``. And a scope reopened with a splitter
configured otherwise is cut again at its next sync, as with any chunker that has an identity.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_text_splitters import CharacterTextSplitter, RecursiveCharacterTextSplitter

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.bridges.splitter_chunker import SplitterChunker
from loom_knowledge.errors import InvalidDocumentError
from loom_runtime import Loom


class _Returning:
    """A splitter answering ``out`` whatever the text."""

    def __init__(self, out: object) -> None:
        self.out = out

    def split_text(self, text: str) -> object:
        return self.out


def _generated() -> Iterator[str]:
    yield from ("a b", " ", "c d")


@pytest.mark.parametrize(
    ("out", "said"),
    [
        ("hello world", "a str"),
        (None, "a NoneType"),
        ({"a b", "c d"}, "a set"),
        (["ok", None], r"passages\[1\] is a NoneType"),
        (["ok", 3], r"passages\[1\] is a int"),
        (["ok", b"x"], r"passages\[1\] is a bytes"),
    ],
)
def test_a_splitter_answering_no_list_of_texts_is_refused_typed(
    tmp_path: Path, out: object, said: str
) -> None:
    """A str was cut into one passage per character, a None or int piece raised
    AttributeError, and None itself TypeError: each is the corpus's typed refusal now, and
    nothing is written."""
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        kb = open_knowledge_base(loom, "s", chunker=SplitterChunker(_Returning(out)))
        with pytest.raises(InvalidDocumentError, match=said):
            kb.put_doc(Doc(id="d", text="hello world"))
        assert kb.list_docs() == []


@pytest.mark.parametrize("out", [["a b", " ", "c d"], ("a b", "", "c d"), _generated()])
def test_a_list_tuple_or_iterator_of_texts_is_taken_without_blanks(out: object) -> None:
    assert SplitterChunker(_Returning(out))(Doc(id="d", text="x")) == ["a b", "c d"]


def _open(url: str, splitter: object) -> list[str]:
    """Sync one long document into scope ``wiki`` of a new process's Loom cut by
    ``splitter``; the passages it holds after."""
    text = "Rotate the logs weekly. " * 20
    with Loom(url) as loom:
        kb = open_knowledge_base(loom, "wiki", chunker=SplitterChunker(splitter))  # type: ignore[arg-type]
        kb.sync([Doc(id="logs.md", text=text)])
        return [passage.text for passage in kb.passages()]


def test_a_scope_reopened_with_a_splitter_configured_otherwise_is_cut_again(
    tmp_path: Path,
) -> None:
    """SplitterChunker had no identity, so a scope reopened (a new deploy) with
    ``chunk_size=50`` instead of 1000 reported every document unchanged and kept the old cut
    for good. Its identity names the splitter's class and settings now."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    wide = _open(url, RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=0))
    assert len(wide) == 1
    narrow_splitter = RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=0)
    narrow = _open(url, narrow_splitter)
    assert narrow == narrow_splitter.split_text("Rotate the logs weekly. " * 20)
    assert len(narrow) > 1
    assert _open(url, CharacterTextSplitter(separator=".", chunk_size=50, chunk_overlap=0)) != (
        narrow
    )


def test_a_splitter_s_identity_is_its_class_and_settings() -> None:
    """Equally configured splitters (two objects) share an identity, in every process (no
    object address or hash order in it); another setting or class is another identity."""

    def identity(splitter: object) -> str:
        return SplitterChunker(splitter).identity  # type: ignore[arg-type]

    first = identity(RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=0))
    assert first == identity(RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=0))
    assert "RecursiveCharacterTextSplitter" in first and len(first) <= 200
    assert first != identity(RecursiveCharacterTextSplitter(chunk_size=51, chunk_overlap=0))
    assert first != identity(RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=1))
    assert first != identity(CharacterTextSplitter(chunk_size=50, chunk_overlap=0))
    assert identity(_Returning(["a"])) != identity(_Returning(["b"]))


class _Keyed:
    """A splitter whose settings are keyed by objects (options per tokenizer object)."""

    def __init__(self) -> None:
        self.overrides = {_Returning(["a"]): 100}

    def split_text(self, text: str) -> list[str]:
        return [text]


def test_settings_keyed_by_objects_give_one_identity_for_equal_splitters() -> None:
    """A mapping's keys went in by ``str()``, which for an object holds its address: two
    equally configured splitters (so two processes) had two identities, and a scope re-cut
    every document at each process's first sync (regression review)."""
    first, second = (SplitterChunker(_Keyed()).identity for _ in range(2))  # type: ignore[arg-type]
    assert first == second
