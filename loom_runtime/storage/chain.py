"""The hash chain's side table, written by the recorders in the events' own transaction.

The links and what they prove are :mod:`loom_runtime.integrity` (ADR 0011); this module holds
the SQL of ``loom_chain`` for each backend and the base every chaining recorder shares. Each
backend's recorder (:mod:`loom_runtime.storage.sqlite`, :mod:`loom_runtime.storage.postgres`)
appends the chain rows after its insert, while its transaction holds the write lock.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from loom_runtime.integrity import GENESIS, global_link, stream_link
from loom_runtime.log import Row

CHAIN_TABLE = "loom_chain"
_PAGE = 1000


def _values(row: Any) -> tuple[Any, ...]:
    """A DB-API row as a tuple, whether the driver returns tuples, sqlite3.Row or dicts."""
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


class ChainTable:
    """The SQL of ``loom_chain`` for one backend, on a DB-API cursor of the caller's transaction.

    One class for every backend: they differ only in the placeholder, the table names, the
    events table's id column and how an originator id is stored (hex text, uuid, bytes).
    """

    def __init__(
        self,
        *,
        placeholder: str,
        chain_table: str,
        events_table: str,
        event_id: str,
        ddl: Sequence[str],
        db_originator: Callable[[UUID | str], object],
    ) -> None:
        p = placeholder
        self.ddl = tuple(ddl)
        self.db_originator = db_originator
        self._head = (
            f"(SELECT global_hash FROM {chain_table} ORDER BY notification_id DESC LIMIT 1)"
        )
        self._stream_head = (
            f"(SELECT stream_hash FROM {chain_table} WHERE originator_id = {p} "
            "ORDER BY notification_id DESC LIMIT 1)"
        )
        self._insert = f"INSERT INTO {chain_table} VALUES ({p}, {p}, {p}, {p}, {p})"
        self._bounds = (
            f"SELECT (SELECT MAX({event_id}) FROM {events_table}) AS last_event, "
            f"(SELECT MAX(notification_id) FROM {chain_table}) AS last_link, "
            f"(SELECT MIN({event_id}) FROM {events_table}) AS first_event, "
            f"(SELECT MIN(notification_id) FROM {chain_table}) AS first_link"
        )
        self._events_page = (
            f"SELECT {event_id}, originator_id, originator_version, topic, state "
            f"FROM {events_table} WHERE {event_id} > {p} AND {event_id} <= {p} "
            f"ORDER BY {event_id} LIMIT {p}"
        )
        self._links_page = (
            "SELECT notification_id, originator_id, originator_version, stream_hash, "
            f"global_hash FROM {chain_table} WHERE notification_id > {p} "
            f"AND notification_id <= {p} ORDER BY notification_id LIMIT {p}"
        )

    @classmethod
    def for_sqlite(cls, events_table: str) -> ChainTable:
        return cls(
            placeholder="?",
            chain_table=CHAIN_TABLE,
            events_table=events_table,
            event_id="rowid",
            ddl=(
                f"CREATE TABLE IF NOT EXISTS {CHAIN_TABLE} (notification_id INTEGER PRIMARY KEY, "
                "originator_id TEXT NOT NULL, originator_version INTEGER NOT NULL, "
                "stream_hash BLOB NOT NULL, global_hash BLOB NOT NULL)",
                f"CREATE INDEX IF NOT EXISTS {CHAIN_TABLE}_stream_idx "
                f"ON {CHAIN_TABLE} (originator_id, notification_id)",
            ),
            db_originator=lambda o: o.hex if isinstance(o, UUID) else o,
        )

    @classmethod
    def for_postgres(cls, *, schema: str, events_table: str) -> ChainTable:
        chain = f'"{schema}"."{CHAIN_TABLE}"'
        return cls(
            placeholder="%s",
            chain_table=chain,
            events_table=f'"{schema}"."{events_table}"',
            event_id="notification_id",
            ddl=(
                f"CREATE TABLE IF NOT EXISTS {chain} (notification_id bigint PRIMARY KEY, "
                "originator_id uuid NOT NULL, originator_version bigint NOT NULL, "
                "stream_hash bytea NOT NULL, global_hash bytea NOT NULL)",
                f'CREATE INDEX IF NOT EXISTS "{CHAIN_TABLE}_stream_idx" '
                f"ON {chain} (originator_id, notification_id)",
            ),
            db_originator=lambda o: o,
        )

    def append(
        self,
        cursor: Any,
        events: Sequence[StoredEvent],
        ids: Sequence[int],
        known: KnownHeads | None = None,
    ) -> None:
        """Chain ``events`` (just inserted with ``ids``), inside the caller's transaction.

        Must run after the events' insert, while the transaction holds the write lock: only
        then is the head read here still the head when this transaction commits. With
        ``known``, the heads this writer itself left are used instead of reading them, when
        ``ids`` prove nothing was appended since (see :class:`KnownHeads`); ``known`` is
        advanced to the heads this append leaves.
        """
        originators = [self.db_originator(event.originator_id) for event in events]
        unique = list(dict.fromkeys(originators))
        heads = known.heads(ids, unique) if known is not None else None
        previous, streams = heads if heads is not None else self._heads(cursor, unique)
        rows = []
        for event, originator, notification_id in zip(events, originators, ids, strict=True):
            stream_hash = stream_link(
                streams[originator],
                topic=event.topic,
                originator_id=event.originator_id,
                version=event.originator_version,
                state=event.state,
            )
            previous = global_link(previous, notification_id, stream_hash)
            streams[originator] = stream_hash
            rows.append(
                (notification_id, originator, event.originator_version, stream_hash, previous)
            )
        if len(rows) == 1:
            cursor.execute(self._insert, rows[0])
        else:
            cursor.executemany(self._insert, rows)
        if known is not None and ids:
            known.advance(ids[-1], previous, streams)

    def _heads(self, cursor: Any, originators: list[object]) -> tuple[bytes, dict[object, bytes]]:
        """The global head and each stream's head, in one statement (one round trip per save:
        the chain's cost is mostly statements, not hashing)."""
        heads = [f"{self._head} AS head"]
        heads += [f"{self._stream_head} AS stream{i}" for i in range(len(originators))]
        cursor.execute(f"SELECT {', '.join(heads)}", originators)
        found = [GENESIS if value is None else bytes(value) for value in _values(cursor.fetchone())]
        return found[0], dict(zip(originators, found[1:], strict=True))

    def bounds(self, cursor: Any) -> tuple[int, int]:
        """The lowest and the highest id in either table (1 and 0 when both are empty). The
        walk stops at the highest, so later appends don't count; it starts after 0, so a row
        below 1 (where no recorder writes) is found by the lowest."""
        cursor.execute(self._bounds)
        last_event, last_link, first_event, first_link = _values(cursor.fetchone())
        lowest = min(1 if first is None else first for first in (first_event, first_link))
        return lowest, max(last_event or 0, last_link or 0)

    def events(self, cursor: Any, upto: int) -> Iterator[tuple[Any, ...]]:
        """Raw event rows ``(id, originator_id, version, topic, state)`` in id order."""
        return self._pages(cursor, self._events_page, upto)

    def links(self, cursor: Any, upto: int) -> Iterator[tuple[Any, ...]]:
        """Raw chain rows ``(id, originator_id, version, stream_hash, global_hash)``."""
        return self._pages(cursor, self._links_page, upto)

    @staticmethod
    def _pages(cursor: Any, statement: str, upto: int) -> Iterator[tuple[Any, ...]]:
        after = 0
        while True:
            cursor.execute(statement, (after, upto, _PAGE))
            page = [_values(row) for row in cursor.fetchall()]
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1][0]


class KnownHeads:
    """The chain heads one writer left with its last committed append, to skip reading them.

    Reading the heads was one statement of the four an append makes. They may be taken from
    here only when the events just inserted got the id right after the last one this writer
    chained: ids are assigned as one more than the highest stored (SQLite's rowid, without
    AUTOINCREMENT), under the write lock the inserting transaction now holds, so that id
    proves no other writer (another process, or another log object on the same file) has
    appended since, and therefore that every head is still the one kept here. Anything
    else reads them from the table as before. A stream not seen by this writer is read too.

    The heads are advanced as the transaction chains its events: a writer whose transaction
    then does not commit must drop this object for a new one, which reads the table again.
    """

    __slots__ = ("global_hash", "last_id", "streams")

    STREAMS = 1024
    """Streams whose heads are kept (the most recently appended to): a worker appends to the
    executions it is running, so the few it runs at once are what it needs."""

    def __init__(self) -> None:
        self.last_id = -1
        self.global_hash = GENESIS
        self.streams: dict[object, bytes] = {}

    def heads(
        self, ids: Sequence[int], originators: list[object]
    ) -> tuple[bytes, dict[object, bytes]] | None:
        """The heads before ``ids`` were inserted, or None when they must be read.

        When another writer has appended since, every stream kept here may have moved, not
        only those this append reads: all are forgotten.
        """
        if not ids or self.last_id < 0 or ids[0] != self.last_id + 1:
            self.streams.clear()
            return None
        streams = self.streams
        try:
            return self.global_hash, {originator: streams[originator] for originator in originators}
        except KeyError:  # a stream not seen by this writer
            return None

    def advance(self, last_id: int, global_hash: bytes, streams: dict[object, bytes]) -> None:
        """Record the heads an append left (``streams``: those it touched, already linked)."""
        self.last_id, self.global_hash = last_id, global_hash
        kept = self.streams
        for originator, stream_hash in streams.items():
            kept.pop(originator, None)  # re-inserted last: the oldest are dropped first
            kept[originator] = stream_hash
        while len(kept) > self.STREAMS:
            del kept[next(iter(kept))]


class ChainedRecorder(ABC):
    """An application recorder that chains every event it inserts (see the module docstring)."""

    chain: ChainTable

    @abstractmethod
    def reading(self) -> AbstractContextManager[Any]:
        """A read-only transaction's DB-API cursor, for :func:`verify_log`."""

    @abstractmethod
    def stream_rows(self, stream: UUID) -> list[Row]:
        """The stream's rows by version, read with one SELECT of the three columns a reader
        needs, straight into loom's :class:`~loom_runtime.log.Row`: eventsourcing's
        ``select_events`` builds a ``StoredEvent`` per row first, a visible share of a
        replay."""
