"""Memory's tracked projections pass the projection conformance kit (ADR 0022).

Events are written by an :class:`EventSourcedMemory` with its own in-process store; the
projection under test is a second one of the same memory, so only the kit moves it.

The harness keeps its own model of what it wrote (each key's list, changed by plain list
operations, no projection code), and gives it to the kit as the expected read model: read
through a scratch store of the projection's own kind filled with those lists, so that a
search ranks the same entries the same way. The SQL harness can reopen its projection over
the same tables, and drop them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from loom_memory import (
    EventSourcedMemory,
    InMemoryMemoryStore,
    MemoryEntry,
    MemoryStore,
    PostgresMemoryStore,
    SqliteMemoryStore,
)
from loom_memory.conformance import entry
from loom_memory.events import (
    MEMORY_TOPICS,
    MemoryAppended,
    MemoryCleared,
    MemoryRemoved,
    MemoryReplaced,
)
from loom_memory.projection import InProcessMemoryProjection, SqlMemoryProjection
from loom_runtime import EventLog, Loom
from loom_runtime.projection_conformance import (
    Page,
    TrackedProjectionContract,
)

MEMORY = "kit"
KEYS = ("a0", "a1", "b")
PREFIX = "kit_"


def read_memory(store: Any) -> object:
    """What a memory projection's readers see in ``store``: every key, and a search of each."""
    return {
        "keys": {key: store.read(key) for key in KEYS},
        "search": [store.search(key, "step replaced second") for key in KEYS],
    }


class MemoryHarness:
    """Writes every kind of memory event; reads every key and a search of the projection's
    store; expects what its own model of the lists shows."""

    def __init__(self, loom: Loom, projection: Any) -> None:
        self.loom = loom
        self.writer = EventSourcedMemory(loom, name=MEMORY)
        self._projection = projection
        self.lists: dict[str, list[MemoryEntry]] = {key: [] for key in KEYS}
        """Each key's list as the writes so far leave it, by list operations alone."""
        self.written: dict[str, int] = {}
        """How many events of each class the writes so far appended."""

    @property
    def log(self) -> EventLog:
        return self.loom.log

    @property
    def projection(self) -> Any:
        return self._projection

    def write(self, step: int) -> int:
        """Append, replace and remove (and every third step clear): one event each."""
        key = f"a{step % 2}"
        first, second = entry(f"step {step} first", id=f"{step}.1"), entry(f"step {step} second")
        replaced = entry(f"step {step} replaced", id=f"{step}.r")
        self.writer.append(key, [first, second])
        self.writer.replace("b", [replaced])
        self.writer.remove(key, [f"{step}.1"])
        self.lists[key] = [*self.lists[key], first, second]
        self.lists["b"] = [replaced]
        self.lists[key] = [item for item in self.lists[key] if item.id != f"{step}.1"]
        written = [MemoryAppended, MemoryReplaced, MemoryRemoved]
        if step % 3 == 2:
            cleared = f"a{(step + 1) % 2}"
            self.writer.clear(cleared)
            self.lists[cleared] = []
            written.append(MemoryCleared)
        for kind in written:
            self.written[kind.__name__] = self.written.get(kind.__name__, 0) + 1
        return len(written)

    def read_model(self) -> object:
        return read_memory(self._projection.store)

    def expected_read_model(self) -> object:
        """The model's lists, read through a fresh store of the projection's kind."""
        scratch = self.scratch_store()
        for key, entries in self.lists.items():
            scratch.clear(key)
            scratch.append(key, entries)
        return read_memory(scratch)

    def scratch_store(self) -> MemoryStore:
        return InMemoryMemoryStore()


class SqlMemoryHarness(MemoryHarness):
    """The SQL projection, which can be reopened over its tables and have them dropped (the
    optional clauses); its expected read model is read through scratch tables of its kind."""

    def drop(self) -> None:
        self._projection.store.drop()
        self._projection = _sql_projection(self.loom)

    def reopen(self) -> None:
        self._projection = _sql_projection(self.loom)

    def scratch_store(self) -> MemoryStore:
        return _sql_store(self.loom, "kit_expected_")


def _sql_store(loom: Loom, prefix: str) -> PostgresMemoryStore | SqliteMemoryStore:
    engine = loom.log.engine
    store_class = PostgresMemoryStore if engine.dialect.name == "postgresql" else SqliteMemoryStore
    return store_class(engine, table_prefix=prefix)


def _sql_projection(loom: Loom) -> SqlMemoryProjection:
    return SqlMemoryProjection(_sql_store(loom, PREFIX), memory=MEMORY)


class TestInProcessMemoryProjection(TrackedProjectionContract):
    @pytest.fixture
    def harness(self, sqlite_url: str) -> Iterator[MemoryHarness]:
        with Loom(sqlite_url) as loom:
            projection = InProcessMemoryProjection(InMemoryMemoryStore(), memory=MEMORY)
            yield MemoryHarness(loom, projection)


class TestSqlMemoryProjection(TrackedProjectionContract):
    @pytest.fixture
    def harness(self, loom: Loom) -> SqlMemoryHarness:
        return SqlMemoryHarness(loom, _sql_projection(loom))


# -- the kit's own negative controls -----------------------------------------------------------


class CountingProjection:
    """A minimal in-process projection (events counted by type), with a flaw to switch on."""

    topics = MEMORY_TOPICS

    def __init__(self, *, flaw: str | None = None) -> None:
        self.name = "counting"
        self.flaw = flaw
        self.counts: dict[str, int] = {}
        self._position = 0

    def position(self) -> int:
        return self._position

    def apply(self, events: Page, *, after: int, upto: int) -> bool:
        if self.flaw == "checks only that the page is new":  # as every projection once did
            moved = bool(events and events[0][0] <= self._position) or upto <= self._position
        else:
            moved = self._position != after
        if moved and self.flaw != "accepts a stale page":
            return False
        before = dict(self.counts)
        try:
            for _, event in events:
                self.counts[type(event).__name__] = self.counts.get(type(event).__name__, 0) + 1
        except BaseException:
            if self.flaw != "keeps half a page":
                self.counts = before
            raise
        self._position = upto
        return True

    def reset(self) -> None:
        self.counts = {}
        self._position = 0


class CountingHarness(MemoryHarness):
    def read_model(self) -> object:
        assert isinstance(self._projection, CountingProjection)
        return dict(self._projection.counts)

    def expected_read_model(self) -> object:
        return dict(self.written)


class TestCountingProjection(TrackedProjectionContract):
    """The reference the negative controls break: sound, it passes the kit."""

    @pytest.fixture
    def harness(self, sqlite_url: str) -> Iterator[CountingHarness]:
        with Loom(sqlite_url) as loom:
            yield CountingHarness(loom, CountingProjection())


@pytest.mark.parametrize(
    ("flaw", "clause"),
    [
        ("keeps half a page", "test_a_crash_mid_page_changes_nothing"),
        ("accepts a stale page", "test_a_page_already_applied_is_refused"),
        ("checks only that the page is new", "test_a_page_read_before_a_reset_is_refused"),
    ],
)
def test_the_kit_fails_a_flawed_projection(sqlite_url: str, flaw: str, clause: str) -> None:
    """Negative control: each flaw fails the clause written for it."""
    with Loom(sqlite_url) as loom:
        harness = CountingHarness(loom, CountingProjection(flaw=flaw))
        with pytest.raises(AssertionError):
            getattr(TrackedProjectionContract(), clause)(harness)
