"""Memory's tracked projections pass the projection conformance kit (ADR 0022).

Events are written by an :class:`EventSourcedMemory` with its own in-process store; the
projection under test is a second one of the same memory, so only the kit moves it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from loom_memory import (
    EventSourcedMemory,
    InMemoryMemoryStore,
    PostgresMemoryStore,
    SqliteMemoryStore,
)
from loom_memory.conformance import entry
from loom_memory.events import MEMORY_TOPICS
from loom_memory.projection import InProcessMemoryProjection, SqlMemoryProjection
from loom_runtime import EventLog, Loom
from loom_runtime.projection_conformance import (
    Page,
    TrackedProjectionContract,
)

MEMORY = "kit"
KEYS = ("a0", "a1", "b")
PREFIX = "kit_"


class MemoryHarness:
    """Writes every kind of memory event; reads every key and a search of the projection's
    store."""

    def __init__(self, loom: Loom, projection: Any) -> None:
        self.loom = loom
        self.writer = EventSourcedMemory(loom, name=MEMORY)
        self._projection = projection

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
        self.writer.append(key, [first, second])
        self.writer.replace("b", [entry(f"step {step} replaced", id=f"{step}.r")])
        self.writer.remove(key, [f"{step}.1"])
        if step % 3 == 2:
            self.writer.clear(f"a{(step + 1) % 2}")
            return 4
        return 3

    def read_model(self) -> object:
        store = self._projection.store
        return {
            "keys": {key: store.read(key) for key in KEYS},
            "search": [store.search(key, "step replaced second") for key in KEYS],
        }


class SqlMemoryHarness(MemoryHarness):
    """The SQL projection, whose tables can be dropped (the optional clause)."""

    def drop(self) -> None:
        self._projection.store.drop()
        self._projection = _sql_projection(self.loom)


def _sql_projection(loom: Loom) -> SqlMemoryProjection:
    engine = loom.log.engine
    store_class = PostgresMemoryStore if engine.dialect.name == "postgresql" else SqliteMemoryStore
    return SqlMemoryProjection(store_class(engine, table_prefix=PREFIX), memory=MEMORY)


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
