"""A crafted document cannot make a regular expression run in quadratic time.

The heading rule of a synced file (``# Title ##``) matched a lazy title before an optional
``[ \\t]+#+`` closing run: a first line of ``# a``, a long run of spaces and a letter made the
engine try every split of the run (16,000 spaces took 2.5 s of CPU; the 64 MiB a file may hold,
days). The fence's tag rule, ``<`` then two optional whitespace runs around an optional ``/``,
split a run after ``<`` the same way. Python's ``re`` holds the GIL for the whole match, so
the hang is caught from a subprocess, whose timeout is a hang detector, not a speed target.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loom_knowledge.corpus.corpus_files import load_docs

pytestmark = pytest.mark.slow  # a subprocess per case

RUN = 1_000_000
"""A whitespace run long enough that a quadratic match never ends within the timeout."""


def _returns(code: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the match did not end: quadratic in the whitespace run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok", done.stdout


def test_a_first_line_with_a_long_space_run_is_read_at_once(tmp_path: Path) -> None:
    """`# a<spaces>b` is a heading titled `a<spaces>b`, found in linear time."""
    (tmp_path / "slow.md").write_text("# a" + " " * RUN + "b\n\nbody")
    _returns(
        f"""
        from loom_knowledge.corpus.corpus_files import load_docs
        [doc] = load_docs({str(tmp_path)!r})
        assert doc.title == "a" + " " * {RUN} + "b" and doc.text == "body"
        print("ok")
        """
    )


def test_a_passage_with_a_long_run_after_a_bracket_is_fenced_at_once() -> None:
    """`<` and a long whitespace run in a passage is fenced in linear time."""
    _returns(
        f"""
        from loom_knowledge.domain.grounding import grounded_request
        from loom_knowledge.domain.types import Passage
        text = "<" + " " * {RUN} + "x"
        passage = Passage(doc_id="d", index=0, text=text, revision=1)
        assert text in grounded_request("i", "q", [passage], scope="s").messages[1].content
        print("ok")
        """
    )


@pytest.mark.parametrize(
    ("first_line", "title"),
    [
        ("# Title", "Title"),
        ("## Title ##", "Title"),
        ("# Using C#", "Using C#"),
        ("# Title  # ##", "Title  #"),
        ("#\tTabbed #\t", "Tabbed"),
        ("# ##", "##"),
        ("# a   b", "a   b"),
    ],
)
def test_the_heading_rule_reads_titles_as_before(
    tmp_path: Path, first_line: str, title: str
) -> None:
    """The closing `#` run needs whitespace before it; everything else is the title."""
    (tmp_path / "doc.md").write_text(f"{first_line}\n\nbody")
    [doc] = load_docs(tmp_path)
    assert doc.title == title
