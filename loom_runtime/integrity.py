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
chain; the recorders do, after the events' insert, holding the lock (ADR 0011). They live
with the storage (:mod:`loom_runtime.storage.chain`); the links and the walk that checks them
are here, in loom's terms, for any backend.

What the chain proves: that the stored rows are the rows loom wrote, in the order it wrote
them, *unless* whoever edited them also recomputed every later chain row. The chain has no
secret, so a writer with SQL access can do that; keeping :attr:`VerifyReport.head` somewhere
else (an :class:`Anchor`) and passing it back to :func:`verify_log` closes that gap for
everything written before the anchor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import msgspec

if TYPE_CHECKING:
    from loom_runtime.log import EventLog

GENESIS = bytes(32)
"""The "previous hash" of the first event of the log and of every stream."""

PROGRESS_STEP = 1000
"""Events checked between two calls of a walk's ``progress`` callback: often enough for a bar
to move, rarely enough that a callback costs nothing next to the hashing."""


# -- the links ---------------------------------------------------------------------------------


def stream_link(
    previous: bytes, *, topic: object, originator_id: object, version: object, state: object
) -> bytes:
    """The stream hash of one event row, chained to its stream's previous hash.

    Takes ``object`` on purpose: :func:`verify_log` feeds it whatever the database holds,
    including garbage an attacker wrote, and must get a (mismatching) hash, not an exception.
    """
    # One buffer, one hash call: four ``update`` calls cost more than hashing the ~1 KB row,
    # and the stream's two leading fields are encoded once per stream (the same bytes).
    return hashlib.sha256(
        b"".join((previous, _stream_fields(topic, originator_id), _field(version), _field(state)))
    ).digest()


def global_link(previous: bytes, notification_id: int, stream_hash: bytes) -> bytes:
    """The global hash of one event: its position and stream hash, chained to the log's."""
    position = notification_id.to_bytes(8, "big", signed=True)
    return hashlib.sha256(previous + position + stream_hash).digest()


def _stream_fields(topic: object, originator_id: object) -> bytes:
    """The encoded topic and originator of a row: remembered for the rows loom writes (a str
    topic, a UUID stream), which repeat them on every event of a stream."""
    if type(topic) is str and type(originator_id) is UUID:
        return _written_stream_fields(topic, originator_id)
    return _field(topic) + _field(_canonical_originator(originator_id))


@lru_cache(maxsize=256)
def _written_stream_fields(topic: str, originator_id: UUID) -> bytes:
    """:func:`_stream_fields` of a written row, made once per (topic, stream) lately seen."""
    return _field(topic) + _field(str(originator_id))


def _field(value: object) -> bytes:
    """A type tag, an 8-byte length and the bytes: unambiguous whatever the value is."""
    if type(value) is bytes:  # a row's state: not copied
        tag, data = b"b", value
    elif isinstance(value, bytes | bytearray | memoryview):
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


def _spelt_as_written(stored: object, canonical: object) -> bool:
    """Whether an event row's stream id is spelt as loom's recorders write it: a ``uuid``
    (PostgreSQL) or its 32 lower-case hex digits (SQLite, which reads a stream by that text).

    :func:`_canonical_originator` reads any spelling of the same UUID (upper case, braces, a
    16-byte BLOB) as one, so the chain alone vouched for a respelt row, which every read of
    its stream no longer sees: its event hidden behind a verified log. ``canonical`` is that
    function's answer for ``stored`` (a parsed id is hyphenated), so nothing is parsed again.
    """
    if isinstance(stored, UUID):
        return True
    return type(stored) is str and stored == str(canonical).replace("-", "")


def _respelt(event: _Event, link: _Link, canonical: object) -> str:
    """What is wrong with a position whose event or chain row spells its stream id as no
    recorder writes it (:func:`_spelt_as_written` said so of one of them)."""
    if not _spelt_as_written(event.originator_id, canonical):
        return (
            f"the event's stream id is stored as {event.originator_id!r}, a spelling no "
            "recorder writes: every read of its stream misses it"
        )
    return (
        f"the chain row's stream id is stored as {link.originator_id!r}, a spelling no "
        "recorder writes: the next append to its stream would chain to another head"
    )


def _as_bytes(value: object) -> bytes:
    """A hash column as bytes; anything else (NULL, text someone wrote) as non-matching bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return _field(value)


# -- verifying ---------------------------------------------------------------------------------


class Tampering(StrEnum):
    """What :func:`verify_log` (the chain) or :func:`~loom_runtime.key_audit.verify_keys` (the
    key table against the log) found wrong at the first bad position."""

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
    KEY_MISSING = "key-missing"
    """Sealed data is stored at this position, but its subject has no key row and no forget
    event names it: the key table lost a row (:func:`~loom_runtime.key_audit.verify_keys`)."""
    KEY_DESTROYED = "key-destroyed"
    """A subject's key is destroyed, but no forget event names it where its row says: an
    erasure the forget log does not record."""
    KEY_ALTERED = "key-altered"
    """A key row's positions contradict the log: made at or after its own sealed data."""
    ERASURE_INCOMPLETE = "erasure-incomplete"
    """The forget event at this position names a subject whose key is still live: an erasure
    was interrupted (or is running); ``loom erase`` run again completes it."""


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


def verify_log(
    log: EventLog,
    *,
    anchor: Anchor | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Walk the log in notification order and report the first event that fails its chain.

    Never raises on what it reads: any content of either table yields a report. Raises
    :class:`IntegrityUnsupportedError` when the log's persistence keeps no chain. A walk of a
    large log takes a while, so ``progress`` (a bar's callback) is called with (log position
    reached, head) as it goes, rising, and with (head, head) once every event checks out.
    """
    return log.verify(anchor=anchor, progress=progress)


def verify_rows(
    events: Iterable[Sequence[Any]],
    links: Iterable[Sequence[Any]],
    anchor: Anchor | None,
    *,
    upto: int = 0,
    lowest: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Check raw event rows ``(id, originator_id, version, topic, state)`` against raw chain
    rows ``(id, originator_id, version, stream_hash, global_hash)``, both in id order: what a
    log's :meth:`~loom_runtime.log.EventLog.verify` feeds from its two tables, up to ``upto``
    (the head it reads to, and the total :func:`verify_log`'s ``progress`` is given).

    ``lowest`` is the lowest id in either table. Positions start at 1 and the rows fed start
    after 0: a row below 1 was never checked while every read of its stream saw it (a forged
    event under a clean verify), so one is reported inserted, at its position, first."""
    if lowest < 1:
        return VerifyReport(
            checked=0,
            problem=Tampering.INSERTED,
            position=lowest,
            detail="a row stored below position 1, where no recorder writes: every read of "
            "its stream sees it",
        )
    reported = -1  # an empty log still reports (0, 0): done

    def reached(position: int) -> None:
        nonlocal reported
        if progress is not None and position > reported:
            reported = position
            progress(position, upto)

    report = _walk(
        (_Event(*row) for row in events),
        (_Link(row[0], row[1], row[2], _as_bytes(row[3]), _as_bytes(row[4])) for row in links),
        anchor,
        reached=reached,
    )
    if report.ok:
        reached(upto)
    return report


def _walk(
    events: Iterator[_Event],
    links: Iterator[_Link],
    anchor: Anchor | None,
    *,
    reached: Callable[[int], None],
) -> VerifyReport:
    """Check each position's event against its chain row and the chain so far, in id order;
    ``reached(position)`` every :data:`PROGRESS_STEP` events checked."""
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
        if not (
            _spelt_as_written(event.originator_id, originator)
            and _spelt_as_written(link.originator_id, originator)
        ):
            return bad(Tampering.ALTERED, position, _respelt(event, link, originator))
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
        if checked % PROGRESS_STEP == 0:
            reached(position)
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
