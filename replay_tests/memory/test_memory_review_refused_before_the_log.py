"""Memory review: a write the store cannot project is refused before the log, or projected.

The class of bug: the append-time checks took a write, the event entered the append-only log,
and the projection failed on it; every later write and catch-up of that memory (all keys) then
failed on the same event, for good. Each test checks the write is refused with the log's
position unchanged and the memory still writable and rebuildable, or that it is stored.
Every test runs on the in-process projection, on SQLite, and on PostgreSQL under
``scripts/with-postgres`` (ADR 0004, "Amended 2026-12-06").
"""

from __future__ import annotations

import os
import random
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path

import pytest

from loom_memory import (
    EntryNotSerialisableError,
    EventSourcedMemory,
    InMemoryMemoryStore,
    MemoryEntry,
    PostgresMemoryStore,
    SqliteMemoryStore,
)
from loom_memory.conformance import entry
from loom_memory.entry import MAX_ENTRY_BYTES, Content, encode_entries
from loom_memory.text import PLAIN, Tokenizer, tokenize
from loom_runtime import Loom
from replay_tests.conftest import fresh_postgres_database

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
_NO_PG = "LOOM_TEST_PG_URL is not set (use scripts/with-postgres)"
_needs_pg = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=_NO_PG)]
BACKENDS = ["in-process", "sqlite", pytest.param("postgres", marks=_needs_pg)]
SQL_BACKENDS = ["sqlite", pytest.param("postgres", marks=_needs_pg)]

Opener = Callable[..., EventSourcedMemory]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def loom(backend: str, tmp_path: Path) -> Iterator[Loom]:
    """A log of the test's own: the tests compare log positions."""
    if backend != "postgres":
        with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as instance:
            yield instance
        return
    with contextmanager(fresh_postgres_database)() as url, Loom(url) as instance:
        yield instance


@pytest.fixture
def open_memory(backend: str, loom: Loom) -> Opener:
    """Open the test's memory (again), on ``backend``, with the store's ``tokenizer``."""

    def open_memory(tokenizer: Tokenizer = PLAIN, postings: bool = False) -> EventSourcedMemory:
        if backend == "in-process":
            return EventSourcedMemory(loom, store=InMemoryMemoryStore(tokenizer=tokenizer))
        cls = PostgresMemoryStore if backend == "postgres" else SqliteMemoryStore
        return EventSourcedMemory(
            loom, store=cls(loom.log.engine, tokenizer=tokenizer, postings=postings)
        )

    return open_memory


def _refused_before_the_log(
    loom: Loom, memory: EventSourcedMemory, write: Callable[[], None], match: str
) -> None:
    """``write`` raises EntryNotSerialisableError matching ``match`` and leaves the log as it
    was; the memory still takes a write to another key, and rebuilds."""
    position = loom.log.position
    with pytest.raises(EntryNotSerialisableError, match=match):
        write()
    assert loom.log.position == position
    memory.append("other", [entry("still writable")])
    memory.rebuild()
    assert [e.content for e in memory.read("other")] == ["still writable"]


class _NoOffset(tzinfo):
    """A zone that does not know its offset: aware by ``tzinfo``, naive by ``utcoffset``."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> None:
        return None

    def tzname(self, dt: datetime | None) -> str:
        return "unknown"


def test_a_timestamp_whose_zone_has_no_offset_is_refused_before_the_log(
    loom: Loom, open_memory: Opener
) -> None:
    """msgspec wrote such a timestamp naive and refused it on reading: the projection failed
    on the event, and the memory was blocked."""
    memory = open_memory()
    when = datetime(2024, 1, 1, tzinfo=_NoOffset())
    _refused_before_the_log(
        loom,
        memory,
        lambda: memory.append("k", [MemoryEntry(content="hi", timestamp=when)]),
        r"entries\[0\]\.timestamp .* no UTC offset",
    )


@pytest.mark.parametrize("offset", [timedelta(seconds=30), timedelta(microseconds=7)])
def test_an_offset_finer_than_minutes_is_refused(
    loom: Loom, open_memory: Opener, offset: timedelta
) -> None:
    """RFC 3339 offsets are whole minutes: msgspec dropped the rest, so the entry read back
    30 seconds off. Refused (not converted: a store returns what it was given), by a direct
    store too; a whole-minute offset reads back equal."""
    memory = open_memory()
    odd = MemoryEntry(content="hi", timestamp=datetime(2024, 1, 1, tzinfo=timezone(offset)))
    _refused_before_the_log(
        loom, memory, lambda: memory.append("k", [odd]), "UTC offset of whole minutes"
    )
    with pytest.raises(EntryNotSerialisableError, match="whole minutes"):
        InMemoryMemoryStore().append("k", [odd])
    zone = timezone(timedelta(hours=5, minutes=45))
    fine = MemoryEntry(content="hi", timestamp=datetime(2024, 1, 1, tzinfo=zone))
    memory.append("k", [fine])
    assert memory.read("k") == [fine]
    assert memory.read("k")[0].timestamp.utcoffset() == timedelta(hours=5, minutes=45)


class _Float(float):
    pass


@pytest.mark.parametrize(
    ("content", "problem"),
    [(_Float(1.5), "_Float is unsupported"), ([10**4300], "4300 digits")],
    ids=["float-subclass", "int-of-4301-digits"],
)
def test_content_msgspec_cannot_encode_is_the_typed_refusal(
    loom: Loom, open_memory: Opener, content: Content, problem: str
) -> None:
    """A float subclass was a bare TypeError and an int past Python's 4,300-digit string limit
    a bare ValueError; both are EntryNotSerialisableError, naming the entry."""
    memory = open_memory()
    _refused_before_the_log(
        loom,
        memory,
        lambda: memory.append("k", [entry("fine"), MemoryEntry(content=content)]),
        rf"entries\[1\] cannot be encoded as JSON .*{problem}",
    )
    assert memory.read("k") == []


# -- search terms ----------------------------------------------------------------------------


def test_an_empty_stem_is_no_term() -> None:
    """porter stems the "s" of "Bob's" to ''; arabic and nepali stem a letter to ''."""
    assert Tokenizer(stemmer="porter").tokenize("Bob's car") == ["bob", "car"]
    assert Tokenizer(stemmer="arabic").tokenize("\u0640") == []
    assert Tokenizer(stemmer="nepali").tokenize("\u091b") == []


def test_an_entry_with_an_empty_stem_is_stored_and_matches_only_its_words(
    loom: Loom, open_memory: Opener
) -> None:
    """PostgreSQL refused the search vector ``'':2`` (the memory was blocked), and elsewhere
    the '' term of "Bob's" matched every entry with one ("Alice's bike")."""
    memory = open_memory(Tokenizer(stemmer="porter"))
    memory.append("k", [entry("Bob's car", id="bob"), entry("Alice's bike", id="alice")])
    assert [e.id for e in memory.search("k", "Bob's")] == ["bob"]
    assert [e.id for e in memory.search("k", "bikes")] == ["alice"]
    memory.rebuild()
    assert [e.id for e in memory.search("k", "Bob's")] == ["bob"]


@pytest.mark.parametrize("postings", [False, True], ids=["fts", "postings"])
@pytest.mark.parametrize("backend", ["sqlite"])
def test_an_index_holding_empty_stems_searches_as_a_rebuilt_one(
    backend: str, loom: Loom, open_memory: Opener, postings: bool
) -> None:
    """The stemmed tokenizer keeps its identity: a SQLite index written before empty stems
    were dropped (its postings hold '' terms; its FTS text never did) answers every query as
    the same index rebuilt does, since no query has a '' term any more and ranking has no
    length normalisation (ADR 0017). PostgreSQL never stored one (it refused them)."""

    class KeepsEmptyStems(Tokenizer):
        def tokenize(self, text: str) -> list[str]:
            stem = self._stem
            assert stem is not None
            return [stem(term) for term in tokenize(text)]

    old = KeepsEmptyStems(stemmer="porter")
    assert old.tokenize("Bob's car") == ["bob", "", "car"]
    memory = open_memory(old, postings=postings)
    texts = ["Bob's car", "Alice's bike", "the car's owner", "bikes and cars", "s s s"]
    memory.append("k", [entry(text, id=str(n)) for n, text in enumerate(texts)])
    queries = ["Bob's", "car", "bike's owner", "s", "cars bikes Alice"]
    memory = open_memory(Tokenizer(stemmer="porter"), postings=postings)
    before = {query: [e.id for e in memory.search("k", query)] for query in queries}
    memory.rebuild()
    assert {query: [e.id for e in memory.search("k", query)] for query in queries} == before
    assert before["Bob's"] == ["0"]


def _words(kind: str) -> list[str]:
    """Words that NFKC expands four- to ten-fold, each a term of at most 256 letters, enough to
    fill MAX_ENTRY_BYTES: one repeated (U+FDFA: the occurrences' bytes are over), or all
    distinct (of U+3300-block squares: each lexeme's positions and overhead count too)."""
    if kind == "U+FDFA":
        return ["\ufdfa" * 14] * (MAX_ENTRY_BYTES // 43)
    squares = [
        chr(cp) for cp in range(0x3300, 0x3358) if len(unicodedata.normalize("NFKC", chr(cp))) == 4
    ]
    rng = random.Random(7)
    return ["".join(rng.choices(squares, k=64)) for _ in range(MAX_ENTRY_BYTES // 193)]


TSVECTOR_MAX = (1 << 20) - 1
"""PostgreSQL's search vector limit (``MAXSTRPOS``), checked by ``tsvectorin`` twice."""


def _tsvector_bytes(text: str) -> int:
    """What PostgreSQL's ``tsvectorin`` counts of ``text``'s vector, the larger of its two
    checks: every occurrence's bytes, and each distinct lexeme's bytes with its alignment,
    position count and (at most 256) positions."""
    counts = Counter(tokenize(text))
    occurrences = sum(len(term.encode()) * n for term, n in counts.items())
    lexemes = sum(len(term.encode()) + 3 + 2 * min(n, 256) for term, n in counts.items())
    return max(occurrences, lexemes)


def _fits(words: list[str]) -> int:
    """How many of ``words`` one PostgreSQL search vector holds."""
    low, high = 0, len(words)
    assert _tsvector_bytes(" ".join(words)) > TSVECTOR_MAX
    while high - low > 1:
        middle = (low + high) // 2
        over = _tsvector_bytes(" ".join(words[:middle])) > TSVECTOR_MAX
        low, high = (low, middle) if over else (middle, high)
    return low


@pytest.mark.parametrize("kind", ["U+FDFA", "distinct"])
def test_text_expanding_past_the_search_vector_limit_is_refused_before_the_log(
    loom: Loom, open_memory: Opener, kind: str
) -> None:
    """Within MAX_ENTRY_BYTES, text that NFKC expands ('\\u3300' is 'アパート', U+FDFA four
    Arabic words) made a PostgreSQL search vector over 1 MB: the memory was blocked. The
    entry is refused on every backend alike; the largest that fits is stored and found."""
    memory = open_memory()
    words = _words(kind)
    n = _fits(words)
    fits, over = " ".join(words[:n]), " ".join(words[: n + 1])
    [encoded] = encode_entries([MemoryEntry(content=over)])
    assert len(encoded) <= MAX_ENTRY_BYTES
    _refused_before_the_log(
        loom,
        memory,
        lambda: memory.append("k", [entry(over)]),
        rf"entries\[0\]'s search terms take [\d,]+ bytes, over {TSVECTOR_MAX:,}",
    )
    memory.append("k", [entry(fits, id="fits")])
    assert [e.id for e in memory.search("k", words[n - 1])] == ["fits"]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_remove_of_more_ids_than_a_statement_holds(
    backend: str, loom: Loom, open_memory: Opener
) -> None:
    """One DELETE ... IN with every id was over PostgreSQL's 65,535 parameters: the remove
    event, in the log, blocked the memory. It is deleted in chunks in the projection's
    transaction, and a rebuild applies it again."""
    memory = open_memory()
    memory.append("k", [entry("kept", id="keep"), entry("gone", id="id5"), entry("too", id="z")])
    ids = [f"id{n}" for n in range(70_000)] + ["z"]  # PostgreSQL binds at most 65,535
    memory.remove("k", ids)
    assert [e.id for e in memory.read("k")] == ["keep"]
    memory.append("other", [entry("still writable")])
    memory.rebuild()
    assert [e.id for e in memory.read("k")] == ["keep"]


def test_a_timestamp_in_utc_is_stored_as_given(loom: Loom, open_memory: Opener) -> None:
    """Negative control: an ordinary aware timestamp still reads back equal."""
    memory = open_memory()
    given = MemoryEntry(content="hi", timestamp=datetime(2024, 1, 1, 12, tzinfo=UTC))
    memory.append("k", [given])
    assert memory.read("k") == [given]
