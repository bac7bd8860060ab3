"""Readable, bounded diffs of two stored JSON values: recorded (before) against replayed (after).

A divergence is read by a person, in a terminal or a failed test, so its diff must stay a
size a person reads, whatever the values' size. Unbounded, a 4 MB value changed in one place
made a 4 MB single-line diff that Rich wrapped in quadratic time (11.6 s; 20 MB did not finish
in 300 s). So the diff is cut in two ways, each saying what it left out:

* values whose pretty-printed JSON exceeds :data:`MAX_DIFFED_CHARS` or :data:`MAX_DIFFED_LINES`
  are not diffed at all (difflib is quadratic in the worst case): they are summarised by size,
  sha256 and an excerpt around the first differing byte, found in O(n);
* a diff is cut after :data:`MAX_LINES` lines ("... N more lines") and each line after
  :data:`MAX_LINE_CHARS` characters ("... N more characters").

Everything here is linear in the values' size.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
from collections.abc import Iterable
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
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"{sides[0]} {label}",
                tofile=f"{sides[1]} {label}",
            ),
        )
    )


def _bounded(lines: Iterable[str]) -> str:
    shown: list[str] = []
    hidden = 0
    for line in lines:
        if len(shown) >= MAX_LINES:
            hidden += 1
            continue
        text = line.rstrip("\n")
        if len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]}... ({len(text) - MAX_LINE_CHARS:,} more characters)"
        shown.append(text)
    if hidden:
        shown.append(f"... {hidden:,} more lines")
    return "\n".join(shown) + "\n"


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
    at = _first_difference(old, new)
    start = max(0, at - _EXCERPT)
    lines = [f"{label} {why}; they differ from byte {at:,}:"]
    for side, data in ((sides[0], old), (sides[1], new)):
        excerpt = data[start : at + _EXCERPT].decode("utf-8", "replace")
        lines.append(
            f"{side} {label}: {len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()}, "
            f"...{excerpt!r}..."
        )
    return "\n".join(lines) + "\n"


def _first_difference(a: bytes, b: bytes) -> int:
    """The index of the first byte where ``a`` and ``b`` differ (a binary search of C-speed
    prefix comparisons: O(n log n) bytes compared, no Python loop over the bytes)."""
    low, high = 0, min(len(a), len(b))
    view_a, view_b = memoryview(a), memoryview(b)
    while low < high:
        middle = (low + high + 1) // 2
        if view_a[:middle] == view_b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low
