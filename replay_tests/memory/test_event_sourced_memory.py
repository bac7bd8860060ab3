"""EventSourcedMemory: writes are log events, stores are projections rebuilt from the log.

Every behaviour test runs on the in-process projection, on SQLite, and on PostgreSQL when
``LOOM_TEST_PG_URL`` is set (``scripts/with-postgres``); the conformance kit runs on all three.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sqlalchemy import Engine, create_engine, select, text

from loom_memory import (
    EntryNotSerialisableError,
    EventSourcedMemory,
    InMemoryMemoryStore,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidLimitError,
    MemoryEntry,
    PostgresMemoryStore,
    ProjectionFailedError,
    SqliteMemoryStore,
    StoreConfigurationError,
    StoreNotOnLogDatabaseError,
)
from loom_memory.conformance import MemoryStoreContract, entry
from loom_memory.events import MEMORY_TOPICS, memory_stream
from loom_memory.sql import SqlMemoryStore
from loom_runtime import Loom, RetryPolicy, WriteContentionError
from replay_tests.conftest import PostgresKit, fresh_postgres_database

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
_NO_PG = "LOOM_TEST_PG_URL is not set (use scripts/with-postgres)"
_needs_pg = [pytest.mark.postgres, pytest.mark.skipif(not PG_URL, reason=_NO_PG)]
BACKENDS = ["in-process", "sqlite", pytest.param("postgres", marks=_needs_pg)]
KEYS = ("chat", "notes", "emptied", "rewritten")


class FailingAppends:
    """Mixin for a store whose ``append`` raises on the N-th call while armed."""

    fail_on: int | None = None
    appends = 0

    def append(self, key: str, entries: Sequence[MemoryEntry], **kwargs: Any) -> None:
        self.appends += 1
        if self.fail_on is not None and self.appends == self.fail_on:
            raise RuntimeError(f"injected store fault on append #{self.appends}")
        super().append(key, entries, **kwargs)  # type: ignore[misc]


class FailingInMemoryStore(FailingAppends, InMemoryMemoryStore):
    pass


class FailingSqliteStore(FailingAppends, SqliteMemoryStore):
    pass


class FailingPostgresStore(FailingAppends, PostgresMemoryStore):
    pass


STORES: dict[str, tuple[type[SqlMemoryStore | InMemoryMemoryStore], ...]] = {
    "in-process": (InMemoryMemoryStore, FailingInMemoryStore),
    "sqlite": (SqliteMemoryStore, FailingSqliteStore),
    "postgres": (PostgresMemoryStore, FailingPostgresStore),
}

Opener = Callable[..., EventSourcedMemory]


@contextmanager
def _loom(backend: str, tmp_path: Path) -> Iterator[Loom]:
    """A Loom on a log of the test's own: the tests compare log positions, which another test
    writing to a shared database (on another pytest-xdist worker) would move."""
    if backend != "postgres":
        with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
            yield loom
        return
    with contextmanager(fresh_postgres_database)() as url, Loom(url) as loom:
        yield loom


def _drop_tables(engine: Engine, prefix: str) -> None:
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {prefix}fts")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {prefix}entries")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def loom(backend: str, tmp_path: Path) -> Iterator[Loom]:
    with _loom(backend, tmp_path) as instance:
        yield instance


@pytest.fixture
def open_memory(backend: str, loom: Loom) -> Iterator[Opener]:
    """Open (again) one memory of the test; ``failing=True`` projects into a faulty store."""
    name, prefix = f"m{uuid.uuid4().hex[:10]}", f"t{uuid.uuid4().hex[:10]}_"

    def open_memory(*, failing: bool = False) -> EventSourcedMemory:
        cls = STORES[backend][1 if failing else 0]
        if issubclass(cls, SqlMemoryStore):
            return EventSourcedMemory(
                loom, store=cls(loom.log.engine, table_prefix=prefix), name=name
            )
        return EventSourcedMemory(loom, store=cls(), name=name)

    yield open_memory
    if backend != "in-process":
        _drop_tables(loom.log.engine, prefix)


# -- the conformance kit -------------------------------------------------------------------


class TestEventSourcedInProcessMemory(MemoryStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventSourcedMemory]:
        with _loom("in-process", tmp_path) as loom:
            yield EventSourcedMemory(loom)


class TestEventSourcedSqliteMemory(MemoryStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[EventSourcedMemory]:
        with _loom("sqlite", tmp_path) as loom:
            yield EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))


def _postgres_kit_schema(url: str) -> None:
    """The PostgreSQL kit's log and store, made once per worker; each kit test finds them as
    just built (``postgres_kit``, ADR 0054)."""
    with Loom(url) as loom:
        EventSourcedMemory(
            loom, store=PostgresMemoryStore(loom.log.engine, table_prefix="kit_"), name="kit"
        )


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason=_NO_PG)
class TestEventSourcedPostgresMemory(MemoryStoreContract):
    @pytest.fixture
    def store(self, postgres_kit: PostgresKit) -> Iterator[EventSourcedMemory]:
        with Loom(postgres_kit(_postgres_kit_schema)) as loom:
            store = PostgresMemoryStore(loom.log.engine, table_prefix="kit_")
            yield EventSourcedMemory(loom, store=store, name="kit")


# -- helpers ---------------------------------------------------------------------------------


def _history_part_one(memory: EventSourcedMemory) -> None:
    memory.append("chat", [entry("hello", role="user", id="1"), entry("hi there", id="2")])
    memory.append("notes", [entry({"topic": "deploys", "n": 3}, origin="wiki")])
    memory.append("emptied", [entry("soon gone")])
    memory.append("rewritten", [entry("old", id="old")])


def _history_part_two(memory: EventSourcedMemory) -> None:
    memory.append("chat", [entry("how are you", role="user", id="3"), entry("fine", id="2")])
    memory.remove("chat", ["2"])
    memory.clear("emptied")
    memory.replace("rewritten", [entry("new", id="new"), entry("newer")])
    memory.append("notes", [entry("second note")])


def _snapshot(memory: EventSourcedMemory) -> dict[str, list[MemoryEntry]]:
    return {key: memory.read(key) for key in KEYS}


def _rows(memory: EventSourcedMemory) -> list[tuple[str, str]]:
    """Every row of a SQL store, byte for byte (key and stored JSON), in seq order."""
    store = memory.store
    if not isinstance(store, SqlMemoryStore):
        return []
    table = store.entries
    with store.engine.connect() as conn:
        query = select(table.c.key, table.c.entry).order_by(table.c.seq)
        return [(key, data) for key, data in conn.execute(query)]


# -- memory as events ------------------------------------------------------------------------


def test_each_write_is_one_event_on_the_keys_stream(open_memory: Opener, loom: Loom) -> None:
    """append/remove/replace/clear each append one event to stream memory:<name>:<key>."""
    memory = open_memory()
    before = loom.log.position
    _history_part_one(memory)
    _history_part_two(memory)
    assert loom.log.stream_version(memory_stream(memory.name, "chat")) == 3
    assert loom.log.stream_version(memory_stream(memory.name, "emptied")) == 2
    notifications = list(loom.log.notifications(after=before))
    assert len(notifications) == 9
    assert {n.topic for n in notifications} == set(MEMORY_TOPICS)


def test_entries_are_stored_inline_as_their_exact_json(open_memory: Opener, loom: Loom) -> None:
    """The event's payload holds each entry as the JSON the store holds (readable with SQL)."""
    memory = open_memory()
    item = entry({"a": [1, "two"]}, id="x", origin="wiki")
    memory.append("k", [item])
    [notification] = loom.log.notifications(after=loom.log.position - 1)
    assert notification.topic == "loom.memory.Appended"
    state = msgspec.json.decode(notification.state)
    assert state["memory"] == memory.name and state["key"] == "k"
    assert msgspec.json.encode(state["entries"][0]) == msgspec.json.encode(item)


def test_a_write_returns_after_the_store_applied_it(open_memory: Opener, loom: Loom) -> None:
    """Read-your-writes: when a write returns, the store's position is the write's."""
    memory = open_memory()
    for index in range(3):
        memory.append("k", [entry(f"turn {index}")])
        assert memory.position == loom.log.position
        assert len(memory.read("k")) == index + 1


def test_deleting_the_store_and_rebuilding_reproduces_every_key(
    backend: str, open_memory: Opener, loom: Loom
) -> None:
    """A store rebuilt from the log equals the original: every key, and (SQL) every row byte."""
    original = open_memory()
    _history_part_one(original)
    _history_part_two(original)
    expected, expected_rows = _snapshot(original), _rows(original)
    assert expected["emptied"] == [] and len(expected["chat"]) == 2  # the history did something
    if isinstance(original.store, SqlMemoryStore):
        _drop_tables(loom.log.engine, original.store.table_prefix)
    rebuilt = open_memory()  # a fresh store: new tables, or a new in-process store
    rebuilt.rebuild()
    assert _snapshot(rebuilt) == expected
    assert _rows(rebuilt) == expected_rows
    if backend != "in-process":
        assert {key for key, _ in expected_rows} == {"chat", "notes", "rewritten"}


def test_opening_an_in_process_memory_rebuilds_it_from_the_log(tmp_path: Path) -> None:
    """A second process's in-memory store starts at the log's head with the same contents."""
    with _loom("in-process", tmp_path) as loom:
        first = EventSourcedMemory(loom, name="shared")
        _history_part_one(first)
        _history_part_two(first)
        second = EventSourcedMemory(loom, name="shared")
        assert second.position == first.position
        assert _snapshot(second) == _snapshot(first)


def test_rebuild_upto_a_position_gives_the_memory_as_of_then(
    open_memory: Opener, loom: Loom
) -> None:
    """rebuild(upto=P) reproduces every key as it was at P; catch_up returns to the head."""
    memory = open_memory()
    _history_part_one(memory)
    as_of, position = _snapshot(memory), loom.log.position
    _history_part_two(memory)
    head = _snapshot(memory)
    assert as_of != head
    assert memory.rebuild(upto=position) == position
    assert _snapshot(memory) == as_of
    memory.catch_up()
    assert _snapshot(memory) == head


def test_memories_with_different_names_do_not_share_keys(open_memory: Opener, loom: Loom) -> None:
    """Two memory names on one log: the same key is two streams and two lists."""
    memory = open_memory()
    other = EventSourcedMemory(loom, name="other")
    memory.append("k", [entry("mine")])
    other.append("k", [entry("theirs")])
    memory.rebuild()
    assert [e.content for e in memory.read("k")] == ["mine"]
    assert [e.content for e in other.read("k")] == ["theirs"]


def test_sql_memories_on_one_store_see_each_others_writes(tmp_path: Path) -> None:
    """Two writers on one SQL store share one projection: a returned write is visible to both."""
    with _loom("sqlite", tmp_path) as loom:
        first = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
        second = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
        first.append("k", [entry("from first")])
        assert [e.content for e in second.read("k")] == ["from first"]


# -- exactly once under failure --------------------------------------------------------------


def test_a_store_failing_mid_page_changes_neither_rows_nor_position(
    open_memory: Opener, loom: Loom
) -> None:
    """A fault on the page's 2nd event rolls back the 1st too; a re-run converges."""
    reader = open_memory(failing=True)
    writer = EventSourcedMemory(loom, name=reader.name)  # another process, same memory
    _history_part_one(writer)
    reader.catch_up()
    rows, position, contents = _rows(reader), reader.position, _snapshot(reader)
    _history_part_two(writer)  # the next page starts with two appends
    store = reader.store
    assert isinstance(store, FailingAppends)
    store.fail_on = store.appends + 2
    with pytest.raises(RuntimeError, match="injected"):
        reader.catch_up()
    assert (reader.position, _rows(reader), _snapshot(reader)) == (position, rows, contents)
    store.fail_on = None
    assert reader.catch_up() == loom.log.position
    assert _snapshot(reader) == _snapshot(writer)


def test_a_write_whose_projection_fails_is_durable_and_reported(
    open_memory: Opener, loom: Loom
) -> None:
    """The event stays in the log, the store is unchanged, and catch_up applies it once."""
    memory = open_memory(failing=True)
    memory.append("k", [entry("first")])
    store = memory.store
    assert isinstance(store, FailingAppends)
    store.fail_on = store.appends + 1
    with pytest.raises(ProjectionFailedError) as raised:
        memory.append("k", [entry("second")])
    assert raised.value.position == loom.log.position
    assert [e.content for e in memory.read("k")] == ["first"]
    store.fail_on = None
    memory.catch_up()
    assert [e.content for e in memory.read("k")] == ["first", "second"]


# -- concurrency -----------------------------------------------------------------------------


def test_a_lost_race_is_retried_with_the_new_version(
    open_memory: Opener, loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that read a stale version retries, and is appended once."""
    memory = open_memory()
    memory.append("k", [entry("a")])
    calls: list[int] = []

    read_version = loom.log.stream_version

    def stale_once(stream: uuid.UUID) -> int:
        calls.append(1)
        return read_version(stream) - (1 if len(calls) == 1 else 0)

    monkeypatch.setattr(loom.log, "stream_version", stale_once)
    memory.append("k", [entry("b")])
    assert len(calls) == 2
    assert [e.content for e in memory.read("k")] == ["a", "b"]
    assert loom.log.stream_version(memory_stream(memory.name, "k")) == 2


def test_a_write_that_keeps_losing_gives_up_and_writes_nothing(
    open_memory: Opener, loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the retry budget is spent a typed error says how hard it tried; nothing is logged."""
    memory = open_memory()
    memory.append("k", [entry("a")])
    calls: list[int] = []

    def always_stale(stream: uuid.UUID) -> int:
        calls.append(1)
        return 0

    monkeypatch.setattr(loom.log, "stream_version", always_stale)
    monkeypatch.setattr(loom.log.settings, "write_retry", RetryPolicy(budget=0.2))
    position = loom.log.position
    with pytest.raises(WriteContentionError, match=r"budget is 0\.2 s") as raised:
        memory.append("k", [entry("b")])
    assert raised.value.attempts == len(calls) > 1  # it gave up on time, not on a count
    assert loom.log.position == position


# -- configuration ---------------------------------------------------------------------------


def test_a_store_on_another_database_is_refused(tmp_path: Path) -> None:
    """A SQL store not built on loom.log.engine cannot share the projection's transaction."""
    with _loom("sqlite", tmp_path) as loom:
        elsewhere = SqliteMemoryStore(f"sqlite:///{tmp_path / 'other.db'}")
        with pytest.raises(StoreNotOnLogDatabaseError, match=r"loom\.log\.engine"):
            EventSourcedMemory(loom, store=elsewhere)
        same_file = create_engine(loom.log.engine.url)
        with pytest.raises(StoreNotOnLogDatabaseError):
            EventSourcedMemory(loom, store=SqliteMemoryStore(same_file))
        same_file.dispose()
        elsewhere.close()


def test_an_unsupported_store_is_refused(tmp_path: Path) -> None:
    """Only stores that can be kept exactly in step with the log are accepted."""
    with _loom("in-process", tmp_path) as loom, pytest.raises(StoreConfigurationError):
        EventSourcedMemory(loom, store=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "a:b", "has space", 7])
def test_a_memory_name_that_could_alias_a_stream_is_refused(tmp_path: Path, name: Any) -> None:
    """Names are part of stream ids, so ':' and other separators are refused."""
    with _loom("in-process", tmp_path) as loom, pytest.raises(InvalidArgumentError):
        EventSourcedMemory(loom, name=name)


# -- no-ops and bad input: nothing reaches the log ----------------------------------------


def test_writes_of_nothing_record_nothing(open_memory: Opener, loom: Loom) -> None:
    """append([]) and remove(key, []) append no event."""
    memory = open_memory()
    memory.append("k", [entry("a")])
    position = loom.log.position
    memory.append("k", [])
    memory.remove("k", [])
    assert loom.log.position == position
    assert [e.content for e in memory.read("k")] == ["a"]


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda m: m.append(3, [entry("x")]), id="append-int-key"),
        pytest.param(lambda m: m.replace(None, [entry("x")]), id="replace-none-key"),
        pytest.param(lambda m: m.remove(b"k", ["a"]), id="remove-bytes-key"),
        pytest.param(lambda m: m.clear(("k",)), id="clear-tuple-key"),
    ],
)
def test_a_non_string_key_is_refused_before_the_log(
    open_memory: Opener, loom: Loom, write: Callable[[EventSourcedMemory], None]
) -> None:
    """A non-str key raises InvalidKeyError and appends nothing."""
    memory = open_memory()
    position = loom.log.position
    with pytest.raises(InvalidKeyError):
        write(memory)
    assert loom.log.position == position


@pytest.mark.parametrize(
    "entries",
    [
        [entry("fine"), entry(float("nan"))],
        [entry("fine"), entry({"k": object()})],
        [{"content": "a dict, not an entry"}],
    ],
)
def test_an_unserialisable_entry_is_refused_before_the_log(
    open_memory: Opener, loom: Loom, entries: list[Any]
) -> None:
    """A bad entry anywhere in the batch raises and nothing of it is logged or stored."""
    memory = open_memory()
    memory.append("k", [entry("kept")])
    position = loom.log.position
    for write in (memory.append, memory.replace):
        with pytest.raises(EntryNotSerialisableError):
            write("k", entries)
    assert loom.log.position == position
    assert [e.content for e in memory.read("k")] == ["kept"]


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_a_bad_search_limit_is_refused(open_memory: Opener, limit: Any) -> None:
    """limit <= 0 (or not an int) raises InvalidLimitError."""
    memory = open_memory()
    memory.append("k", [entry("deploy")])
    with pytest.raises(InvalidLimitError):
        memory.search("k", "deploy", limit=limit)


@pytest.mark.parametrize("query", ["?!...", "the and of", "  ", "--"])
def test_a_query_without_terms_returns_nothing(open_memory: Opener, query: str) -> None:
    """Only punctuation or stop words: the documented result is [] (not an error)."""
    memory = open_memory()
    memory.append("k", [entry("the and of ?!... --")])
    assert memory.search("k", query) == []


def test_search_reads_the_projection(open_memory: Opener) -> None:
    """Search finds what was appended and forgets what was removed."""
    memory = open_memory()
    memory.append("k", [entry("deploy the api", id="a"), entry("rollback", id="b")])
    assert [e.id for e in memory.search("k", "deploy rollback")] != []
    memory.remove("k", ["a"])
    assert [e.id for e in memory.search("k", "deploy")] == []


def test_sql_rows_are_projected_into_the_log_database(tmp_path: Path) -> None:
    """The SQL store's rows live in the log's own file (one backup holds both)."""
    with _loom("sqlite", tmp_path) as loom:
        memory = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
        memory.append("k", [entry("x")])
        with loom.log.engine.connect() as conn:
            count = conn.execute(text("SELECT count(*) FROM loom_memory_entries")).scalar_one()
        assert count == 1


def test_the_longest_key_and_id_are_stored_and_a_longer_one_is_refused_before_the_log(
    open_memory: Opener, loom: Loom
) -> None:
    """Nothing bounded a key or an entry id: the log took a 4,000-character key, then
    PostgreSQL's index refused its row ("index row size 4024 exceeds btree maximum 2704"), and
    the event stayed in the append-only log: every later write to any key, and every opening
    of the memory, failed for good. Both are at most MAX_KEY_BYTES of UTF-8 on every backend;
    the longest (in four-byte letters) is stored and read back, one more is refused typed,
    nothing is written, and the memory stays writable."""
    from loom_memory.entry import MAX_KEY_BYTES

    memory = open_memory()
    longest = "\U0001d11e" * (MAX_KEY_BYTES // 4)
    memory.append(longest, [MemoryEntry(id=longest, content="fits")])
    assert [e.id for e in memory.read(longest)] == [longest]
    position = loom.log.position
    for write, error in (
        (lambda: memory.append(longest + "k", [entry("x")]), InvalidKeyError),
        (
            lambda: memory.append("k", [MemoryEntry(id=longest + "i", content="x")]),
            EntryNotSerialisableError,
        ),
        (lambda: memory.remove("k", [longest + "i"]), InvalidArgumentError),
    ):
        with pytest.raises(error, match=f"over {MAX_KEY_BYTES:,} bytes"):
            write()
    assert loom.log.position == position
    memory.append("after", [entry("still writable")])
    assert [e.content for e in memory.read("after")] == ["still writable"]


def test_the_largest_entry_is_stored_and_a_larger_one_is_refused_before_the_log(
    open_memory: Opener, loom: Loom
) -> None:
    """1.3 MB of distinct words made a PostgreSQL search vector over its 1 MB limit, with the
    same permanent block. An entry is at most MAX_ENTRY_BYTES encoded on every backend: the
    largest, of distinct short words (the densest search vector), is stored and found."""
    from loom_memory.entry import MAX_ENTRY_BYTES

    memory = open_memory()
    words, size, number = [], 0, 0
    while size < MAX_ENTRY_BYTES - 200:
        word = f"w{number:x}"
        words.append(word)
        size += len(word) + 1
        number += 1
    memory.append("big", [MemoryEntry(id="big", content=" ".join(words))])
    assert [e.id for e in memory.search("big", words[-1])] == ["big"]
    position = loom.log.position
    with pytest.raises(EntryNotSerialisableError, match=f"over {MAX_ENTRY_BYTES:,} bytes"):
        memory.append("big", [MemoryEntry(content="x" * MAX_ENTRY_BYTES)])
    assert loom.log.position == position


def test_a_second_memory_on_a_table_another_memory_holds_is_refused(tmp_path: Path) -> None:
    """Two memory names on one table prefix read each other's keys (rows carry no memory
    name), and a rebuild of one deleted the other's rows while its position stayed at the
    head. The second name is refused, naming the first and the way out; the same name opens
    again, and a prefix of its own works."""
    with _loom("sqlite", tmp_path) as loom:
        engine = loom.log.engine
        alice = EventSourcedMemory(loom, store=SqliteMemoryStore(engine), name="alice")
        alice.append("k", [entry("alice's note")])
        with pytest.raises(StoreConfigurationError, match=r"'alice'.*table_prefix"):
            EventSourcedMemory(loom, store=SqliteMemoryStore(engine), name="bob")
        again = EventSourcedMemory(loom, store=SqliteMemoryStore(engine), name="alice")
        assert [e.content for e in again.read("k")] == ["alice's note"]
        bob = EventSourcedMemory(
            loom, store=SqliteMemoryStore(engine, table_prefix="bob_"), name="bob"
        )
        assert bob.read("k") == []
