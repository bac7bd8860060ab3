"""Text from the log made inert before it reaches a terminal or a page.

Everything loom shows comes from a log that untrusted parties write into: a document's id and
title, a decision key, an exception message. Printed raw, an ESC sequence clears the screen,
retitles the window or plants a hyperlink (OSC 8); a C1 byte does the same on terminals that
honour 8-bit controls; a bidi override (U+202E) displays an id reversed, and a zero-width
character (or an invisible tag character, U+E0041 for "A") makes two different ids look equal
or hides words in a passage. :func:`visible` is the one rule that shows each
of these as ``<U+XXXX>`` instead of obeying it; the CLI and the HTML audit both call it, and
escape their own markup (Rich, HTML) on top.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import datetime

from loom_runtime.labels import NO_LABELS, Labels
from loom_runtime.timestamps import as_utc

_ACTING = "\x00-\x08\x0b-\x1f\x7f-\x9f"
"""C0 controls except tab and newline, DEL, C1 controls: what a terminal obeys."""
_HIDING = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
"""Every format character (Unicode category Cf): bidi marks, embeddings, overrides and
isolates, zero-width characters, invisible operators, the soft hyphen, and the tag characters
U+E0020-U+E007F, invisible copies of ASCII that hide an instruction in a passage from the
person reviewing it. Any of them makes two different ids look equal or hides text; listed as
ranges (building the class from ``unicodedata`` at import would cost the CLI a scan of every
code point), and a test checks the list against the running Python's Unicode database."""
_BREAKING = "\t\n\u2028\u2029"
"""What starts a new line (or jumps to a column): layout in a text, a forged line in an id."""

_SEPARATORS = "\u2028\u2029"
"""LINE and PARAGRAPH SEPARATOR: no layout a terminal makes, but a line break to a pager, an
editor or ``str.splitlines``: shown even where ``\n`` is layout."""
_MULTI_LINE = re.compile(f"[{_ACTING}{_HIDING}{_SEPARATORS}]")
_ONE_LINE = re.compile(f"[{_ACTING}{_HIDING}{_BREAKING}]")
_SPACES = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
"""Every space separator but U+0020 (Unicode category Zs): each prints as a space."""
_UNLIKE_ID = re.compile(f"[{_ACTING}{_HIDING}{_BREAKING}{_SPACES}]|^ | $")


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control, bidi and zero-width character shown as ``<U+XXXX>``.

    Tab and newline are kept as layout unless ``one_line`` (ids, keys, table cells, where a
    line break would forge a line of output); U+2028 and U+2029 never are. Idempotent: the
    result contains none of them.
    """
    pattern = _ONE_LINE if one_line else _MULTI_LINE
    return pattern.sub(lambda found: f"<U+{ord(found[0]):04X}>", text)


def full_date(moment: datetime) -> str:
    """``moment`` as every command dates (docs/cli.md): the full date and time in UTC, to the
    second (:func:`~loom_runtime.timestamps.as_utc`: a time stored without a zone is UTC)."""
    return as_utc(moment).strftime("%Y-%m-%d %H:%M:%S")


def identifier(text: str, *, marks: bool = True) -> str:
    """An id (a document's, a source's) as :func:`visible` shows a one-line value, and so that
    no two ids print alike: a space at either end, every space but U+0020 (a no-break space
    prints as a space) and, in an id not in Unicode's composed form (NFC), every combining
    mark (``e`` + U+0301 prints as ``é``) are shown as ``<U+XXXX>`` too.

    ``marks=False`` leaves the combining marks as written (a flow's name: Arabic or Hebrew
    typed in keyboard order is not in NFC, and every vowel mark would print as a code).

    Ids in NFC with ordinary spaces, in any script, print unchanged: the marks of a composed
    id are its letters' own. What no escaping can show apart are letters of different
    scripts drawn alike (Latin ``a`` and Cyrillic U+0430); telling those apart needs a policy on
    which scripts an id may use, which is the application's (loom stores ids exactly)."""
    shown = _UNLIKE_ID.sub(lambda found: f"<U+{ord(found[0]):04X}>", text)
    if not marks or unicodedata.is_normalized("NFC", shown):
        return shown
    return "".join(
        f"<U+{ord(char):04X}>" if unicodedata.combining(char) else char for char in shown
    )


def describe_meta(meta: object) -> str:
    """A decision's decoded ``meta`` as one short line: what an audit reader looks for first.

    The fields loom's recorders write are named plainly (``model gpt-4o``, ``812 ms``,
    ``usage prompt_tokens=12 ...``, ``2 retries: module:Error (paused 0.5 s), ...``); any
    other field is ``name=JSON``. Not made inert here: every caller shows it through
    :func:`visible` (and its own escaping), like every other value from the log.
    """
    if not isinstance(meta, dict):
        return "" if meta is None else _json(meta)
    parts = []
    for name, value in meta.items():
        if name == "model" and isinstance(value, str):
            parts.append(f"model {value}")
        elif name == "latency_ms" and _is_number(value):
            parts.append(f"{_number(value)} ms")
        elif name == "usage" and isinstance(value, dict):
            counts = " ".join(f"{k}={_json(v)}" for k, v in value.items() if _is_number(v))
            parts.append(f"usage {counts}" if counts else f"usage={_json(value)}")
        elif name == "attempts" and isinstance(value, list):
            parts.append(_attempts(value))
        else:
            parts.append(f"{name}={_json(value)}")
    return "; ".join(parts)


def _attempts(attempts: list[object]) -> str:
    described = []
    for attempt in attempts:
        if not isinstance(attempt, dict):
            described.append(_json(attempt))
            continue
        error = attempt.get("error", "?")
        message = attempt.get("message")
        paused = attempt.get("paused")
        text = f"{error}: {message}" if message else str(error)
        if _is_number(paused):
            text += f" (paused {_number(paused)} s)"
        described.append(text)
    label = "retry" if len(attempts) == 1 else "retries"
    return f"{len(attempts)} {label}: " + ", ".join(described)


def lineage_lines(
    *,
    parent_id: object | None,
    forked_at: object | None,
    reopenings: Iterable[tuple[str, str, Sequence[str]]],
    labels: Labels = NO_LABELS,
    started_by: object | None = None,
) -> list[str]:
    """Where an execution comes from, as ``executions show`` and the audit print it: who and
    what it ran for (its labels, ADR 0034), the parent it was forked from and the point (ADR
    0027), the decision that started it for a sub-agent (ADR 0040), and each reopened failure
    as ``(worker, error, keys computed again)`` (ADR 0026); no line for a plain run."""
    lines = [] if labels == NO_LABELS else [f"ran for {describe_labels(labels)}"]
    if parent_id is not None:
        lines.append(f"forked from execution {parent_id}, taking its first {forked_at} decision(s)")
    if started_by is not None:
        lines.append(f"started by a decision of execution {started_by} (a sub-agent)")
    for worker, error, dropped in reopenings:
        again = ", ".join(repr(key) for key in dropped) or "none"
        lines.append(f"reopened by {worker} after it failed ({error}); computed again: {again}")
    return lines


def describe_labels(labels: Labels) -> str:
    """An execution's labels as one line (``tenant acme; user u-42; tags eval, nightly``);
    not made inert here, like :func:`describe_meta`."""
    parts = [
        f"{name} {value}"
        for name, value in (
            ("tenant", labels.tenant),
            ("user", labels.user),
            ("session", labels.session),
        )
        if value is not None
    ]
    if labels.tags:
        parts.append("tags " + ", ".join(labels.tags))
    return "; ".join(parts)


def _number(value: object) -> str:
    """A number as short text; an int as it is (a huge one does not fit a float's ``g``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
