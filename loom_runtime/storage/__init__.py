"""The event log port (:class:`loom_runtime.log.EventLog`) implemented with eventsourcing.

The only package of loom that imports eventsourcing (``replay_tests/test_layering.py`` checks
it): moving to another eventsourcing release, or to another store, touches this folder alone.

* :mod:`~loom_runtime.storage.application`: the port over one eventsourcing Application;
* :mod:`~loom_runtime.storage.mapper`: events to stored JSON rows and back (ADR 0003);
* :mod:`~loom_runtime.storage.topics`: the closed set of readable topics (ADR 0018);
* :mod:`~loom_runtime.storage.domain`: the base classes loom's events derive from;
* :mod:`~loom_runtime.storage.chain`: the hash chain's side table (ADR 0011);
* :mod:`~loom_runtime.storage.sqlite`, :mod:`~loom_runtime.storage.postgres`,
  :mod:`~loom_runtime.storage.alchemy`: one persistence module each, the last two imported
  only when selected (the ``postgres`` and ``sqlalchemy`` extras).

Nothing is imported here, so that importing the event base classes costs no backend.
"""

__all__: list[str] = []
