"""A SQL memory store is rebuilt as the application built it: the log records how.

An attack review dropped a stemmed memory store's tables (a read model: "deleting it loses
nothing") and ran `loom doctor`: the store was made again with the PLAIN tokenizer, read from
the tables that were gone, and caught up; the application then could not open its own memory
(StoreConfigurationError). Deleting only the store's settings row did the same through `loom
rebuild`. A store's tokenizer and postings are now recorded in the log with its first write,
and a rebuild reads them from there; tables that disagree with the log are reported, never
rebuilt by a guess.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from sqlalchemy import Engine, text

from loom_memory import (
    EventSourcedMemory,
    MemoryEntry,
    PostgresMemoryStore,
    SqliteMemoryStore,
    StoreConfigurationError,
    Tokenizer,
)
from loom_memory.entry import encode_entries
from loom_memory.events import MemoryAppended, memory_stream
from loom_memory.projection import SqlMemoryProjection, memory_projections
from loom_memory.sql import SqlMemoryStore
from loom_runtime import Loom, catch_up, rebuild
from loom_runtime.projection import TrackedProjection

ENGLISH = Tokenizer(stemmer="english")
ENTRIES = [
    MemoryEntry(
        id="e1",
        content={"text": "the runners were running"},
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
    ),
    MemoryEntry(id="e2", content={"text": "a cat sat"}, timestamp=datetime(2026, 1, 1, tzinfo=UTC)),
]


def _store(loom: Loom, *, tokenizer: Tokenizer = ENGLISH, postings: bool = True) -> SqlMemoryStore:
    kind = (
        PostgresMemoryStore if loom.log.engine.dialect.name == "postgresql" else SqliteMemoryStore
    )
    return kind(loom.log.engine, table_prefix="mem_", postings=postings, tokenizer=tokenizer)


def _memory(loom: Loom, *, tokenizer: Tokenizer = ENGLISH) -> EventSourcedMemory:
    return EventSourcedMemory(loom, store=_store(loom, tokenizer=tokenizer), name="m")


def _rebuilt(loom: Loom) -> list[TrackedProjection]:
    """What `loom rebuild` does to the memory stores: open each as the log says, rebuild it."""
    projections = memory_projections(loom.log)
    for projection in projections:
        rebuild(loom.log, projection)
    return list(projections)


def _terms(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT term FROM mem_postings")).scalars())


def test_a_stemmed_store_whose_tables_were_dropped_is_rebuilt_stemmed(loom: Loom) -> None:
    """Rebuilt from the log's record, the application opens it and finds "running" for "run"."""
    memory = _memory(loom)
    memory.append("k", ENTRIES)
    memory.store.drop()  # type: ignore[union-attr]
    [projection] = _rebuilt(loom)
    assert _terms(loom.log.engine) == {"run", "runner", "cat", "sat"}
    assert projection.position() == loom.log.position
    reopened = _memory(loom)  # StoreConfigurationError before: rebuilt plain
    assert [e.id for e in reopened.search("k", "run")] == ["e1"]


def test_tables_that_disagree_with_the_log_are_reported_not_rebuilt_plain(loom: Loom) -> None:
    """Its settings row deleted, the store's rows are still stemmed but its tables say plain:
    opening it is reported (to doctor's ``unopened``), and its rows are left as they are;
    dropped, its tables are rebuilt stemmed."""
    memory = _memory(loom)
    memory.append("k", ENTRIES)
    with loom.log.engine.begin() as conn:
        conn.execute(text("DELETE FROM mem_settings"))
    reported: list[tuple[str, Exception]] = []
    found = memory_projections(loom.log, unopened=lambda name, exc: reported.append((name, exc)))
    assert found == []
    [(name, error)] = reported
    assert name == "loom_memory:m:mem_" and isinstance(error, StoreConfigurationError)
    assert "loom rebuild" in str(error)
    assert _terms(loom.log.engine) == {"run", "runner", "cat", "sat"}
    memory.store.drop()  # type: ignore[union-attr]  # what the error says to do
    _rebuilt(loom)
    assert [e.id for e in _memory(loom).search("k", "run")] == ["e1"]


def test_the_latest_build_is_the_one_a_rebuild_uses(loom: Loom) -> None:
    """A store dropped and made again plain by its application is rebuilt plain; one build is
    recorded per change, not per write or per open."""
    memory = _memory(loom)
    memory.append("k", ENTRIES[:1])
    memory.append("k", ENTRIES[1:])
    _memory(loom).append("j", ENTRIES[:1])
    memory.store.drop()  # type: ignore[union-attr]
    plain = _memory(loom, tokenizer=Tokenizer())
    plain.append("j", ENTRIES[1:])
    plain.store.drop()  # type: ignore[union-attr]
    _rebuilt(loom)
    assert "running" in _terms(loom.log.engine)
    assert [e.id for e in _memory(loom, tokenizer=Tokenizer()).search("k", "running")] == ["e1"]
    topics = [n.topic for n in loom.log.notifications() if n.topic == "loom.memory.StoreBuilt"]
    assert len(topics) == 2


def test_a_plain_store_records_nothing(loom: Loom) -> None:
    """A plain store without postings is what a store with no record is read as: its writes
    append their own events and no other, as before."""
    memory = EventSourcedMemory(
        loom, store=_store(loom, tokenizer=Tokenizer(), postings=False), name="m"
    )
    before = loom.log.position
    memory.append("k", ENTRIES)
    memory.clear("k")
    assert loom.log.position == before + 2


def test_a_store_built_before_builds_were_recorded_is_read_from_its_tables(loom: Loom) -> None:
    """A log holding no record (written by an older release) opens the store as its tables
    say, as before: its stemmer and postings."""
    loom.log.append(
        memory_stream("m", "k"),
        expected_version=0,
        events=[(MemoryAppended, {"memory": "m", "key": "k", "entries": _raw(ENTRIES)})],
    )
    catch_up(loom.log, SqlMemoryProjection(_store(loom), memory="m"))
    [projection] = memory_projections(loom.log)
    assert isinstance(projection, SqlMemoryProjection)
    assert projection.store.tokenizer.identity == ENGLISH.identity
    assert projection.store.keeps_postings


def _raw(entries: list[MemoryEntry]) -> list[msgspec.Raw]:
    return [msgspec.Raw(data) for data in encode_entries(entries)]
