"""Realistic text for the memory and corpus sections: windows of real manuals, seeded queries.

Why real text: search cost depends on term statistics (how many entries a query term matches,
how long the posting lists are). Repeated or random words would make every term either match
everything or nothing. The text comes from the project's shared corpora (the PostgreSQL 13,
15 and 17 manuals and the Python 3.11 manual, ``/work/shared/data/corpora``; override with
``LOOM_BENCH_CORPORA``); the back-of-book index page is left out, as the corpora's README asks.

Pages are split into paragraphs (blank lines), whitespace inside a paragraph is collapsed, and
the paragraph stream is cut into windows of about ``size`` characters at word boundaries. When
a size needs more windows than the manuals hold, the stream is cut again starting half a window
later, so every window's text is distinct while the vocabulary and its frequencies stay those of
the manuals. Everything is deterministic: the same arguments give the same texts, and queries
come from a seeded generator.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from benchmarks.harness import InstrumentError
from loom_memory import tokenize

DEFAULT_DIRECTORY = Path("/work/shared/data/corpora")
FILES = ("pg13", "pg15.18", "pg17", "py3.11")
"""pg15.20 is left out: a minor release, nearly every page identical to pg15.18."""
EXCLUDED_PAGES = frozenset({"bookindex.html"})
QUERY_SEED = 20_240_603

_BLANK_LINE = re.compile(r"\n\s*\n")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Window:
    """A piece of a page: where it came from (for ids and titles) and its text."""

    origin: str
    title: str
    text: str


def corpora_directory() -> Path:
    """Where the ``*.jsonl.gz`` corpora are; a missing directory is an instrument error."""
    directory = Path(os.environ.get("LOOM_BENCH_CORPORA") or DEFAULT_DIRECTORY)
    missing = [name for name in FILES if not (directory / f"{name}.jsonl.gz").exists()]
    if missing:
        raise InstrumentError(
            f"corpora {', '.join(missing)} not found in {directory}: set LOOM_BENCH_CORPORA "
            "to the directory holding pg13.jsonl.gz, pg15.18.jsonl.gz, pg17.jsonl.gz and "
            "py3.11.jsonl.gz"
        )
    return directory


Page = tuple[str, str, tuple[str, ...]]
"""A page as (origin, title, paragraphs)."""


class _Pages:
    """Every page, in file then page order, read from the files only as far as a caller
    iterates. A few windows need the first pages, not all of them: parsing the four manuals
    whole is a second and a half (once per process, as every test worker paid it for three
    documents). What was read is kept, so a second pass reads nothing again. One thread at a
    time: no caller iterates it from two (the benchmarks' parallel workers are processes)."""

    def __init__(self) -> None:
        self._read: list[Page] = []
        self._unread = self._parse(corpora_directory())  # a missing directory fails here

    def __iter__(self) -> Iterator[Page]:
        index = 0
        while True:
            if index == len(self._read):
                try:
                    page = next(self._unread, None)
                except BaseException:
                    # The generator is finished now: a later pass would take the pages read so
                    # far for the whole corpus. Forget this reader; the next call starts anew.
                    _pages.cache_clear()
                    raise
                if page is None:
                    return
                self._read.append(page)
            yield self._read[index]
            index += 1

    @staticmethod
    def _parse(directory: Path) -> Iterator[Page]:
        for name in FILES:
            with gzip.open(directory / f"{name}.jsonl.gz", "rt", encoding="utf-8") as lines:
                for line in lines:
                    page = json.loads(line)
                    if page["id"] in EXCLUDED_PAGES:
                        continue
                    paragraphs = tuple(
                        collapsed
                        for paragraph in _BLANK_LINE.split(page["text"])
                        if (collapsed := _SPACE.sub(" ", paragraph).strip())
                    )
                    if paragraphs:
                        title = _SPACE.sub(" ", page.get("title") or page["id"]).strip()
                        yield (f"{name}/{page['id']}", title, paragraphs)


@cache
def _pages() -> _Pages:
    """The pages of :func:`corpora_directory`, shared by every caller in this process."""
    return _Pages()


def windows(size: int, count: int) -> list[Window]:
    """``count`` distinct windows of about ``size`` characters (paragraphs joined by a blank
    line, never cut inside a word)."""
    found: list[Window] = []
    seen: set[str] = set()  # the PostgreSQL manuals share many pages word for word
    for offset in (0, size // 2, size // 4, 3 * size // 4):
        for window in _cut(size, offset):
            if window.text in seen:
                continue
            seen.add(window.text)
            found.append(window)
            if len(found) == count:
                return found
    raise InstrumentError(f"the corpora hold fewer than {count:,} windows of {size} characters")


def _cut(size: int, offset: int) -> Iterator[Window]:
    """Cut every page into windows of about ``size`` characters, skipping ``offset`` first."""
    for origin, title, paragraphs in _pages():
        words = " \n\n ".join(paragraphs).split(" ")
        start, skipped = 0, 0
        while start < len(words) and skipped < offset:
            skipped += len(words[start]) + 1
            start += 1
        piece: list[str] = []
        length = 0
        for word in words[start:]:
            piece.append(word)
            length += len(word) + 1
            if length >= size:
                yield Window(origin, title, _join(piece))
                piece, length = [], 0
        if length >= size // 2:  # a page's short tail is dropped: it would skew the sizes
            yield Window(origin, title, _join(piece))


def _join(words: list[str]) -> str:
    return " ".join(words).replace(" \n\n ", "\n\n").strip()


def queries(texts: list[str], count: int, *, seed: int = QUERY_SEED) -> list[str]:
    """``count`` queries of 2-4 consecutive terms of randomly chosen texts (seeded).

    Terms are taken after :func:`loom_memory.tokenize` (stop words dropped); runs of digits and
    single characters are skipped, so a query is words a person would type. Every query
    matches the text it was drawn from.
    """
    rng = random.Random(seed)
    found: list[str] = []
    while len(found) < count:
        terms = [
            term for term in tokenize(rng.choice(texts)) if len(term) > 1 and not term.isdigit()
        ]
        length = rng.randint(2, 4)
        if len(terms) < length:
            continue
        start = rng.randrange(len(terms) - length + 1)
        found.append(" ".join(terms[start : start + length]))
    return found
