"""Locks a forked child gets afresh.

``os.fork`` copies every ``threading.Lock`` in the state it is in, and the thread that would
release a held one does not exist in the child. A recorder's lock that its ``close`` takes
(the SQLite position reader's, the PostgreSQL writer's) would then hang the child's
``log.close()`` for ever if another thread of the parent held it at the fork. The connections
those locks guard are never used across a fork anyway (each records the pid that opened it),
so the child only needs the locks themselves, unheld. The SQLite group commit is reset
whole (:func:`reset_in_child`): a commit a parent's thread had under way at the fork would
never end in the child, whose first append waited for it for ever.

A log's pools are reset the same way: a pooled connection is a socket (on SQLite a file
handle) the child shares with its parent, so the child gets new, empty pools, and the
parent's are :func:`set_aside`, neither used nor closed by the child (ADR 0048).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

_OWNERS: weakref.WeakKeyDictionary[object, tuple[str, ...]] = weakref.WeakKeyDictionary()
"""Each registered object, and the names of its lock attributes."""
_RESETS: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
"""Each registered object, and the name of the method resetting it in a child."""
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
"""The SQLAlchemy engines loom created, whose pools a child replaces."""


_SET_ASIDE: list[object] = []
"""What a forked child inherited and must never use or close (its parent's pools)."""


def set_aside(inherited: object) -> None:
    """Keep ``inherited`` (a pool of the parent's connections) referenced for the life of
    this forked child, so that nothing here closes a connection that is still the parent's:
    closing one of PostgreSQL's sends its server the end of the session, on the parent's
    socket. psycopg's connections skip that when collected in another process; sqlite3's do
    not. Call it only in a child (from a method registered with :func:`reset_in_child`)."""
    _SET_ASIDE.append(inherited)


def renewed_in_child(owner: object, *names: str) -> None:
    """Give ``owner`` a new, unheld ``threading.Lock`` under each of ``names`` in a forked
    child. Held weakly: registering keeps nothing alive."""
    _OWNERS[owner] = names


def reset_in_child(owner: object, method: str) -> None:
    """Call ``owner``'s method named ``method`` (no arguments) in a forked child, after its
    locks are renewed: for state that the threads of the parent were part of (a commit under
    way, callers queued for it), which the child must not wait on. Held weakly."""
    _RESETS[owner] = method


def engine_renewed_in_child(engine: Engine) -> None:
    """Give ``engine`` an empty pool in a forked child, the inherited one set aside: the
    ``engine.dispose(close=False)`` SQLAlchemy prescribes for a child process ("Using
    Connection Pools with Multiprocessing or os.fork()"). Held weakly."""
    _ENGINES.add(engine)


def _renew() -> None:
    for owner, names in list(_OWNERS.items()):
        for name in names:
            setattr(owner, name, threading.Lock())
    for owner, method in list(_RESETS.items()):
        getattr(owner, method)()
    for engine in list(_ENGINES):
        set_aside(engine.pool)
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew)
