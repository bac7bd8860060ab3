"""The closed set of event classes loom reads: a stored topic is looked up here, never imported.

eventsourcing's ``resolve_topic`` imports whatever module a topic names (that is how it finds a
class it has not seen yet), and ``Aggregate.Created.mutate`` resolves the ``originator_topic``
inside a stored state the same way. A log row or a bundle is untrusted input: an edited topic
would run the top-level code of any module on ``sys.path``. So the mapper maps only topics
registered here, and a ``Created`` event may only name an aggregate registered here; anything
else is a :class:`~loom_runtime.errors.LogCorruptError`, raised before anything resolves it.

Classes register themselves as they are defined (the runtime's ``Execution`` in
:mod:`loom_runtime.execution`; every :class:`~loom_runtime.stream.LogEvent` subclass in its
``__init_subclass__``, which is how ``loom_memory`` and ``loom_knowledge`` add theirs without
the runtime importing them). A topic is therefore known once the module that defines it is
imported. Packages import their modules lazily, so a log can hold events of a package the
process has not used yet (a memory event met by ``loom doctor``, or by an as-of lookup in a
corpus-only process): on a topic it does not know, this module imports, once, the event modules
the installed packages declare in the ``loom.events`` entry-point group. Which modules can be
imported is fixed by what is installed; a stored row only decides *when*, never *what*.
"""

from __future__ import annotations

from functools import cache

from eventsourcing.domain import Aggregate, CanMutateAggregate
from eventsourcing.utils import register_topic

from loom_runtime.entry_points import installed

_events: dict[str, type] = {}
_aggregates: dict[str, type[Aggregate]] = {}


def register_event(cls: type, *, topic: str | None = None) -> None:
    """Add an event class under its explicit ``TOPIC`` (eventsourcing's registry too).

    ``topic`` registers the class under another name as well: the alias that keeps old rows
    readable when a topic itself must change (stored names never change; renames are
    aliases). A second, different class under a topic already taken is refused by
    eventsourcing's ``register_topic`` (``TopicError``), so a topic always names one class.
    """
    topic = topic or getattr(cls, "TOPIC", None)
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"{cls.__qualname__} must declare a TOPIC to be stored")
    register_topic(topic, cls)
    _events[topic] = cls


def register_aggregate(cls: type[Aggregate]) -> None:
    """Add an aggregate (its explicit ``TOPIC``) and every event class defined on it."""
    topic = cls.__dict__.get("TOPIC")
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"{cls.__qualname__} must declare its own TOPIC to be stored")
    register_topic(topic, cls)
    _aggregates[topic] = cls
    # eventsourcing's metaclass redefines each event class as a subclass, so their TOPIC is
    # inherited rather than in their own __dict__: hence getattr in register_event.
    for name, member in vars(cls).items():
        if isinstance(member, type) and issubclass(member, CanMutateAggregate) and name != "Event":
            register_event(member)


EVENTS_GROUP = "loom.events"
"""Entry points naming the modules that define a package's stored event classes."""


def event_class(topic: str) -> type | None:
    """The registered event class stored under ``topic``, or None; never imports the topic."""
    if topic not in _events:
        _import_installed_events()
    return _events.get(topic)


def is_aggregate_topic(topic: object) -> bool:
    """Whether ``topic`` names a registered aggregate (what a ``Created`` may create)."""
    if isinstance(topic, str) and topic not in _aggregates:
        _import_installed_events()
    return isinstance(topic, str) and topic in _aggregates


@cache
def _import_installed_events() -> None:
    """Import every module of the ``loom.events`` entry points, once per process."""
    for entry_point in installed(EVENTS_GROUP):
        entry_point.load()
