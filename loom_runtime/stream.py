"""Plain event streams for packages that need an ordered, versioned stream but no aggregate.

An execution is an eventsourcing Aggregate because replay rebuilds its state. A corpus scope or
a memory key needs less: its read models are projections, and a writer only needs the stream's
last *version* to append with optimistic concurrency. Reading one row (``desc=True, limit=1``)
instead of rehydrating the whole stream keeps every write O(1) in the stream's length.

Every event class derives from :class:`LogEvent` and declares a stable ``TOPIC``, registered
when the class is created (in loom's closed set, :mod:`loom_runtime.topics`), so a fresh
process that only *reads* can map stored topics, and a stored topic never imports anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import UUID, uuid5

from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import IntegrityError

from loom_runtime.errors import StreamConflictError
from loom_runtime.log import EventLog
from loom_runtime.retry import retrying
from loom_runtime.topics import register_event

_NAMESPACE = UUID("6f1d3c5e-0c7a-4f55-9b1e-6c0c5a7e2b10")


class LogEvent(DomainEvent):
    """Base of loom's stream events: frozen dataclasses with an explicit, stable TOPIC.

    ``IDENTIFIERS`` names the fields that identify something (ids, keys, names, scopes): the
    mapper never redacts them, and refuses one holding a secret (ADR 0012).
    """

    TOPIC: ClassVar[str] = ""
    IDENTIFIERS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        topic = cls.__dict__.get("TOPIC")
        if not topic:
            raise TypeError(
                f"{cls.__qualname__} must declare TOPIC: stored events are found by it, so it "
                "must not depend on the module path"
            )
        register_event(cls)


Change = tuple[type[LogEvent], Mapping[str, Any]]
"""One event to append: its class and its fields."""


def stream_id(name: str) -> UUID:
    """The stream id for a stable name (e.g. ``knowledge:runbooks``): the same in every process."""
    return uuid5(_NAMESPACE, name)


def stream_version(log: EventLog, stream: UUID) -> int:
    """The version of the stream's last event, 0 for a stream with none."""
    last = next(iter(log.events.get(stream, desc=True, limit=1)), None)
    return 0 if last is None else last.originator_version


def append(
    log: EventLog,
    stream: UUID,
    *,
    expected_version: int,
    events: Sequence[Change],
) -> list[int]:
    """Append ``events`` atomically after ``expected_version``; returns their log positions.

    All or nothing: the events go in one transaction. If another writer appended after
    ``expected_version`` first, :class:`StreamConflictError` is raised and nothing is written.
    """
    now = datetime.now(UTC)
    built = [
        cls(
            originator_id=stream,
            originator_version=expected_version + offset,
            timestamp=now,
            **fields,
        )
        for offset, (cls, fields) in enumerate(events, start=1)
    ]
    try:
        recordings = log.save(*built)
    except IntegrityError as exc:
        raise StreamConflictError(
            f"stream {stream} moved past version {expected_version} before this append; "
            "nothing was written: re-read and retry"
        ) from exc
    return [recording.notification.id for recording in recordings]


def append_replanned(
    log: EventLog, stream: UUID, plan: Callable[[int], Sequence[Change]], *, what: str
) -> list[int]:
    """Plan ``stream``'s next events against its current version and append them, re-planning
    from a fresh read whenever another writer got there first or the database was busy.

    ``plan(version)`` is called once per attempt, after the version is read, and returns the
    events to append after it (none: nothing is appended). It must decide only from what it
    reads during that call, so that a retry decides on the new state; it may raise to refuse,
    which ends the write. Waits follow ``log.settings.write_retry`` (ADR 0019); when its budget
    is spent :class:`~loom_runtime.errors.WriteContentionError` names ``what`` and says how
    long it tried. Returns the appended events' log positions.
    """

    def attempt() -> list[int]:
        version = stream_version(log, stream)
        events = plan(version)
        return append(log, stream, expected_version=version, events=events) if events else []

    return retrying(attempt, policy=log.settings.write_retry, what=what)
