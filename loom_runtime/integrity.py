"""Tamper evidence: a hash chain over every stored event, and :func:`verify_log` to walk it.

Each event the log stores gets one row in a side table, ``loom_chain``, written by the
recorder in the SAME transaction as the event (both commit or neither does)::

    stream_hash = sha256(previous stream_hash of the event's stream || canonical(event row))
    global_hash = sha256(previous global_hash || notification_id || stream_hash)

``canonical(event row)`` is the topic, originator id, version and state bytes, each
type-tagged and length-prefixed, so no two different rows encode alike. The per-stream link
ties an event to the one before it in its own stream; the global link ties every event to
the whole log's notification order, so an edit, a deletion, an insertion or a swap anywhere
breaks the chain from that row on.

Why a side table and not a hash inside the event: the notification id is only known, and the
previous global hash only stable, inside the insert transaction, where writers are
serialised (SQLite's write lock; ``eventsourcing.postgres`` takes ``LOCK TABLE ... IN
EXCLUSIVE MODE`` on every insert). The mapper runs before that transaction, so it cannot
chain; the recorders below do, after the events' insert, holding the lock (ADR 0011).

What the chain proves: that the stored rows are the rows loom wrote, in the order it wrote
them, *unless* whoever edited them also recomputed every later chain row. The chain has no
secret, so a writer with SQL access can do that; keeping :attr:`VerifyReport.head` somewhere
else (an :class:`Anchor`) and passing it back to :func:`verify_log` closes that gap for
everything written before the anchor.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import msgspec
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor, SQLiteDatastore
from eventsourcing.utils import retry
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL

from loom_runtime.errors import IntegrityUnsupportedError
from loom_runtime.schema import DDL_LOCK_KEY

if TYPE_CHECKING:
    from loom_runtime.log import EventLog

GENESIS = bytes(32)
"""The "previous hash" of the first event of the log and of every stream."""

CHAIN_TABLE = "loom_chain"
_PAGE = 1000


# -- the links ---------------------------------------------------------------------------------


def stream_link(
    previous: bytes, *, topic: object, originator_id: object, version: object, state: object
) -> bytes:
    """The stream hash of one event row, chained to its stream's previous hash.

    Takes ``object`` on purpose: :func:`verify_log` feeds it whatever the database holds,
    including garbage an attacker wrote, and must get a (mismatching) hash, not an exception.
    """
    digest = hashlib.sha256(previous)
    for value in (topic, _canonical_originator(originator_id), version, state):
        digest.update(_field(value))
    return digest.digest()


def global_link(previous: bytes, notification_id: int, stream_hash: bytes) -> bytes:
    """The global hash of one event: its position and stream hash, chained to the log's."""
    position = notification_id.to_bytes(8, "big", signed=True)
    return hashlib.sha256(previous + position + stream_hash).digest()


def _field(value: object) -> bytes:
    """A type tag, an 8-byte length and the bytes: unambiguous whatever the value is."""
    if isinstance(value, bytes | bytearray | memoryview):
        tag, data = b"b", bytes(value)
    elif isinstance(value, str):
        tag, data = b"s", value.encode("utf-8", "surrogatepass")
    elif isinstance(value, int) and not isinstance(value, bool):
        tag, data = b"i", str(value).encode()
    elif value is None:
        tag, data = b"n", b""
    else:  # a float or other type SQLite's loose typing let someone store
        tag, data = b"r", repr(value).encode("utf-8", "backslashreplace")
    return tag + len(data).to_bytes(8, "big") + data


def _canonical_originator(value: object) -> object:
    """One spelling of an originator id, whichever way a backend stores it (hex, uuid, bytes)."""
    if isinstance(value, UUID):
        return str(value)
    try:
        if isinstance(value, bytes) and len(value) == 16:
            return str(UUID(bytes=value))
        if isinstance(value, str):
            return str(UUID(value))
    except ValueError:
        pass
    return value


def _as_bytes(value: object) -> bytes:
    """A hash column as bytes; anything else (NULL, text someone wrote) as non-matching bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _field(value)


def _values(row: Any) -> tuple[Any, ...]:
    """A DB-API row as a tuple, whether the driver returns tuples, sqlite3.Row or dicts."""
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


# -- the side table ----------------------------------------------------------------------------


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
            f"(SELECT MAX(notification_id) FROM {chain_table}) AS last_link"
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

    def append(self, cursor: Any, events: Sequence[StoredEvent], ids: Sequence[int]) -> None:
        """Chain ``events`` (just inserted with ``ids``), inside the caller's transaction.

        Must run after the events' insert, while the transaction holds the write lock: only
        then is the head read here still the head when this transaction commits.
        """
        originators = [self.db_originator(event.originator_id) for event in events]
        previous, streams = self._heads(cursor, list(dict.fromkeys(originators)))
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
        cursor.executemany(self._insert, rows)

    def _heads(self, cursor: Any, originators: list[object]) -> tuple[bytes, dict[object, bytes]]:
        """The global head and each stream's head, in one statement (one round trip per save:
        the chain's cost is mostly statements, not hashing)."""
        heads = [f"{self._head} AS head"]
        heads += [f"{self._stream_head} AS stream{i}" for i in range(len(originators))]
        cursor.execute(f"SELECT {', '.join(heads)}", originators)
        found = [GENESIS if value is None else bytes(value) for value in _values(cursor.fetchone())]
        return found[0], dict(zip(originators, found[1:], strict=True))

    def bound(self, cursor: Any) -> int:
        """The highest id in either table: the walk stops there, so later appends don't count."""
        cursor.execute(self._bounds)
        events, links = _values(cursor.fetchone())
        return max(events or 0, links or 0)

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


# -- the recorders that write it ---------------------------------------------------------------


class ChainedRecorder(ABC):
    """An application recorder that chains every event it inserts (see the module docstring)."""

    chain: ChainTable

    @abstractmethod
    def reading(self) -> AbstractContextManager[Any]:
        """A read-only transaction's DB-API cursor, for :func:`verify_log`."""


class ChainedSQLiteRecorder(SQLiteApplicationRecorder, ChainedRecorder):
    """``eventsourcing.sqlite``'s application recorder, plus the chain row per event."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"):
        # Set before the base constructor, which builds the create-table statements.
        self.chain = ChainTable.for_sqlite(events_table_name)
        super().__init__(datastore, events_table_name)

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.chain.ddl]

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        self.chain.append(c, stored_events, ids or ())
        return ids

    def reading(self) -> AbstractContextManager[Any]:
        return self.datastore.transaction(commit=False)

    def convert_originator_id(self, originator_id: str) -> UUID | str:
        # Every row of a stream carries the same id text: parse it once, not per row
        # (UUID() was a fifth of a 10,000-decision replay).
        if self.datastore.originator_id_type == "uuid":
            return _parse_uuid(originator_id)
        return originator_id


@lru_cache(maxsize=1024)
def _parse_uuid(text: str) -> UUID:
    return UUID(text)


class ChainedPostgresRecorder(PostgresApplicationRecorder, ChainedRecorder):
    """``eventsourcing.postgres``'s application recorder, plus the chain row per event.

    The chain rows are written after the insert returned its notification ids, still inside
    the transaction that holds ``LOCK TABLE ... IN EXCLUSIVE MODE``.
    """

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        self.chain = ChainTable.for_postgres(
            schema=datastore.schema, events_table=events_table_name
        )
        self.sql_create_statements.extend(SQL(statement).format() for statement in self.chain.ddl)

    def create_table(self) -> None:
        """Create (if missing) under a session advisory lock: processes opening one log at once
        would otherwise race on eventsourcing's ``CREATE TYPE``/``CREATE OR REPLACE FUNCTION``
        ("tuple concurrently updated")."""
        with self.datastore.get_connection() as conn:
            conn.execute(SQL("SELECT pg_advisory_lock({key})").format(key=DDL_LOCK_KEY))
            try:
                super().create_table()
            finally:
                conn.execute(SQL("SELECT pg_advisory_unlock({key})").format(key=DDL_LOCK_KEY))

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """eventsourcing's insert, in one plain transaction instead of psycopg's pipeline mode.

        In pipeline mode a large batch (a sync of a big corpus, a multi-megabyte document)
        could deadlock in ``Pipeline.sync``: the client blocked writing while the server blocked
        sending results (seen in the fuzz suite and the corpus benchmark). The statements are
        the same; only the round trips are not overlapped, which a one-writer-at-a-time append
        behind a table lock does not miss.
        """
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._insert_events(curs, stored_events, **kwargs)
            if not stored_events:
                return None
            self._insert_stored_events(curs, stored_events, **kwargs)
            return self._fetch_ids_after_insert_events(curs, stored_events, **kwargs)

    def _fetch_ids_after_insert_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
        self.chain.append(curs, stored_events, ids or ())
        return ids

    @contextmanager
    def reading(self) -> Iterator[Any]:
        with self.datastore.transaction(commit=False) as curs:
            yield curs


# -- verifying ---------------------------------------------------------------------------------


class Tampering(StrEnum):
    """What :func:`verify_log` found wrong at the first bad position."""

    ALTERED = "altered"
    """The event's stored bytes differ from those chained at its position."""
    DELETED = "deleted"
    """An event the chain vouches for is missing."""
    INSERTED = "inserted"
    """An event no chain row vouches for: written around loom, or its chain row was deleted."""
    REORDERED = "reordered"
    """The event at this position is not the one chained here: rows were moved or swapped."""
    CHAIN_BROKEN = "chain-broken"
    """The chain does not link here: a chain row was edited, or rows before it were removed."""
    ANCHOR_MISMATCH = "anchor-mismatch"
    """The log no longer holds the head recorded in the anchor: it was rewritten before it."""


class Anchor(msgspec.Struct, frozen=True, kw_only=True):
    """A position and its global hash, kept outside the database to check the log against."""

    notification_id: int
    global_hash: str
    """Hex of the global hash at ``notification_id``."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`verify_log`: ok, or the first bad position and what is wrong."""

    checked: int
    """Events whose chain links were verified (all of them when ``ok``)."""
    problem: Tampering | None = None
    position: int | None = None
    """Notification id of the first bad event (or chain row), when not ok."""
    detail: str = ""
    head: Anchor | None = None
    """The last verified link: store it elsewhere and pass it back as ``anchor`` later."""

    @property
    def ok(self) -> bool:
        return self.problem is None


class _Event(NamedTuple):
    id: int
    originator_id: object
    version: object
    topic: object
    state: object


class _Link(NamedTuple):
    id: int
    originator_id: object
    version: object
    stream_hash: bytes
    global_hash: bytes


def verify_log(log: EventLog, *, anchor: Anchor | None = None) -> VerifyReport:
    """Walk the log in notification order and report the first event that fails its chain.

    Never raises on what it reads: any content of either table yields a report. Raises
    :class:`IntegrityUnsupportedError` when the log's persistence keeps no chain.
    """
    recorder = log.recorder
    if not isinstance(recorder, ChainedRecorder):
        raise IntegrityUnsupportedError(
            f"the log at {log.settings.url!r} is stored with persistence="
            f"{log.settings.persistence!r}, which keeps no hash chain; use the built-in "
            "persistence (the default) to record a log that `loom verify` can check"
        )
    with recorder.reading() as cursor:
        chain = recorder.chain
        upto = chain.bound(cursor)
        events = (_Event(*row) for row in chain.events(cursor, upto))
        links = (
            _Link(row[0], row[1], row[2], _as_bytes(row[3]), _as_bytes(row[4]))
            for row in chain.links(cursor, upto)
        )
        return _walk(events, links, anchor)


def _walk(events: Iterator[_Event], links: Iterator[_Link], anchor: Anchor | None) -> VerifyReport:
    """Check each position's event against its chain row and the chain so far, in id order."""
    previous, checked = GENESIS, 0
    streams: dict[object, bytes] = {}
    head: Anchor | None = None
    anchored = anchor is None

    def bad(problem: Tampering, position: int, detail: str) -> VerifyReport:
        return VerifyReport(
            checked=checked, problem=problem, position=position, detail=detail, head=head
        )

    for position, event, link in _pairs(events, links):
        if link is None:
            return bad(Tampering.INSERTED, position, "no chain row vouches for this event")
        if event is None:
            return bad(Tampering.DELETED, position, "the chain holds an event the log lacks")
        if anchor is not None and not anchored and position > anchor.notification_id:
            return bad(
                Tampering.ANCHOR_MISMATCH,
                anchor.notification_id,
                "the anchored position is no longer in the chain: the log was rewritten",
            )
        if global_link(previous, position, link.stream_hash) != link.global_hash:
            return bad(
                Tampering.CHAIN_BROKEN,
                position,
                "this chain row does not link to the one before it: it was edited, or rows "
                "before it were removed",
            )
        originator = _canonical_originator(event.originator_id)
        if originator != _canonical_originator(link.originator_id) or event.version != link.version:
            return bad(
                Tampering.REORDERED,
                position,
                f"the chain holds {link.originator_id} v{link.version} here, the log holds "
                f"{event.originator_id} v{event.version}",
            )
        expected = stream_link(
            streams.get(originator, GENESIS),
            topic=event.topic,
            originator_id=event.originator_id,
            version=event.version,
            state=event.state,
        )
        if expected != link.stream_hash:
            return bad(
                Tampering.ALTERED,
                position,
                "the stored topic or state differs from what was chained here (edited, or "
                "swapped with another event's)",
            )
        streams[originator] = link.stream_hash
        previous = link.global_hash
        checked += 1
        head = Anchor(notification_id=position, global_hash=link.global_hash.hex())
        if anchor is not None and position == anchor.notification_id:
            if head != anchor:
                return bad(
                    Tampering.ANCHOR_MISMATCH,
                    position,
                    "the chain at the anchored position differs from the anchor: the log was "
                    "rewritten (and re-chained) at or before it",
                )
            anchored = True
    if anchor is not None and not anchored:
        return bad(
            Tampering.DELETED,
            anchor.notification_id,
            "the log ends before the anchored position: events were removed from its end",
        )
    return VerifyReport(checked=checked, head=head)


def _pairs(
    events: Iterator[_Event], links: Iterator[_Link]
) -> Iterator[tuple[int, _Event | None, _Link | None]]:
    """Merge two id-ordered row streams: each id once, with whichever rows have it."""
    event, link = next(events, None), next(links, None)
    while event is not None or link is not None:
        if event is not None and (link is None or event.id < link.id):
            yield event.id, event, None
            event = next(events, None)
        elif link is not None and (event is None or link.id < event.id):
            yield link.id, None, link
            link = next(links, None)
        elif event is not None and link is not None:
            yield event.id, event, link
            event, link = next(events, None), next(links, None)
