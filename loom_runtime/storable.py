"""What every loom store can hold: the one rule for text, and the one check for JSON values.

The log stores values as JSON, and the read models put text into SQL text columns and
full-text indexes. Two things break that silently rather than loudly:

* a NUL character truncates text in SQLite FTS and C-string APIs, and PostgreSQL refuses it
  in ``text``, so a value would be indexed as a fragment of itself or fail halfway through;
* a lone surrogate (``"\\ud800"``) is not valid Unicode and cannot be encoded as UTF-8.

Every package checks text with :func:`text_problem` and JSON-like values with
:func:`json_problem`, and raises its own typed error naming the path; a recorded error message
(whatever the failing code put in it) is escaped with :func:`storable_text` instead, because a
failure that cannot be recorded would leave an execution neither failed nor resumable.
"""

from __future__ import annotations

import math
import numbers
from typing import Final

JSON_KINDS: Final = "JSON-like: str, int, float, bool, None, list or str-keyed dict"


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored faithfully by every loom store, or None when it can."""
    if "\x00" in text:
        return (
            "contains a NUL character, which SQLite full-text search and PostgreSQL text "
            "cannot hold"
        )
    if not is_unicode(text):
        return "contains a lone surrogate, which is not valid Unicode and cannot be encoded"
    return None


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate), so it can be encoded as UTF-8.

    The half of :func:`text_problem` that the log's JSON needs: a NUL is escaped in JSON, so
    text that only the log holds (a decision key) may contain one.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate written as its backslash escape.

    Clean text is returned unchanged (the same object), so this costs one scan and one encode.
    """
    if text_problem(text) is None:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def json_problem(value: object, path: str = "") -> tuple[str, str] | None:
    """The first place ``value`` would not come back equal from the log, as ``(path, why)``.

    Tuples come back as lists and NaN or infinity as ``null``, so only plain JSON values pass:
    str (by :func:`text_problem`), int, finite float, bool, None, list and str-keyed dict.
    A loop over an explicit stack, so a deeply nested value cannot exhaust the interpreter's
    recursion limit (bound depth first with :func:`loom_runtime.codec.too_deep`).
    """
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return where, problem
        elif item is None or isinstance(item, bool | int):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return where, "is not a finite number (JSON has no NaN or infinity)"
        elif isinstance(item, list):
            stack.extend(
                (child, f"{where}[{index}]") for index, child in reversed(list(enumerate(item)))
            )
        elif isinstance(item, dict):
            children: list[tuple[object, str]] = []
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{where} key {key!r}", "is not a str (JSON object keys are strings)"
                problem = text_problem(key)
                if problem is not None:
                    return f"{where} key {key!r}", problem
                children.append((child, f"{where}[{key!r}]"))
            stack.extend(reversed(children))
        else:
            return where, f"is a {type(item).__name__}, not {JSON_KINDS}"
    return None


def finite_real(value: object) -> float | None:
    """``value`` as a float if it is a finite real number of any type (an int, a float,
    numpy's floats, a ``Fraction``; never a ``bool``), else None: the one test of a numeric
    option (a floor, a fraction), so a numpy ``float32`` is taken and a NaN, an infinity, an
    int past a float's range or a string is refused by the caller, typed."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None
