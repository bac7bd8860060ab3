"""Bad memory entries, fuzzed: content, ids, roles, origins and keys of any kind.

The property: ``append`` on every store either stores the batch so
that ``read`` returns what was there plus exactly these entries, or raises a ``loom_memory``
error (all ``LoomError``) having written NOTHING: ``read`` returns what it returned before, and
an event-sourced memory's log position did not move.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loom_memory import (
    EntryNotSerialisableError,
    EventSourcedMemory,
    InMemoryMemoryStore,
    MemoryEntry,
    MemoryStoreError,
    PostgresMemoryStore,
    SqliteMemoryStore,
)
from loom_runtime import Loom
from loom_runtime.codec import MAX_DATA_DEPTH

FUZZ = settings.get_profile("loom-fuzz")

TEXT = st.text()  # NUL and lone surrogates included: every store refuses them alike
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities: refused
    TEXT,
    st.binary(max_size=4),  # refused
    st.just(object()),  # refused
)
CONTENT = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),  # refused: would come back a list
        st.dictionaries(TEXT, inner, max_size=3),
        st.dictionaries(st.one_of(st.integers(), st.none()), inner, max_size=2),  # refused
    ),
    max_leaves=10,
)
LABELS = st.one_of(st.just(None), TEXT, st.integers(), st.binary(max_size=3))
TIMESTAMPS = st.one_of(
    st.datetimes(timezones=st.just(dt.UTC)),
    st.datetimes(),  # naive: refused
)


@st.composite
def entries(draw: st.DrawFn, text: st.SearchStrategy[str] = TEXT) -> Any:
    """A MemoryEntry of arbitrary fields (None label = absent), or something that is not one."""
    fields: dict[str, Any] = {"content": draw(CONTENT)}
    for name in ("id", "role", "origin"):
        label = draw(st.one_of(st.just(None), text, LABELS))
        if label is not None:
            fields[name] = label
    if draw(st.booleans()):
        fields["timestamp"] = draw(TIMESTAMPS)
    if draw(st.integers(0, 20)) == 0:
        return fields  # a plain dict, not an entry
    return MemoryEntry(**fields)


BATCHES = st.lists(entries(), max_size=4)
KEYS = st.one_of(TEXT, st.sampled_from(["", "k\x00", "a" * 2000]), st.integers(), st.none())
STORE_KINDS = ["in-memory", "sql", "event-sourced", "event-sourced-sql"]


def sql_store(db_url: str, **kwargs: Any) -> Any:
    return (PostgresMemoryStore if db_url.startswith("postgresql") else SqliteMemoryStore)(
        db_url if not kwargs else kwargs.pop("engine"), **kwargs
    )


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, db_url: str) -> Iterator[tuple[Any, Callable[[], int]]]:
    """Each kind of store on a fresh database, with a function giving its log position."""
    with Loom(db_url) as loom:
        kind = request.param
        if kind == "in-memory":
            yield InMemoryMemoryStore(), lambda: 0
        elif kind == "sql":
            backend = sql_store(db_url)
            yield backend, lambda: 0
            backend.close()
        elif kind == "event-sourced":
            yield EventSourcedMemory(loom), lambda: loom.log.position
        else:
            backend = sql_store(db_url, engine=loom.log.engine, table_prefix="fuzz_")
            yield EventSourcedMemory(loom, store=backend), lambda: loom.log.position


def read_or_none(memory: Any, key: Any) -> Any:
    try:
        return memory.read(key)
    except MemoryStoreError:
        return None


def append_or_refuse(memory: Any, position: Callable[[], int], key: Any, batch: Any) -> None:
    """Append ``batch``: the key reads back before + batch, or a typed refusal changed nothing."""
    before = read_or_none(memory, key)
    at = position()
    try:
        memory.append(key, batch)
    except MemoryStoreError:
        assert read_or_none(memory, key) == before
        assert position() == at
        return
    assert isinstance(key, str)
    assert memory.read(key) == before + list(batch)


@FUZZ
@given(data=st.data())
@example(data=None)
def test_any_batch_round_trips_or_is_refused_whole(
    store: tuple[Any, Callable[[], int]], data: Any
) -> None:
    """Any key and batch of entries round-trips, or is refused whole with a MemoryStoreError."""
    memory, position = store
    if data is None:  # the named cases, on every store
        bad_last = [MemoryEntry(content="fine", id="1"), MemoryEntry(content=float("nan"))]
        append_or_refuse(memory, position, "k", bad_last)
        append_or_refuse(memory, position, "k", [MemoryEntry(content={"t": (1, 2)})])
        append_or_refuse(memory, position, "k", [MemoryEntry(content="", role="", id="")])
        append_or_refuse(memory, position, 7, [MemoryEntry(content="x")])
        append_or_refuse(memory, position, "k", MemoryEntry(content="not a list"))
        return
    key = data.draw(st.one_of(TEXT, KEYS.filter(lambda k: not isinstance(k, str))), label="key")
    batch = data.draw(st.lists(entries(TEXT), max_size=4), label="batch")
    append_or_refuse(memory, position, key, batch)


@FUZZ
@given(query=TEXT, limit=st.one_of(st.integers(-2, 200), st.none(), st.floats(0, 5)))
@example(query="", limit=5)
@example(query="?!.,;:", limit=5)
@example(query='NOT OR * ^ : "', limit=5)
def test_any_search_returns_stored_entries_or_a_typed_error(
    store: tuple[Any, Callable[[], int]], query: str, limit: Any
) -> None:
    """A search of any query and limit returns stored entries of the key, or a typed error."""
    memory, position = store
    if not memory.read("k"):
        memory.append("k", [MemoryEntry(content="alpha beta 42 ünïcode 中文", id="seed")])
    stored = memory.read("k")
    at = position()
    try:
        hits = memory.search("k", query, limit=limit)
    except MemoryStoreError:
        hits = []
    assert all(hit in stored for hit in hits)
    assert position() == at


@pytest.mark.parametrize(
    ("field", "entry"),
    [
        ("content", lambda: MemoryEntry(content="a\ud800")),
        ("id", lambda: MemoryEntry(content="x", id="\udc00")),
        ("role", lambda: MemoryEntry(content="x", role="\ud800")),
    ],
)
def test_a_lone_surrogate_in_an_entry_is_refused_with_a_typed_error(
    store: tuple[Any, Callable[[], int]], field: str, entry: Callable[[], MemoryEntry]
) -> None:
    """An entry with a lone surrogate is refused with EntryNotSerialisableError, nothing written."""
    memory, position = store
    append_or_refuse(memory, position, "k", [entry()])


def test_a_lone_surrogate_key_is_refused_with_a_typed_error(
    store: tuple[Any, Callable[[], int]],
) -> None:
    """A key with a lone surrogate round-trips, or is refused with a LoomError writing nothing."""
    memory, position = store
    append_or_refuse(memory, position, "k\ud800", [MemoryEntry(content="x")])


@pytest.mark.parametrize(
    ("key", "entry"),
    [
        ("k", MemoryEntry(content="a\x00b")),
        ("k", MemoryEntry(content="x", id="a\x00")),
        ("k", MemoryEntry(content={"a\x00": 1})),
        ("k\x00", MemoryEntry(content="x")),
    ],
    ids=["content", "id", "dict-key", "key"],
)
def test_nul_round_trips_or_is_refused_without_wedging_the_memory(
    store: tuple[Any, Callable[[], int]], key: str, entry: MemoryEntry
) -> None:
    """NUL anywhere round-trips or is refused whole, and later writes to other keys still work."""
    memory, position = store
    append_or_refuse(memory, position, key, [entry])
    memory.append("other", [MemoryEntry(content="later")])
    assert [e.content for e in memory.read("other")] == ["later"]


def deep_list(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_moderately_nested_content_round_trips(store: tuple[Any, Callable[[], int]]) -> None:
    """Content nested 100 levels deep round-trips in every store."""
    memory, position = store
    append_or_refuse(memory, position, "k", [MemoryEntry(content=deep_list(100))])


@pytest.mark.parametrize("depth", [600, 1200])
def test_deeply_nested_content_is_stored_or_refused_with_a_typed_error(
    store: tuple[Any, Callable[[], int]], depth: int
) -> None:
    """Content nested hundreds of levels deep is stored, or refused with a MemoryStoreError."""
    memory, position = store
    append_or_refuse(memory, position, "k", [MemoryEntry(content=deep_list(depth))])


def test_content_nested_past_max_depth_is_refused_alike(
    store: tuple[Any, Callable[[], int]],
) -> None:
    """Content nested MAX_DATA_DEPTH levels round-trips; one level more is
    EntryNotSerialisableError on every store, writing nothing."""
    memory, position = store
    append_or_refuse(memory, position, "k", [MemoryEntry(content=deep_list(MAX_DATA_DEPTH))])
    at, before = position(), memory.read("k")
    with pytest.raises(EntryNotSerialisableError):
        memory.append("k", [MemoryEntry(content=deep_list(MAX_DATA_DEPTH + 1))])
    assert (position(), memory.read("k")) == (at, before)
