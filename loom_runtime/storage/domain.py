"""eventsourcing's domain classes that loom's events and the Execution aggregate derive from.

Named here, and only here, so that the modules defining loom's events import the storage
layer rather than eventsourcing: which library builds an event object is the storage's
business. Stored topics do not depend on these classes (every event declares its own
``TOPIC``), so replacing them later changes no stored byte.
"""

from eventsourcing.domain import (
    Aggregate,
    CanMutateAggregate,
    CanMutateProtocol,
    DomainEvent,
    OriginatorIDError,
    OriginatorVersionError,
)

__all__ = [
    "Aggregate",
    "CanMutateAggregate",
    "CanMutateProtocol",
    "DomainEvent",
    "OriginatorIDError",
    "OriginatorVersionError",
]
