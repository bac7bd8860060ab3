"""eventsourcing's domain classes that the Execution aggregate derives from.

Named here, and only here, so that :mod:`loom_runtime.execution` imports the storage layer
rather than eventsourcing. Stream events need none of this: :class:`loom_runtime.stream.LogEvent`
is loom's own. Stored topics do not depend on these classes (every event declares its own
``TOPIC``), so replacing them later changes no stored byte.
"""

from eventsourcing.domain import (
    Aggregate,
    CanMutateAggregate,
    CanMutateProtocol,
    OriginatorIDError,
    OriginatorVersionError,
)

__all__ = [
    "Aggregate",
    "CanMutateAggregate",
    "CanMutateProtocol",
    "OriginatorIDError",
    "OriginatorVersionError",
]
