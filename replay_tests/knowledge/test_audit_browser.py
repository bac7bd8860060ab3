"""The HTML audit in a real browser (headless Chromium): it renders, runs nothing, hides nothing.

Marked ``browser`` (deselect with ``-m "not browser"``). ``scripts/test`` installs Debian's
``chromium`` when it is missing and it can; without it these tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from loom_knowledge.tools.audit import audit
from loom_knowledge.tools.audit_render import render_html
from loom_runtime import Loom
from loom_runtime.tools.display import visible
from replay_tests.knowledge.hostile import (
    CONTROL,
    DOC_ID,
    ERROR,
    KEY,
    PLANTED,
    record_hostile_execution,
)
from replay_tests.knowledge.test_audit import audited  # noqa: F401 (a fixture)

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="HEADLESS CHROMIUM IS NOT INSTALLED: the HTML audit was NOT checked in a "
        "browser; apt-get install chromium (scripts/test does this when run as root)",
    ),
]


def _dom(page: Path, profile: Path) -> str:
    """The DOM after Chromium loaded ``page`` and gave any script 2 s of virtual time to run."""
    assert CHROMIUM is not None
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses root otherwise
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            *sandbox,
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=2000",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout


class _Page(HTMLParser):
    """The elements, attributes and visible text of a dumped DOM."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_html_page_renders_in_headless_chromium(
    audited: tuple[Loom, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Chromium loads the page from a file and its DOM holds the timeline's four cards."""
    loom, run = audited
    page = tmp_path / "audit.html"
    page.write_text(render_html(audit(loom, run.execution_id)), encoding="utf-8")
    dom = _dom(page, tmp_path / "profile")
    assert dom.count("<li class=") == 4  # started, retrieval, model call, outcome
    assert "superseded" in dom


def test_a_page_built_from_hostile_strings_runs_nothing_and_shows_them_literally(
    loom: Loom, tmp_path: Path
) -> None:
    """Planted <script>, onerror=, javascript: and </textarea> stay text; bidi and zero-width
    characters and ESC are shown as <U+XXXX>, so no id displays reversed or as another."""
    execution_id = record_hostile_execution(loom)
    page = tmp_path / "audit.html"
    page.write_text(render_html(audit(loom, execution_id)), encoding="utf-8")
    dom = _dom(page, tmp_path / "profile")

    assert "PWNED" not in dom  # no planted script ran: it would have written the word
    parsed = _Page()
    parsed.feed(dom)
    assert {"script", "img", "a", "textarea", "iframe"}.isdisjoint(parsed.tags)
    assert not [name for name in parsed.attributes if name.startswith("on") or name == "href"]
    assert not [c for c in CONTROL if c in dom]
    text = "".join(parsed.text)
    for planted in PLANTED:
        assert planted in text, planted
    for field in (DOC_ID, KEY, ERROR):  # the title is not part of an audit
        assert visible(field) in text, field
    assert "<U+202E>" in text and "<U+200B>" in text and "<U+001B>" in text
