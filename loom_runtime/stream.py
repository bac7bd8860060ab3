"""Plain event streams for packages that need an ordered, versioned stream but no aggregate.

An execution is an aggregate because replay rebuilds its state. A corpus scope or a memory key
needs less: its read models are projections, and a writer only needs the stream's last
*version* to append with optimistic concurrency (:meth:`~loom_runtime.log.EventLog.append`,
:meth:`~loom_runtime.log.EventLog.append_replanned`), which the log reads from one row.

Every event class derives from :class:`LogEvent` and declares a stable ``TOPIC``, registered
when the class is created (in loom's closed set, :mod:`loom_runtime.storage.topics`), so a fresh
process that only *reads* can map stored topics, and a stored topic never imports anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, dataclass_transform
from uuid import UUID, uuid5

from loom_runtime.storage.topics import register_event

_NAMESPACE = UUID("6f1d3c5e-0c7a-4f55-9b1e-6c0c5a7e2b10")


@dataclass_transform(frozen_default=True)
@dataclasses.dataclass(frozen=True)
class LogEvent:
    """Base of loom's stream events: frozen dataclasses with an explicit, stable TOPIC.

    Every subclass is made a frozen dataclass as it is defined, after the three fields every
    event carries: its stream (``originator_id``), its version in that stream and when it was
    created. They are named, and ordered, as eventsourcing names its own events', which is the
    structure its storage checks for (and the order the stored JSON has always had).

    ``IDENTIFIERS`` names the fields that identify something (ids, keys, names, scopes): the
    mapper never redacts them, and refuses one holding a secret (ADR 0012).

    ``SEALED`` names the fields an encrypted log stores sealed under a subject's key (a
    sealed text, :func:`~loom_runtime.seal_subject_text`, or a list of them): where
    :func:`~loom_runtime.verify_keys` looks for the subjects whose key rows the log needs.
    Only there: a clear field can hold any text, one that looks sealed too (ADR 0049,
    amended "verify").
    """

    originator_id: UUID
    originator_version: int
    timestamp: datetime

    TOPIC: ClassVar[str] = ""
    IDENTIFIERS: ClassVar[tuple[str, ...]] = ()
    SEALED: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        topic = cls.__dict__.get("TOPIC")
        if not topic:
            raise TypeError(
                f"{cls.__qualname__} must declare TOPIC: stored events are found by it, so it "
                "must not depend on the module path"
            )
        dataclasses.dataclass(frozen=True)(cls)
        register_event(cls)


Change = tuple[type[LogEvent], Mapping[str, Any]]
"""One event to append: its class and its fields."""


def stream_id(name: str) -> UUID:
    """The stream id for a stable name (e.g. ``knowledge:runbooks``): the same in every process."""
    return uuid5(_NAMESPACE, name)
