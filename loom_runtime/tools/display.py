"""Text from the log made inert before it reaches a terminal or a page.

Everything loom shows comes from a log that untrusted parties write into: a document's id and
title, a decision key, an exception message. Printed raw, an ESC sequence clears the screen,
retitles the window or plants a hyperlink (OSC 8); a C1 byte does the same on terminals that
honour 8-bit controls; a bidi override (U+202E) displays an id reversed, and a zero-width
character makes two different ids look equal. :func:`visible` is the one rule that shows each
of these as ``<U+XXXX>`` instead of obeying it; the CLI and the HTML audit both call it, and
escape their own markup (Rich, HTML) on top.
"""

from __future__ import annotations

import re

_ACTING = "\x00-\x08\x0b-\x1f\x7f-\x9f"
"""C0 controls except tab and newline, DEL, C1 controls: what a terminal obeys."""
_HIDING = "\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff"
"""Bidi marks, embeddings, overrides and isolates, zero-width characters: what misleads a reader."""
_BREAKING = "\t\n\u2028\u2029"
"""What starts a new line (or jumps to a column): layout in a text, a forged line in an id."""

_MULTI_LINE = re.compile(f"[{_ACTING}{_HIDING}]")
_ONE_LINE = re.compile(f"[{_ACTING}{_HIDING}{_BREAKING}]")


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control, bidi and zero-width character shown as ``<U+XXXX>``.

    Tab and newline are kept as layout unless ``one_line`` (ids, keys, table cells, where a
    line break would forge a line of output). Idempotent: the result contains none of them.
    """
    pattern = _ONE_LINE if one_line else _MULTI_LINE
    return pattern.sub(lambda found: f"<U+{ord(found[0]):04X}>", text)
