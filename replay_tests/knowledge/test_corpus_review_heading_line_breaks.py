"""A file's heading ends at any line break (ADR 0010, amended "corpus review").

The first line was split off at ``\\n`` only, and the heading pattern took any character, so a
file with carriage-return line ends, or a line separator right after its heading, became a
document whose whole body was its title and whose text was empty: nothing found it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loom_knowledge import Doc, load_docs, open_knowledge_base
from loom_runtime import Loom

BREAKS = {
    "CR": "\r",
    "CRLF": "\r\n",
    "LF": "\n",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "next line": "\x85",
}


@pytest.mark.parametrize("line_break", BREAKS.values(), ids=BREAKS.keys())
def test_the_title_is_the_heading_s_line_and_the_body_is_searchable_text(
    tmp_path: Path, loom: Loom, line_break: str
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    body = f"When the disk is full, rotate the logs.{line_break}{line_break}Then restart."
    (folder / "disk.md").write_bytes(f"# Disk runbook{line_break}{body}{line_break}".encode())
    (doc,) = load_docs(folder)
    assert doc == Doc(id="disk.md", text=body, title="Disk runbook")
    kb = open_knowledge_base(loom, "s")
    kb.sync(load_docs(folder))
    assert [p.doc_id for p in kb.search("rotate")] == ["disk.md"]
    before = loom.log.position
    kb.sync(load_docs(folder))
    assert loom.log.position == before + 1  # unchanged: the reconcile's own event only


def test_a_line_feed_file_s_text_is_unchanged_by_a_separator_later_in_it(tmp_path: Path) -> None:
    """Only the heading's own line is cut differently: the text of a file whose first line
    ends at a line feed is what it always was, byte for byte."""
    (tmp_path / "a.md").write_text("\n# Title ##\n\n  Body\u2028with\rbreaks.\r\n\n")
    assert load_docs(tmp_path) == [Doc(id="a.md", text="Body\u2028with\rbreaks.", title="Title")]
