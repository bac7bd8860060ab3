"""Strings from the log reach a terminal inert: no control sequence, no Rich markup."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from loom_runtime import Loom
from loom_runtime.tools.cli import app, console
from loom_runtime.tools.display import visible
from replay_tests.knowledge.hostile import CONTROL, DOC_ID, MARKUP, record_hostile_execution


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich wraps and cuts at 80 columns off a terminal; the assertions need whole values."""
    monkeypatch.setattr(console, "width", 2000)


def _output(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.output


@pytest.mark.parametrize(
    "command",
    [
        ["audit", "{id}"],
        ["executions", "show", "{id}"],
        ["executions", "list"],
        ["knowledge", "search", "disk full", "--scope", "ops"],
        ["knowledge", "list", "--scope", "ops"],
        ["knowledge", "as-of", "1", "--scope", "ops", "--query", "disk"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_no_control_character_from_the_log_reaches_the_terminal(
    loom: Loom, db_url: str, command: list[str]
) -> None:
    """ESC, C1, BEL, bidi and zero-width characters are shown as <U+XXXX> by every command."""
    execution_id = record_hostile_execution(loom)
    out = _output(*(part.format(id=execution_id) for part in command), "--db", db_url)
    assert not [c for c in CONTROL if c in out], repr(out)
    if command[0] != "executions" or command[1] == "show":
        assert "<U+001B>" in out or "<U+202E>" in out, out


def test_markup_in_a_document_prints_literally(loom: Loom, db_url: str) -> None:
    """A title or text holding Rich markup is neither styled nor made a hyperlink."""
    record_hostile_execution(loom)
    out = _output("knowledge", "search", "disk full", "--scope", "ops", "--db", db_url)
    assert MARKUP[1] in out
    out = _output("knowledge", "list", "--scope", "ops", "--db", db_url)
    assert visible(DOC_ID, one_line=True) in out


def test_an_error_message_with_markup_prints_literally(db_url: str) -> None:
    """A refusal quoting the user's input is not parsed as markup (`[/]` would crash Rich)."""
    out = _output("knowledge", "sync", "/nonexistent[/]", "--scope", "ops", "--db", db_url)
    assert "/nonexistent[/]" in out


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\x1b[2Jb", "a<U+001B>[2Jb"),
        ("tab\tnew\nline\rcr", "tab\tnew\nline<U+000D>cr"),
        ("\x9b\x7f\x00", "<U+009B><U+007F><U+0000>"),
        ("id\u202egnp.exe", "id<U+202E>gnp.exe"),
        (
            "ad\u200bmin\ufeff\u2060\u200d\u2066\u2069\u200e\u200f",
            "ad<U+200B>min<U+FEFF><U+2060><U+200D><U+2066><U+2069><U+200E><U+200F>",
        ),
        ("plain — ünïcödé 漢字", "plain — ünïcödé 漢字"),
    ],
)
def test_visible_escapes_exactly_the_invisible_characters(raw: str, shown: str) -> None:
    """Layout characters survive in multi-line text; everything that acts or hides is escaped."""
    assert visible(raw) == shown


def test_one_line_fields_escape_line_breaks_too() -> None:
    """An id cannot forge a second line of output."""
    assert visible("a\nb\tc\u2028", one_line=True) == "a<U+000A>b<U+0009>c<U+2028>"
