"""How memory events reach a store: one dispatch, two tracked projections.

:func:`apply_event` turns one event into the store verb it records. It is the only place that
knows the mapping, so the SQL and in-process projections cannot drift apart.

* :class:`SqlMemoryProjection` is a :class:`~loom_runtime.projection.SQLProjection`: each page's
  store writes go through the store's ``conn=`` on the page's transaction, so the rows and the
  tracking position commit together or not at all (exactly once, crash-safe, shared by every
  process on the database).
* :class:`InProcessMemoryProjection` holds an :class:`InMemoryMemoryStore` and its position side
  by side in the process. It is rebuilt from the log when opened. A page that fails is undone
  key by key (the touched keys' lists were read before the page), so the same guarantee holds:
  rows and position unchanged, and the next catch-up applies the page again.

A projection serves ONE memory name: it skips other memories' events, and its reset clears the
whole store (a SQL store's table, or every key the in-process projection wrote).

With encryption on, entries are stored sealed under their memory key's data key and opened
here; an entry whose key was destroyed is skipped, and a forget event naming a key of this
memory clears it (ADR 0060), so the live store and a rebuild from position 0 agree.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, select

from loom_memory.entry import MemoryEntry
from loom_memory.erasure import forget_destroyed, keys_named, open_entries
from loom_memory.errors import StoreConfigurationError
from loom_memory.events import (
    MEMORY_TOPICS,
    MemoryAppended,
    MemoryCleared,
    MemoryEvent,
    MemoryRemoved,
    MemoryReplaced,
)
from loom_memory.inmemory import InMemoryMemoryStore
from loom_memory.postgres import PostgresMemoryStore
from loom_memory.postings import built_with_postings
from loom_memory.sql import SqlMemoryStore
from loom_memory.sqlite import SqliteMemoryStore
from loom_memory.text import tokenizer_named
from loom_memory.tokenizer_record import recorded_build, recorded_tokenizer
from loom_runtime import (
    DomainEventProtocol,
    EventLog,
    Forgotten,
    SQLProjection,
    Unopened,
    keyring_for,
    open_each,
    tracked_names,
)

if TYPE_CHECKING:
    from loom_runtime import Keyring


class MemoryWriter(Protocol):
    """The four write verbs an event can stand for."""

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None: ...

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None: ...

    def remove(self, key: str, ids: Iterable[str]) -> None: ...

    def clear(self, key: str) -> None: ...


def apply_event(
    writer: MemoryWriter, event: MemoryEvent, entries: Sequence[MemoryEntry] | None
) -> None:
    """Perform the write ``event`` records on ``writer``.

    ``entries`` are the event's entries opened (:func:`opened_entries`); None for an event
    whose key was erased, which writes nothing: the forget event clears the key wherever it
    is in the log, so a rebuild ends where the live store does (ADR 0060)."""
    match event:
        case MemoryAppended():
            if entries is not None:
                writer.append(event.key, entries)
        case MemoryReplaced():
            if entries is not None:
                writer.replace(event.key, entries)
        case MemoryRemoved():
            writer.remove(event.key, event.ids)
        case MemoryCleared():
            writer.clear(event.key)


def memory_event(event: DomainEventProtocol[Any], memory: str) -> MemoryEvent | None:
    """``event`` if it is a write to ``memory``, else None (another memory's, or not memory)."""
    if isinstance(event, MemoryAppended | MemoryReplaced | MemoryRemoved | MemoryCleared):
        return event if event.memory == memory else None
    return None


def opened_entries(keyring: Keyring | None, event: MemoryEvent) -> list[MemoryEntry] | None:
    """The entries an append or a replace writes, opened if sealed (none for the others);
    None once the key was erased."""
    if isinstance(event, MemoryAppended | MemoryReplaced):
        return open_entries(keyring, event)
    return []


def forget_keys(
    writer: MemoryWriter, event: Forgotten, memory: str, held: Iterable[str]
) -> list[str]:
    """Clear every key of ``memory`` the forget event names, and return them: their entries,
    search rows, postings and counts leave the store (ADR 0060). A second forget event of the
    same key (an interrupted erasure run again) finds it empty."""
    keys = keys_named(event.subjects, memory, held)
    for key in keys:
        writer.clear(key)
    return keys


class _InTransaction:
    """A SQL store's write verbs bound to one connection (the projection page's transaction)."""

    def __init__(self, store: SqlMemoryStore, conn: Connection) -> None:
        self._store = store
        self._conn = conn

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        self._store.append(key, entries, conn=self._conn)

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        self._store.replace(key, entries, conn=self._conn)

    def remove(self, key: str, ids: Iterable[str]) -> None:
        self._store.remove(key, ids, conn=self._conn)

    def clear(self, key: str) -> None:
        self._store.clear(key, conn=self._conn)


class SqlMemoryProjection(SQLProjection):
    """Projects one memory's events into a SQL store on the log's database.

    Tracked as ``loom_memory:<memory>:<table prefix>``, so the same memory projected into two
    tables keeps two positions. The store must write through the log's engine (checked by the
    caller): the page's transaction is opened on it and handed to the store as ``conn``.
    """

    topics = (*MEMORY_TOPICS, Forgotten.TOPIC)

    def __init__(self, store: SqlMemoryStore, *, memory: str) -> None:
        super().__init__(store.engine, name=f"loom_memory:{memory}:{store.table_prefix}")
        self.store = store
        self.memory = memory
        self._opened: dict[int, list[MemoryEntry] | None] = {}
        self.create_tables(rows_lost=store.created_tables)

    def apply(
        self, events: Sequence[tuple[int, DomainEventProtocol[Any]]], *, after: int, upto: int
    ) -> bool:
        """Open the page's sealed entries, then apply it in one transaction: reading a key
        inside that transaction would wait for the write lock it holds (SQLite)."""
        with self._applying:  # the page's opened entries are this object's state
            keyring = keyring_for(self.engine)
            mine = {position: memory_event(event, self.memory) for position, event in events}
            forget_destroyed(keyring, mine.values())
            self._opened = {
                position: opened_entries(keyring, event)
                for position, event in mine.items()
                if event is not None
            }
            try:
                return super().apply(events, after=after, upto=upto)
            finally:
                self._opened = {}

    def handle(self, conn: Connection, position: int, event: DomainEventProtocol[Any]) -> None:
        """Apply one of this memory's events (or a forget event naming its keys) inside the
        page's transaction; skip the rest."""
        writer = _InTransaction(self.store, conn)
        if isinstance(event, Forgotten):
            held = conn.execute(select(self.store.entries.c.key).distinct()).scalars()
            if forget_keys(writer, event, self.memory, held):
                self.store.forget_deleted(conn=conn)
            return
        mine = memory_event(event, self.memory)
        if mine is not None:
            apply_event(writer, mine, self._opened[position])

    def clear(self, conn: Connection) -> None:
        """Delete every entry of every key, search structures included."""
        self.store.clear_all(conn=conn)


class InProcessMemoryProjection:
    """Projects one memory's events into an in-memory store whose position lives beside it.

    Both die with the process, so they can never disagree across a crash; within the process a
    lock serialises pages, and a page that raises is undone before the error propagates.
    """

    topics = (*MEMORY_TOPICS, Forgotten.TOPIC)

    def __init__(
        self, store: InMemoryMemoryStore, *, memory: str, keyring: Keyring | None = None
    ) -> None:
        """``keyring`` opens sealed entries (the log's, when it is encrypted)."""
        self.store = store
        self.memory = memory
        self.keyring = keyring
        self.name = f"loom_memory:{memory}:in-process"
        self._position = 0
        self._keys: set[str] = set()
        self._lock = threading.Lock()

    def position(self) -> int:
        """The last log position applied (0 before any)."""
        return self._position

    def apply(
        self, events: Sequence[tuple[int, DomainEventProtocol[Any]]], *, after: int, upto: int
    ) -> bool:
        """Apply a page read after ``after`` and move to ``upto``, all or nothing; False if
        the position moved since the page was read (another caller got there, or a reset)."""
        with self._lock:
            if self._position != after:
                return False
            before: dict[str, list[MemoryEntry]] = {}
            forget_destroyed(self.keyring, (event for _, event in events))
            try:
                for _, event in events:
                    touched: list[tuple[str, MemoryEvent | None]]
                    if isinstance(event, Forgotten):
                        keys = keys_named(event.subjects, self.memory, self._keys)
                        touched = [(key, None) for key in keys]
                    else:
                        mine = memory_event(event, self.memory)
                        if mine is None:
                            continue
                        touched = [(mine.key, mine)]
                    for key, write in touched:
                        if key not in before:
                            before[key] = self.store.read(key)
                        if write is None:
                            self.store.clear(key)
                        else:
                            self._keys.add(key)
                            apply_event(self.store, write, opened_entries(self.keyring, write))
            except BaseException:
                for key, entries in before.items():
                    self.store.replace(key, entries)
                raise
            self._position = upto
            return True

    def reset(self) -> None:
        """Clear every key this projection wrote and go back to position 0."""
        with self._lock:
            for key in self._keys:
                self.store.clear(key)
            self._keys.clear()
            self._position = 0


def memory_projections(
    log: EventLog, *, unopened: Unopened | None = None
) -> list[SqlMemoryProjection]:
    """The SQL memory projections tracked in ``log``'s database (the ``loom.projections``
    entry point): found by their tracking names, ``loom_memory:<memory>:<table prefix>``.

    Each store is opened as it was built, as the log records it (else as its own tables say):
    with its tokenizer and with postings when it keeps them. Opened with the defaults, a
    stemmed store refused to open, and a postings store caught up without postings its
    search reads. A store that cannot be opened here is told to ``unopened`` by its tracking
    name, and the others are still returned (:func:`~loom_runtime.projection.open_each`).
    """
    store_class = (
        PostgresMemoryStore if log.engine.dialect.name == "postgresql" else SqliteMemoryStore
    )

    def opener(memory: str, prefix: str) -> Callable[[], SqlMemoryProjection]:
        return lambda: SqlMemoryProjection(
            _as_built(store_class, log, memory, prefix), memory=memory
        )

    openers = []
    for name in tracked_names(log.engine):
        kind, _, rest = name.partition(":")
        memory, _, prefix = rest.partition(":")
        if kind == "loom_memory" and memory and prefix:
            openers.append((name, opener(memory, prefix)))
    return open_each(openers, unopened)


def _as_built(
    store_class: type[SqlMemoryStore], log: EventLog, memory: str, prefix: str
) -> SqlMemoryStore:
    """Memory ``memory``'s store at ``prefix``, opened with the tokenizer and postings the log
    records for it (ADR 0009, amended "build"): its tables may be gone, or their settings row,
    and read from them a stemmed store came back plain. A store the log records nothing of is
    opened as its tables say. Tables that disagree with the log's record were altered outside
    it, and are refused rather than rebuilt by a guess."""
    recorded = recorded_build(log, memory, prefix)
    if recorded is None:
        postings = built_with_postings(log.engine, prefix)
        tokenizer = recorded_tokenizer(log.engine, prefix)
    else:
        postings, tokenizer = recorded.postings, tokenizer_named(recorded.tokenizer)
    try:
        return store_class(log.engine, table_prefix=prefix, postings=postings, tokenizer=tokenizer)
    except StoreConfigurationError as exc:
        if recorded is None:
            raise
        raise StoreConfigurationError(
            f"the log records memory {memory!r}'s store {prefix}* as built with the tokenizer "
            f"{recorded.tokenizer!r}, but its tables were altered outside the log and say "
            "otherwise: drop them (a projection: nothing is lost) and run `loom rebuild`. "
            f"The store said: {exc}"
        ) from exc
