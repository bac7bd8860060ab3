"""The passage fence's tag rule as written, and the pinned alphabet generated from it.

A passage that writes the fence's own tag (``</passage>``, or anything a model reads as it)
has that tag's ``<`` written ``&lt;`` (:func:`~loom_knowledge.domain.grounding.grounded_request`,
ADR 0018). Which characters a model reads as the tag's is listed here by hand. Whether a
character folds to one under NFKC, is a word character or matches a letter ignoring case is
Unicode's answer, and Unicode changes with the interpreter (Python 3.11 has 14.0, 3.12 15.0,
3.13 15.1). A request built from the same recorded passages must be the same on every
interpreter, or a replay on another Python reports a changed prompt (ADR 0018, amended
"pinned"). So the rule is not applied from here: :func:`render` expands it once into
:mod:`loom_knowledge.domain.fence_alphabet` (every character each class matches, and the NFKC
folds that bear on it, as Unicode :data:`PINNED_UNICODE` answers), which the prompt builder
reads and nothing recomputes at run time.

After changing a list here, run ``python -m loom_knowledge.domain.fence_rule`` under Python
3.11 (a test fails while the generated file is stale).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Final

PINNED_UNICODE: Final = "14.0.0"
"""The Unicode version the alphabet is generated under: Python 3.11's, the oldest loom
supports, so a request recorded on 3.11 before the pin is built the same after it."""
NAME: Final = "passage"
"""The fence tag's name."""

UNSEEN: Final = (
    "\\s\\x00-\\x1f\\x7f-\\x9f"
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
    # The other format characters (Arabic, Syriac and Kaithi number signs and marks, the
    # interlinear annotation controls above, Egyptian hieroglyph format controls of Unicode
    # 12 and 15) and the braille pattern blank, which renders as a space.
    "\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\u2800\U000110bd\U000110cd"
    "\U00013430-\U0001343f"
)
"""Whitespace, the C0 and C1 control characters, Unicode's default-ignorable code points
(soft hyphen, zero-width space and joiners, bidi controls, variation selectors, tag
characters), every other format character and the braille blank: a model reads them, a
reader sees nothing (or a mark beside a number), so a tag written with them in it is still a
tag."""
TAG_BRACKETS: Final = (
    "<\uff1c\ufe64\u2039\u3008\u27e8\u29fc"
    # Unicode's confusables for "<" that NFKC leaves alone: modifier letter left arrowhead,
    # Canadian syllabics pa, runic kauna, a heavy angle quotation ornament, a Greek
    # instrumental notation symbol.
    "\u02c2\u1438\u16b2\u276e\U0001d236"
)
"""What the tag rule takes for a tag's ``<``: ``<`` and its fullwidth and small forms, the
angle quotation mark and brackets, and Unicode's confusables for ``<`` that NFKC leaves alone."""
SLASHES: Final = (
    "/\uff0f\u2215\u2044"
    # Unicode's confusables for "/" that NFKC leaves alone (U+2F03, the Kangxi radical, folds
    # to U+4E3F; the halfwidth katakana no U+FF89 to U+30CE).
    "\u1735\u2041\u2571\u27cb\u29f8\u2cc6\u2cc7\u3033\u30ce\u31d3\u4e3f\U0001d23a"
)
"""What the tag rule takes for the ``/`` of a closing tag, in folded text."""
LOOK_ALIKES: Final = {
    "p": (
        "\u0440\u0420\u03c1\u03a1\u2ca3\u2ca2\u1d18"  # Cyrillic er, rhos, small capital
        "\u2374\u00fe\u01bf\u03f8\u2ccf\u2cce"  # APL rho, thorn, wynn, sho, Coptic ha
        "\u13e2\u146d\ua4d1\U00010295\U0001cce5"  # Cherokee, syllabics, Lisu, Lycian
    ),
    "a": (
        "\u0430\u0410\u03b1\u0391\u0251\u237a\u1d00"  # Cyrillic a, alphas, small capital
        "\u13aa\u15c5\ua4ee\U000102a0\U00016f40\U0001ccd6"  # Cherokee, Lisu, Carian
    ),
    "s": (
        "\u0455\u0405\ua731\u13da\uabaa"  # Cyrillic dze, small capital s, Cherokee
        "\u01bd\u0d1f\u054f\u13d5\ua4e2"  # tone five, Malayalam tta, Armenian, Lisu
        "\U000118c1\U00010448\U00010420\U00010296\U00016f3a\U0001cce8"
    ),
    "g": (
        "\u0261\u0581\u050c\u0262"  # Latin script g, Armenian co, Komi sje, small capital
        "\u1d83\u018d\u13c0\u13f3\ua4d6\U0001ccdc"  # g with hook, turned delta, Lisu
    ),
    "e": (
        "\u0435\u0415\u0395\u04bd\u212e\uab32\u1d07"  # Cyrillic ie, epsilon, small capital
        "\u22ff\u2d39\u13ac\ua4f0\U000118a6\U000118ae\U00010286\U0001ccda"
    ),
}
"""Letters of other scripts a model reads as a letter of ``passage`` and that NFKC leaves
alone (``</passage>`` written with Cyrillic a's): matched as that letter by the tag rule.
Only the five letters of the fence's name (either case: the rule ignores case), from
Unicode's confusables for them (confusables.txt 17.0; U+1CCD6 and its neighbours, outlined
capitals, are unassigned to an older Python and fold to the letter under a newer one), and
their small capitals (U+1D18, U+1D00, U+A731, U+0262, U+1D07), which confusables.txt omits."""


def lowered(letters: str) -> str:
    """``letters`` and the lower case of each: ``re`` ignores case in a class by lowering the
    text, and (CPython 3.11) then misses a capital beyond the BMP listed without its small
    letter (U+118A6, Warang Citi)."""
    return "".join(dict.fromkeys(c for letter in letters for c in (letter, letter.lower())))


_LINE: Final = 96
"""The longest line the generated file has (ruff's limit is 100)."""


def _classes() -> dict[str, str]:
    """Each class of the rule as written (``re`` syntax), matched ignoring case."""
    classes = {
        "bracket": f"[{TAG_BRACKETS}]",
        "slash": f"[{SLASHES}]",
        "unseen": f"[{UNSEEN}]",
        "word": r"\w",
    }
    for letter in dict.fromkeys(NAME):
        classes[letter] = f"[{letter}{lowered(LOOK_ALIKES[letter])}]"
    return classes


def _code_points() -> Iterator[int]:
    """Every code point a text can hold: surrogates left out."""
    return (point for point in range(sys.maxunicode + 1) if not 0xD800 <= point < 0xE000)


def _members(pattern: str) -> set[int]:
    """Every code point ``pattern`` (one class) matches ignoring case, as this Python's
    Unicode answers."""
    compiled = re.compile(pattern, re.IGNORECASE)
    return {point for point in _code_points() if compiled.fullmatch(chr(point))}


def _runs(points: set[int]) -> list[tuple[int, int]]:
    """``points`` as runs of consecutive code points, first and last."""
    runs: list[tuple[int, int]] = []
    for point in sorted(points):
        if runs and runs[-1][1] == point - 1:
            runs[-1] = (runs[-1][0], point)
        else:
            runs.append((point, point))
    return runs


def _folds(members: dict[str, set[int]]) -> dict[int, str]:
    """The NFKC folds that can change a match: of a character the rule reads, to text holding
    one, or changing whether the name ends after it (the rest change nothing the rule sees)."""
    read = set().union(*(points for name, points in members.items() if name != "word"))
    unseen, word = members["unseen"], members["word"]

    def ends_name(point: int) -> bool:
        return point in unseen or point not in word

    folds = {}
    for point in _code_points():
        if point < 0x80:
            continue  # ASCII is never folded (the prompt builder's fast path)
        fold = unicodedata.normalize("NFKC", chr(point))
        if fold == chr(point):
            continue
        brought = {ord(char) for char in fold}
        if point in read or brought & read or ends_name(point) != ends_name(ord(fold[0])):
            folds[point] = fold
    return folds


def _literal(text: str) -> str:
    """``text`` as a double-quoted Python literal, every character beyond printable ASCII
    escaped, so the generated file shows no invisible or look-alike character."""
    out = []
    for char in text:
        point = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= point < 0x7F:
            out.append(char)
        elif point < 0x100:
            out.append(f"\\x{point:02x}")
        elif point < 0x10000:
            out.append(f"\\u{point:04x}")
        else:
            out.append(f"\\U{point:08x}")
    return '"' + "".join(out) + '"'


def _packed(items: list[str], indent: str = "    ") -> list[str]:
    """``items`` (each ending in a comma) packed into lines of at most :data:`_LINE`."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 1 + len(item) <= _LINE:
            lines[-1] += " " + item
        elif len(indent + item) > _LINE:  # one long fold (U+FDFA is eighteen characters)
            lines.append(f"{indent}{item}  # noqa: E501")
        else:
            lines.append(indent + item)
    return lines


def render() -> str:
    """The text of :mod:`loom_knowledge.domain.fence_alphabet`, from the lists above, as this
    Python's Unicode answers; refused unless that is :data:`PINNED_UNICODE`."""
    if unicodedata.unidata_version != PINNED_UNICODE:
        raise RuntimeError(
            f"this Python's Unicode is {unicodedata.unidata_version}, the fence alphabet is "
            f"pinned to {PINNED_UNICODE}: generate it with Python 3.11"
        )
    members = {name: _members(pattern) for name, pattern in _classes().items()}
    folds = _folds(members)
    lines = [
        f'"""The fence rule\'s alphabet under Unicode {PINNED_UNICODE}, generated from the',
        "lists in :mod:`loom_knowledge.domain.fence_rule` by ``python -m",
        "loom_knowledge.domain.fence_rule``: do not edit. The prompt builder reads these instead",
        "of this Python's Unicode, so a request is built the same on every interpreter (ADR",
        '0018, amended "pinned")."""',
        "",
        "from typing import Final",
        "",
        f"UNICODE_VERSION: Final = {_literal(PINNED_UNICODE)}",
        "",
        "# fmt: off",
        "CLASSES: Final[dict[str, tuple[tuple[int, int], ...]]] = {",
    ]
    for name, points in members.items():
        lines.append(f"    {_literal(name)}: (")
        runs = [f"(0x{first:x}, 0x{last:x})," for first, last in _runs(points)]
        lines += [*_packed(runs, indent="        "), "    ),"]
    lines += [
        "}",
        '"""Each class of the rule (``<`` and its look-alikes, ``/`` and its, the unseen',
        "characters, the word characters, each letter of the name and its look-alikes): every",
        'code point it matches ignoring case, as runs of consecutive points (first, last)."""',
        "",
        "FOLDS: Final[dict[int, str]] = {",
        *_packed([f"0x{point:x}: {_literal(fold)}," for point, fold in folds.items()]),
        "}",
        '"""The NFKC folds (code point to text) that can change what the rule matches."""',
        "# fmt: on",
        "",
    ]
    return "\n".join(lines)


GENERATED: Final = Path(__file__).with_name("fence_alphabet.py")
"""Where :func:`render`'s text is kept."""

if __name__ == "__main__":
    GENERATED.write_text(render(), encoding="utf-8")
