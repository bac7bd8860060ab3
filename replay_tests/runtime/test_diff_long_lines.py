"""A changed line too long to show whole is shown where it changed (``loom_runtime.diff``).

A prompt is one line of pretty JSON however many lines it has (its newlines are escaped), and
a system prompt is longer than a diff line is shown: cut from its start, a change past the cut
printed two identical lines, in a replay's failure and in what ``--loom-update`` accepted.
"""

from __future__ import annotations

import msgspec

from loom_runtime.diff import MAX_LINE_CHARS, diff

SYSTEM = "You are a support triage assistant.\nRoute each ticket to one queue.\n" * 10


def changed_lines(text: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if line[:1] in "-+" and not line.startswith(("---", "+++"))
    ]


def prompt_diff(before: str, after: str) -> str:
    return diff(
        msgspec.json.encode({"prompt": before}),
        msgspec.json.encode({"prompt": after}),
        label="input of model",
    )


def test_a_change_past_the_cut_is_in_what_is_shown() -> None:
    """Both sides of a change deep in a long line show the words that changed."""
    removed, added = changed_lines(prompt_diff(SYSTEM + "Answer briefly.", SYSTEM + "Be kind."))
    assert "Answer briefly." in removed and "Be kind." in added
    assert removed != added


def test_a_cut_line_says_what_it_left_out_on_each_side() -> None:
    """Skipped characters are counted before and after the excerpt, and it stays bounded."""
    removed, added = changed_lines(prompt_diff(SYSTEM + "A" + SYSTEM, SYSTEM + "B" + SYSTEM))
    for line in (removed, added):
        assert line.startswith(("-... (", "+... (")) and "characters) " in line
        assert line.endswith("more characters)")
        assert len(line) < MAX_LINE_CHARS + 80


def test_a_change_near_the_start_is_cut_as_before() -> None:
    """A change the head of the line already shows keeps the head."""
    removed, added = changed_lines(prompt_diff("Greet " + SYSTEM, "Hi " + SYSTEM))
    assert removed.startswith('-  "prompt": "Greet ') and added.startswith('+  "prompt": "Hi ')
    assert removed.endswith("more characters)")
