"""Readable, bounded diffs of two stored JSON values: recorded (before) against replayed (after).

A divergence is read by a person, in a terminal or a failed test, so its diff must stay a
size a person reads, whatever the values' size. Unbounded, a 4 MB value changed in one place
made a 4 MB single-line diff that Rich wrapped in quadratic time (11.6 s; 20 MB did not finish
in 300 s). So the diff is cut in two ways, each saying what it left out:

* values whose pretty-printed JSON exceeds :data:`MAX_DIFFED_CHARS` or :data:`MAX_DIFFED_LINES`
  are not diffed at all (difflib is quadratic in the worst case): they are summarised by size,
  sha256 and an excerpt around the first differing byte, found in O(n);
* a diff is cut after :data:`MAX_LINES` lines ("... N more lines") and each line to
  :data:`MAX_LINE_CHARS` characters ("... N more characters"). A changed line is cut around
  where it differs from its counterpart (the added line for a removed one, and back), not
  from its start: a prompt is one line of pretty JSON, its newlines escaped, and cut from its
  start a change past the cut showed two identical lines.

Everything here is linear in the values' size.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from loom_runtime.codec import pretty

MAX_LINES: Final = 120
"""Diff lines shown before the rest is counted."""

MAX_LINE_CHARS: Final = 240
"""Characters shown of one diff line before the rest is counted."""

MAX_DIFFED_CHARS: Final = 1 << 20
"""Pretty-printed size (both values together) above which values are summarised, not diffed."""

MAX_DIFFED_LINES: Final = 20_000
"""Pretty-printed lines (both values together) above which values are summarised, not diffed."""

_EXCERPT: Final = 60


def diff(
    before: msgspec.Raw | bytes | None,
    after: msgspec.Raw | bytes | None,
    *,
    label: str,
    sides: tuple[str, str] = ("recorded", "replayed"),
) -> str:
    """A unified diff of ``before`` (recorded) against ``after`` (replayed), bounded in size.

    ``sides`` names the two values in the headers (``loom diff`` compares two recordings)."""
    old, new = pretty(before), pretty(after)
    if len(old) + len(new) > MAX_DIFFED_CHARS or (
        old.count("\n") + new.count("\n") > MAX_DIFFED_LINES
    ):
        return _summary(before, after, label=label, sides=sides)
    note: list[str] = []
    if old == new and bytes(before or b"") != bytes(after or b""):
        # Rendered with sorted keys the two read the same, but a replay compares bytes: show
        # the keys in the order each was built, or the diff would be empty.
        old, new = pretty(before, sort_keys=False), pretty(after, sort_keys=False)
        if old == new:  # not even the order: the same value spelled otherwise (an escape)
            return _summary(before, after, label=label, sides=sides, why="written differently")
        note = [f"{label}: the same keys and values; only the order of keys differs"]
    return _bounded(
        itertools.chain(
            note,
            difflib.unified_diff(
                _lines(old),
                _lines(new),
                fromfile=f"{sides[0]} {label}",
                tofile=f"{sides[1]} {label}",
            ),
        )
    )


def _lines(text: str) -> list[str]:
    """``text``'s lines with their ends, split at ``\n`` only: ``splitlines`` also splits at
    NEL, U+2028 and the like, which a recorded string holds as they are in pretty JSON."""
    return _LINE_ENDS.findall(text)


_LINE_ENDS = re.compile(r"[^\n]*\n|[^\n]+\Z")


def _bounded(lines: Iterable[str]) -> str:
    texts = [line.rstrip("\n") for line in lines]
    counterparts = _counterparts(texts)
    shown = [_cut(text, counterparts.get(at)) for at, text in enumerate(texts[:MAX_LINES])]
    if len(texts) > MAX_LINES:
        shown.append(f"... {len(texts) - MAX_LINES:,} more lines")
    return "\n".join(shown) + "\n"


def _counterparts(texts: list[str]) -> dict[int, str]:
    """Each changed line's counterpart, by its index in the unified diff ``texts``: in a run
    of removed lines followed by added ones, the n-th removed with the n-th added."""
    found: dict[int, str] = {}
    removed: list[int] = []
    added: list[int] = []
    hunks = next((at for at, text in enumerate(texts) if text.startswith("@@")), len(texts))
    for at, text in enumerate(texts[hunks:], start=hunks):  # past a note and the file headers
        if text[:1] == "-" and not added:
            removed.append(at)
            continue
        if text[:1] == "+":
            added.append(at)
            continue
        for old, new in zip(removed, added, strict=False):
            found[old], found[new] = texts[new], texts[old]
        removed, added = ([at] if text[:1] == "-" else []), []
    for old, new in zip(removed, added, strict=False):
        found[old], found[new] = texts[new], texts[old]
    return found


def _cut(text: str, counterpart: str | None) -> str:
    """``text`` cut to :data:`MAX_LINE_CHARS`, from its start unless it differs from its
    ``counterpart`` past what that shows: then from a little before where they differ."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    start = 0
    if counterpart is not None:  # compared after the "-"/"+" each starts with
        differs = 1 + _first_difference(text[1:], counterpart[1:])
        if differs > MAX_LINE_CHARS - _EXCERPT:
            start = differs - _EXCERPT
    end = start + MAX_LINE_CHARS
    before = f"{text[0]}... ({start - 1:,} characters) " if start else ""
    after = f"... ({len(text) - end:,} more characters)" if end < len(text) else ""
    return f"{before}{text[start:end]}{after}"


def _summary(
    before: msgspec.Raw | bytes | None,
    after: msgspec.Raw | bytes | None,
    *,
    label: str,
    sides: tuple[str, str],
    why: str = "too large to diff",
) -> str:
    """Both values by size and sha256, and an excerpt of each around their first difference."""
    old, new = bytes(before or b""), bytes(after or b"")
    at = _first_difference(memoryview(old), memoryview(new))
    start = max(0, at - _EXCERPT)
    lines = [f"{label} {why}; they differ from byte {at:,}:"]
    for side, data in ((sides[0], old), (sides[1], new)):
        excerpt = data[start : at + _EXCERPT].decode("utf-8", "replace")
        lines.append(
            f"{side} {label}: {len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()}, "
            f"...{excerpt!r}..."
        )
    return "\n".join(lines) + "\n"


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int:
    """The index of the first item (byte of a memoryview, character of a str) where ``a`` and
    ``b`` differ (a binary search of C-speed prefix comparisons: O(n log n) items compared,
    no Python loop over them)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low
