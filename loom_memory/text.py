"""What a memory entry says, as far as search is concerned: the first-party text contract.

Every backend indexes :func:`entry_terms` (``tokenize(searchable_text(entry))``) and matches
``query_terms(query)`` OR-ed; only the ranking is its own. The contract lives here, not in each
backend, because a backend that indexed something else would still return matches, just to a
different question than the caller asked, and still pass a kit that can only probe a few words.

* :func:`searchable_text` is the string and number leaves of ``content``, in document order.
  Not ``role``, not ``timestamp``, not object keys, not ``id`` (an id is a handle; indexing it
  would make a document id match every passage of that document), and not ``origin`` (a taint
  label stamped on a whole corpus would make one term match all of it). Booleans and nulls are
  not text either.
* :func:`tokenize` NFKC-normalises and case-folds, splits on anything that is not a letter or a
  digit, and drops a short list of English stop words and runs longer than
  :data:`MAX_TERM_LENGTH`. Its output re-tokenizes to itself, so a backend may store the terms
  joined by spaces and hand them to its own word splitter.

A store may be opened with a stemming :class:`Tokenizer` (``Tokenizer(stemmer="english")``,
the ``stem`` extra): after the steps above each term is reduced to its Snowball stem, so
"running" and "runs" are both "run" (an empty stem is no term, and is dropped). The module
functions are the plain tokenizer's, and every backend of a store indexes and queries through
the store's one tokenizer, so SQLite, PostgreSQL and the in-memory reference keep matching
alike; a store records the tokenizer's :attr:`Tokenizer.identity` and refuses to open under
another one (a different tokenizer is a different index: mixing stemmed and plain terms would
match silently less).

Terms are OR-ed (the first :data:`MAX_QUERY_TERMS` distinct ones): a longer question must never
return fewer memories (PostgreSQL's
``plainto_tsquery`` ANDs, which gets this backwards). A query with no terms left (only
punctuation or stop words) searches for nothing and returns ``[]``. Scripts written without
spaces (Chinese, Japanese) tokenize as whole runs, so a substring of such a run does not match.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from loom_memory.entry import Content, MemoryEntry
from loom_memory.errors import EntryNotSerialisableError, StoreConfigurationError

STOP_WORDS = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have"),
        *("in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were"),
        *("will", "with"),
    }
)
"""Words too common to carry meaning; dropped from documents and queries alike."""

MAX_TERM_LENGTH = 256
"""Longer letter/digit runs (encoded blobs) are not words and are dropped; PostgreSQL refuses
lexemes over 2 KiB, and a term one backend drops must be dropped by all of them."""

MAX_QUERY_TERMS = 64
"""A query's distinct terms beyond this many are not searched. A question has tens of words; a
pasted document has thousands, and a search's cost grows with its terms (every row holding any
of them may have to be scored): 1,000 terms took 12.5-17 s on SQLite and 38-45 s on PostgreSQL
over 20,000 passages, holding a connection throughout (64: ~0.7 s on SQLite; ADR 0016, amended
"terms"). PostgreSQL also refused a 20,000-term OR query outright ("stack depth limit
exceeded"). Every backend searches the same first terms, so a long query gets the same kind of
answer everywhere: the best matches of its opening."""

PLAIN_IDENTITY = "loom-words-v1"
"""The identity of the plain tokenizer: what every store written before stemming existed used."""
_STEMMED = f"{PLAIN_IDENTITY}+snowball-"  # then the Snowball algorithm's name

STEM_CACHE_SIZE = 1 << 16
"""Stems remembered per tokenizer: a corpus repeats its words, and a pure-Python Snowball stem
costs ~150 us, so a cache makes stemming an ingest cost per distinct word, not per word."""

_WORD = re.compile(r"[^\W_]+")


def searchable_text(entry: MemoryEntry) -> str:
    """Return the text of ``entry`` that search may match: its content's string/number leaves."""
    return "\n".join(_leaves(entry.content))


@dataclass(frozen=True)
class Tokenizer:
    """The terms a store indexes and searches: :func:`tokenize`, then optionally a stemmer.

    ``stemmer`` names a Snowball algorithm (``"english"``, ``"french"``, ...; needs the ``stem``
    extra). :attr:`identity` names the terms this tokenizer produces; a store records it, so a
    store is never searched, appended to or rebuilt with another tokenizer's terms.
    """

    stemmer: str | None = None
    _stem: Callable[[str], str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.stemmer is not None:
            object.__setattr__(self, "_stem", _snowball(self.stemmer))

    @property
    def identity(self) -> str:
        """What a store records: the word splitter's version and the stemmer, if any."""
        if self.stemmer is None:
            return PLAIN_IDENTITY
        return f"{_STEMMED}{self.stemmer}"

    def tokenize(self, text: str) -> list[str]:
        """:func:`tokenize`'s terms of ``text``, each stemmed if this tokenizer stems."""
        terms = tokenize(text)
        if self._stem is None:
            return terms
        # A Snowball stem may be empty (porter's of the "s" in "Bob's"): not a term, and a
        # PostgreSQL search vector refuses it, so the entry's event blocked the memory.
        return [stem for stem in map(self._stem, terms) if stem]

    def entry_terms(self, entry: MemoryEntry) -> list[str]:
        """The terms a store indexes ``entry`` under (duplicates are frequencies)."""
        return self.tokenize(searchable_text(entry))

    def query_terms(self, query: str) -> list[str]:
        """The distinct terms of ``query``, in order, at most :data:`MAX_QUERY_TERMS`."""
        return list(dict.fromkeys(self.tokenize(query)))[:MAX_QUERY_TERMS]


PLAIN = Tokenizer()
"""The default tokenizer: no stemming. The module functions below are its."""


MAX_TERM_BYTES = (1 << 20) - 1
"""The most UTF-8 bytes an entry's terms may take, as a PostgreSQL search vector counts them
(its 1 MB limit, checked twice: on every occurrence's bytes, and on the distinct lexemes with
their positions)."""

_TERM_BYTES_PER_ENCODED_BYTE = 17
"""An upper bound on a search vector's bytes per byte of the entry's JSON: each occurrence of
a term costs its bytes and at most 5 more (a position, and a distinct lexeme's count and
alignment), and no character yields more than 50 of those from its 3 bytes (U+FDFA, four
Arabic words of 30 bytes under NFKC). So an entry under ~60 KB encoded is never tokenized
here: the common case costs one comparison."""


def check_term_bytes(
    tokenizer: Tokenizer, entries: Sequence[MemoryEntry], encoded: Sequence[bytes]
) -> None:
    """Refuse an entry whose terms a PostgreSQL search vector cannot hold, before an
    event-sourced write reaches the log (ADR 0004, "bounds"): within MAX_ENTRY_BYTES, text
    that expands under NFKC (``'\u3300'``, 3 bytes, is the 12 of ``'アパート'``) made a vector
    over 1 MB, and the event blocked the memory for good. Refused on every backend alike, with
    the store's own tokenizer; only an entry large enough to exceed it is tokenized here."""
    for index, (entry, data) in enumerate(zip(entries, encoded, strict=True)):
        if len(data) * _TERM_BYTES_PER_ENCODED_BYTE <= MAX_TERM_BYTES:
            continue  # too small to exceed it
        counts = Counter(tokenizer.entry_terms(entry))
        sizes = {term: len(term.encode()) for term in counts}
        occurrences = sum(sizes[term] * count for term, count in counts.items())
        # Each distinct lexeme: its bytes, one of alignment, a count and its positions (at
        # most 256 are kept).
        vector = sum(size + 3 + 2 * min(counts[term], 256) for term, size in sizes.items())
        size = max(occurrences, vector)
        if size > MAX_TERM_BYTES:
            path = f"entries[{index}]"
            raise EntryNotSerialisableError(
                f"{path}'s search terms take {size:,} bytes, over {MAX_TERM_BYTES:,} "
                "(loom_memory.text.MAX_TERM_BYTES, PostgreSQL's search vector limit): its "
                "text expands when normalised; split it; nothing was written",
                path=path,
            )


def tokenizer_named(identity: str) -> Tokenizer:
    """The tokenizer whose :attr:`~Tokenizer.identity` is ``identity``: how a store is
    opened as it was built by code that did not build it (an erasure, ``loom doctor``)."""
    if identity == PLAIN_IDENTITY:
        return PLAIN
    if identity.startswith(_STEMMED):
        return Tokenizer(stemmer=identity.removeprefix(_STEMMED))
    raise StoreConfigurationError(
        f"the tokenizer {identity!r} is not one this loom knows: a newer loom built the store"
    )


def tokenize(text: str) -> list[str]:
    """Split ``text`` into normalised terms, in order, duplicates kept (they are frequencies)."""
    # NFKC again after casefold: folding can denormalise, and the output must re-tokenize to itself.
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return [
        word
        for word in _WORD.findall(folded)
        if len(word) <= MAX_TERM_LENGTH and word not in STOP_WORDS
    ]


def entry_terms(entry: MemoryEntry) -> list[str]:
    """Return the terms every backend indexes ``entry`` under (duplicates are frequencies)."""
    return tokenize(searchable_text(entry))


def query_terms(query: str) -> list[str]:
    """Return the distinct terms of a search query, in order, at most :data:`MAX_QUERY_TERMS`
    of them; search ORs them."""
    return list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]


def _snowball(language: str) -> Callable[[str], str]:
    """The Snowball stemmer for ``language`` as a cached function (lazily imported)."""
    try:
        import snowballstemmer
    except ImportError as exc:
        raise StoreConfigurationError(
            "stemming needs the snowballstemmer package: pip install 'loom-replay[stem]'"
        ) from exc
    try:
        stemmer: Any = snowballstemmer.stemmer(language)
    except KeyError as exc:
        raise StoreConfigurationError(
            f"no Snowball stemmer for {language!r}; one of: "
            f"{', '.join(sorted(snowballstemmer.algorithms()))}"
        ) from exc
    lock = threading.Lock()  # a Snowball stemmer object keeps its word in itself

    @lru_cache(maxsize=STEM_CACHE_SIZE)
    def stem(word: str) -> str:
        with lock:
            stemmed: str = stemmer.stemWord(word)
        return stemmed

    return stem


def _leaves(value: Content) -> Iterator[str]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        for item in value.values():
            yield from _leaves(item)
