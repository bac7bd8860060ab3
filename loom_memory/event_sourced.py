"""`EventSourcedMemory`: a memory store whose writes are events in the log.

Every ``append``, ``replace``, ``remove`` and ``clear`` is validated, then appended to the log
as one event on the key's stream (see :mod:`loom_memory.events`), then projected into a backend
store, and only then returns: a read after a write sees it (read-your-writes). Reads and
searches go straight to the backend store, which is a projection and can be deleted and rebuilt
from the log, whole or "as of" a position.

Backends:

* ``store=None`` or an :class:`InMemoryMemoryStore`: projected in-process, rebuilt from the
  log when the memory is opened (the store must be fresh: the memory owns it);
* a :class:`SqliteMemoryStore` / :class:`PostgresMemoryStore` constructed with
  ``loom.log.engine``: store rows and the tracking position commit in one transaction, so
  every process writing the same log and store shares one exactly-once projection.

Both backend kinds have every optional verb, so this class always offers ``replace``,
``remove`` and ``search`` (presence stays a truthful feature flag).

Concurrency: each write appends after the stream version it just read; when another writer
appended to the same key in between (or the database was busy), the write is retried with the
new version under the log's ``write_retry`` policy (jittered backoff within a time budget,
ADR 0019), and raises :class:`~loom_runtime.errors.WriteContentionError` once it is spent.
Retrying is correct because these writes are blind (an append, a replace with a given list, a
remove of given ids, a clear do not depend on what the key held), so the version only orders
writers; it does not guard a read-modify-write. A caller that reads, edits and replaces (as
tiered eviction does) can lose a concurrent append, exactly as with any other store.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from loom_memory.entry import MemoryEntry, check_bounds, check_identifiers, encode_entries
from loom_memory.erasure import seal_entries, write_key
from loom_memory.errors import (
    InvalidArgumentError,
    ProjectionFailedError,
    StoreConfigurationError,
    StoreNotOnLogDatabaseError,
)
from loom_memory.events import (
    MemoryAppended,
    MemoryCleared,
    MemoryRemoved,
    MemoryReplaced,
    memory_stream,
)
from loom_memory.inmemory import InMemoryMemoryStore
from loom_memory.projection import InProcessMemoryProjection, SqlMemoryProjection
from loom_memory.sql import SqlMemoryStore
from loom_memory.store import DEFAULT_SEARCH_LIMIT, check_ids, check_key
from loom_memory.text import check_term_bytes
from loom_memory.tokenizer_record import record_build
from loom_runtime import (
    LogEvent,
    Loom,
    catch_up,
    current_context,
    hold_in_process,
    keyring_for,
    rebuild,
    tracked_names,
)

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def in_a_replay() -> bool:
    """Whether a flow replayed in the log that recorded it is running here (``ctx.replaying``):
    its memory writes are in the log already, and are left out."""
    context = current_context()
    return context is not None and context.replaying


class EventSourcedMemory:
    """A :class:`~loom_memory.store.MemoryStore` recorded in the log and projected to a backend."""

    def __init__(
        self,
        loom: Loom,
        *,
        store: SqlMemoryStore | InMemoryMemoryStore | None = None,
        name: str = "memory",
    ) -> None:
        """Open memory ``name`` of ``loom``'s log and bring ``store`` up to the log's head.

        ``name`` separates memories sharing a log (it is part of every stream id), so it is
        restricted to letters, digits, ``_``, ``.`` and ``-``: no ``:`` to alias a key with.
        """
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidArgumentError(
                f"memory name must be 1-100 letters, digits, '_', '.' or '-', got {name!r}",
                parameter="name",
            )
        self.name = name
        self._log = loom.log
        self._build_recorded = True
        """Whether the log records how the store is built (ADR 0009, amended "build"): an
        in-process store is built by every process that opens it, a SQL store's build is
        recorded with this object's first write."""
        self._store: SqlMemoryStore | InMemoryMemoryStore
        self._projection: SqlMemoryProjection | InProcessMemoryProjection
        if store is None or isinstance(store, InMemoryMemoryStore):
            self._store = InMemoryMemoryStore() if store is None else store
            self._projection = InProcessMemoryProjection(
                self._store, memory=name, keyring=keyring_for(loom.log.engine)
            )
            hold_in_process(loom.log, self._projection)  # an erasure here purges it too
        elif isinstance(store, SqlMemoryStore):
            if store.engine is not loom.log.engine:
                raise StoreNotOnLogDatabaseError(
                    f"{type(store).__name__} writes through {store.engine.url!r}, not the log's "
                    "engine: construct it with loom.log.engine so its rows and the projection's "
                    "position commit in one transaction"
                )
            _refuse_a_shared_table(store, name)
            self._store = store
            self._projection = SqlMemoryProjection(store, memory=name)
            self._build_recorded = False
        else:
            raise StoreConfigurationError(
                f"EventSourcedMemory projects into InMemoryMemoryStore or a SQL store, not "
                f"{type(store).__name__}: a store without transactions or a way to clear it "
                "whole cannot be kept exactly in step with the log"
            )
        catch_up(self._log, self._projection)

    @property
    def store(self) -> SqlMemoryStore | InMemoryMemoryStore:
        """The backend store (a projection: read it freely, never write to it directly)."""
        return self._store

    @property
    def position(self) -> int:
        """The last log position the store reflects."""
        return self._projection.position()

    # -- writes: one event each, projected before returning --------------------------------

    def append(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Add ``entries`` to the end of the list at ``key``; an empty list records nothing."""
        raw = self._checked(key, entries)
        if raw:
            self._write(key, MemoryAppended, {"entries": raw})

    def replace(self, key: str, entries: Sequence[MemoryEntry]) -> None:
        """Make ``entries`` the list at ``key`` (one event, so one atomic step in every store)."""
        self._write(key, MemoryReplaced, {"entries": self._checked(key, entries)})

    def _checked(self, key: str, entries: Sequence[MemoryEntry]) -> list[msgspec.Raw]:
        """``entries`` encoded, once everything the store could not project is refused: a
        write the log took but the store refused would block the memory (every key) for good.
        """
        check_key(key)
        raw = _raw_entries(entries)
        check_bounds(key=key, entries=entries, encoded=raw)
        check_term_bytes(self._store.tokenizer, entries, raw)
        check_identifiers(self._log.redactor, key=key, entries=entries)
        return raw

    def remove(self, key: str, ids: Iterable[str]) -> None:
        """Delete every entry at ``key`` whose id is in ``ids``; no ids records nothing."""
        check_key(key)
        check_bounds(key=key)
        wanted = sorted(check_ids(ids, bounded=True))
        check_identifiers(self._log.redactor, key=key, ids=wanted)
        if wanted:
            self._write(key, MemoryRemoved, {"ids": wanted})

    def clear(self, key: str) -> None:
        """Remove every entry at ``key``."""
        check_key(key)
        check_bounds(key=key)
        check_identifiers(self._log.redactor, key=key)
        self._write(key, MemoryCleared, {})

    # -- reads: straight from the projection -----------------------------------------------

    def read(self, key: str) -> list[MemoryEntry]:
        """Return the list at ``key`` in append order, as of :attr:`position`."""
        return self._store.read(key)

    def search(
        self, key: str, query: str, *, limit: int = DEFAULT_SEARCH_LIMIT
    ) -> list[MemoryEntry]:
        """Return at most ``limit`` entries at ``key`` matching any term of ``query``.

        A query with no terms (only punctuation or stop words) returns ``[]``.
        """
        return self._store.search(key, query, limit=limit)

    # -- the projection --------------------------------------------------------------------

    def catch_up(self, *, upto: int | None = None) -> int:
        """Apply the log's memory events the store has not seen (up to ``upto``); return position.

        Needed only after a :class:`ProjectionFailedError`, or for an in-process store to see
        another process's writes; every write of this object catches up before returning.
        """
        return catch_up(self._log, self._projection, upto=upto)

    def rebuild(self, *, upto: int | None = None) -> int:
        """Empty the store and project the log into it again, up to ``upto`` (inclusive).

        ``upto=P`` gives the memory exactly as it was when the log's position was P; the next
        write (or :meth:`catch_up`) brings it back to the head.
        """
        return rebuild(self._log, self._projection, upto=upto)

    def close(self) -> None:
        """Close the backend store (a store given an engine leaves the engine open)."""
        if isinstance(self._store, SqlMemoryStore):
            self._store.close()

    def _write(self, key: str, event: type[LogEvent], fields: Mapping[str, Any]) -> None:
        if in_a_replay():
            # A replay appends nothing (ADR 0002, amended "replay writes nothing"): the flow
            # body's write is in the log from the run it replays, and a recall recorded there
            # is answered from it; written again, each replay added the entries once more.
            return
        stream = memory_stream(self.name, key)
        payload = {"memory": self.name, "key": key, **fields}
        # With encryption on, every write reads the key's row first: an erased key is
        # SubjectErasedError here, before anything is appended (ADR 0060).
        aead, guard = write_key(self._log, self.name, key)
        entries: list[msgspec.Raw] | None = fields.get("entries")
        redactor = self._log.redactor
        if aead is not None and entries is not None and redactor is not None:
            # Redacted before they are sealed, as the log would redact them in clear
            # (ADR 0012): a ciphertext hides a secret from every pattern.
            entries = [redactor.raw(raw, path=f"entries[{i}]") for i, raw in enumerate(entries)]

        if not self._build_recorded and isinstance(self._store, SqlMemoryStore):
            # Before the write, so a store holding rows of this log is never unrecorded.
            record_build(
                self._log,
                self.name,
                self._store.table_prefix,
                tokenizer=self._store.tokenizer,
                postings=self._store.keeps_postings,
            )
            self._build_recorded = True

        def plan(version: int) -> tuple[list[tuple[type[LogEvent], dict[str, Any]]], None]:
            # Blind: the same event at any version; sealed entries name the version they are
            # stored at (their associated data), so they are sealed again on a retry.
            if aead is None or entries is None:
                return [(event, payload)], None
            sealed = seal_entries(aead, self.name, key, version + 1, entries)
            return [(event, {**payload, "entries": sealed})], None

        [position], _ = self._log.append_replanned(
            stream,
            plan,
            what=f"the {event.__name__} of key {key!r} in memory {self.name!r}",
            precondition=guard,
        )
        logger.debug(
            "memory %r: %s of key %r at log position %d", self.name, event.__name__, key, position
        )
        try:
            self.catch_up()
        except Exception as exc:
            raise ProjectionFailedError(
                f"the {event.__name__} of {key!r} is in the log at position {position}, but "
                f"{type(self._store).__name__} failed to apply it ({exc}); the store is "
                "unchanged: fix it and call catch_up()",
                position=position,
            ) from exc


logger = logging.getLogger("loom.memory")
"""Each write, at DEBUG: which memory, key and event, and the log position it is stored at."""


def _raw_entries(entries: Sequence[MemoryEntry]) -> list[msgspec.Raw]:
    """Validate and encode ``entries`` before anything reaches the log."""
    return [msgspec.Raw(data) for data in encode_entries(entries)]


def _refuse_a_shared_table(store: SqlMemoryStore, name: str) -> None:
    """Refuse a memory whose store's tables another memory's projection already fills.

    Rows carry no memory name: two memories on one table prefix read each other's keys, and
    a rebuild of one deletes the other's rows while the other's position stays at the head.
    The projections' tracking rows (``loom_memory:NAME:PREFIX``) say who holds a prefix."""
    own = f"loom_memory:{name}:{store.table_prefix}"
    for tracked in tracked_names(store.engine):
        package, _, rest = tracked.partition(":")
        other, _, prefix = rest.rpartition(":")
        if package == "loom_memory" and prefix == store.table_prefix and tracked != own:
            raise StoreConfigurationError(
                f"the tables of prefix {prefix!r} already hold memory {other!r}; memory "
                f"{name!r} needs tables of its own: give its store another table_prefix"
            )
