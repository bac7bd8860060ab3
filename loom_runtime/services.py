"""Per-Loom extension services: objects that live exactly as long as one Loom's log.

A package built on the runtime (the corpus, a memory store) often needs one object per Loom:
a read model holding an engine, a cache of open corpora. Module-level dictionaries keyed by
the Loom hide that lifetime (nothing closes them, a test's Loom leaks into the next) and make
two Looms on one process share state by accident. ``loom.services`` is the explicit place:
a service is created on first use by its factory, found again by its key, and closed with
the Loom, in the reverse order of creation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

S = TypeVar("S")


@runtime_checkable
class Closeable(Protocol):
    """A service holding resources; :meth:`Services.close` calls ``close()`` on it."""

    def close(self) -> None: ...


class Services:
    """The services of one Loom, by key; closed with it (see the module docstring)."""

    def __init__(self) -> None:
        self._services: dict[str, Any] = {}
        self._lock = threading.RLock()

    def get(self, key: str, factory: Callable[[], S]) -> S:
        """The service under ``key``, created by ``factory()`` on first use.

        The key is the service's owner's name (``"loom_knowledge.corpus"``): two packages
        never share one by accident. Creation runs under a lock, so two threads asking at
        once get one service.
        """
        with self._lock:
            if key not in self._services:
                self._services[key] = factory()
            found: S = self._services[key]
            return found

    def peek(self, key: str) -> Any | None:
        """The service under ``key`` if one was created, else None (never creates one)."""
        return self._services.get(key)

    def discard(self, key: str) -> None:
        """Close and forget the service under ``key`` (nothing if there is none): the next
        :meth:`get` creates a fresh one."""
        with self._lock:
            service = self._services.pop(key, None)
        if isinstance(service, Closeable):
            service.close()

    def close(self) -> None:
        """Close every service, the most recently created first; each is closed once even
        when an earlier one fails to close (the first failure is raised afterwards)."""
        with self._lock:
            services = list(self._services.values())
            self._services.clear()
        failure: BaseException | None = None
        for service in reversed(services):
            if isinstance(service, Closeable):
                try:
                    service.close()
                except Exception as exc:
                    failure = failure or exc
        if failure is not None:
            raise failure
