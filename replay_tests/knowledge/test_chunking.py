"""pack_paragraphs keeps every character of text, in order, in passages within the limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loom_knowledge import (
    Doc,
    InvalidOptionError,
    ParagraphPacker,
    Passage,
    pack_paragraphs,
    to_passages,
)
from loom_knowledge.domain import chunking


def _chunk(text: str, max_chars: int = 1000) -> list[str]:
    return list(pack_paragraphs(max_chars)(Doc(id="d", text=text)))


def _squashed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n"])
def test_text_with_nothing_to_search_gives_zero_passages(text: str) -> None:
    assert _chunk(text) == []


def test_short_paragraphs_are_packed_together_up_to_the_limit() -> None:
    assert _chunk("one\n\ntwo\n\nthree", max_chars=10) == ["one\n\ntwo", "three"]


def test_blank_lines_with_spaces_or_crlf_still_separate_paragraphs() -> None:
    assert _chunk("one\r\n  \r\ntwo", max_chars=4) == ["one", "two"]


def test_single_newlines_stay_inside_a_paragraph() -> None:
    assert _chunk("line one\nline two", max_chars=100) == ["line one\nline two"]


def test_a_paragraph_longer_than_the_limit_is_split_at_a_sentence_end() -> None:
    text = "First sentence is here. Second one follows it. Third closes."
    assert _chunk(text, max_chars=50) == [
        "First sentence is here. Second one follows it.",
        "Third closes.",
    ]


def test_without_a_late_sentence_end_the_split_is_at_whitespace() -> None:
    assert _chunk("Hi. alpha beta gamma delta", max_chars=16) == ["Hi. alpha beta", "gamma delta"]


def test_a_run_without_whitespace_is_cut_hard_and_not_dropped() -> None:
    blob = "x" * 25
    assert _chunk(blob, max_chars=10) == ["x" * 10, "x" * 10, "x" * 5]


def test_a_long_paragraph_is_cut_in_time_linear_in_its_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each cut reads a window of the limit, never the rest of the paragraph: a copy of the
    rest per cut made one 16 MiB paragraph (a minified export) take 31 s, quadratic in its
    length. Counted in characters handed to the cut, not timed."""
    seen: list[int] = []
    cut_point = chunking._cut_point

    def counted(text: str, max_chars: int) -> int:
        seen.append(len(text))
        return cut_point(text, max_chars)

    monkeypatch.setattr(chunking, "_cut_point", counted)
    text = "word " * 20_000  # one paragraph of 100,000 characters
    assert _squashed("".join(_chunk(text, max_chars=1000))) == _squashed(text)
    assert len(seen) >= 99 and max(seen) <= 1001


@given(
    text=st.text(alphabet=st.sampled_from("ab .!?\n\t\r"), max_size=400),
    max_chars=st.integers(min_value=1, max_value=60),
)
def test_every_passage_fits_and_no_text_is_lost_or_reordered(text: str, max_chars: int) -> None:
    passages = _chunk(text, max_chars=max_chars)
    assert all(0 < len(passage) <= max_chars for passage in passages)
    assert all(passage == passage.strip() for passage in passages)
    assert _squashed("".join(passages)) == _squashed(text)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "100"])
def test_a_limit_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    with pytest.raises(InvalidOptionError, match="max_chars"):
        pack_paragraphs(bad)  # type: ignore[arg-type]


def test_packers_with_the_same_limit_are_equal_options() -> None:
    assert pack_paragraphs() == ParagraphPacker(max_chars=1000)
    assert pack_paragraphs(500) != pack_paragraphs(1000)


def test_to_passages_indexes_from_zero_and_carries_title_meta_and_revision() -> None:
    doc = Doc(id="d", text="one\n\ntwo", title="T", meta={"k": "v"})
    assert to_passages(doc, revision=3, chunker=pack_paragraphs(3)) == [
        Passage(doc_id="d", index=0, text="one", title="T", meta={"k": "v"}, revision=3),
        Passage(doc_id="d", index=1, text="two", title="T", meta={"k": "v"}, revision=3),
    ]


def test_to_passages_accepts_any_chunker() -> None:
    def by_line(doc: Doc) -> list[str]:
        return doc.text.splitlines()

    passages = to_passages(Doc(id="d", text="a\nb"), revision=1, chunker=by_line)
    assert [p.text for p in passages] == ["a", "b"]
