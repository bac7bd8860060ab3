"""Locks a forked child gets afresh.

``os.fork`` copies every ``threading.Lock`` in the state it is in, and the thread that would
release a held one does not exist in the child. A recorder's lock that its ``close`` takes
(the SQLite position reader's, the PostgreSQL writer's) would then hang the child's
``log.close()`` for ever if another thread of the parent held it at the fork. The connections
those locks guard are never used across a fork anyway (each records the pid that opened it),
so the child only needs the locks themselves, unheld. The SQLite group commit is reset
whole (:func:`reset_in_child`): a commit a parent's thread had under way at the fork would
never end in the child, whose first append waited for it for ever.
"""

from __future__ import annotations

import os
import threading
import weakref

_OWNERS: weakref.WeakKeyDictionary[object, tuple[str, ...]] = weakref.WeakKeyDictionary()
"""Each registered object, and the names of its lock attributes."""
_RESETS: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
"""Each registered object, and the name of the method resetting it in a child."""


def renewed_in_child(owner: object, *names: str) -> None:
    """Give ``owner`` a new, unheld ``threading.Lock`` under each of ``names`` in a forked
    child. Held weakly: registering keeps nothing alive."""
    _OWNERS[owner] = names


def reset_in_child(owner: object, method: str) -> None:
    """Call ``owner``'s method named ``method`` (no arguments) in a forked child, after its
    locks are renewed: for state that the threads of the parent were part of (a commit under
    way, callers queued for it), which the child must not wait on. Held weakly."""
    _RESETS[owner] = method


def _renew() -> None:
    for owner, names in list(_OWNERS.items()):
        for name in names:
            setattr(owner, name, threading.Lock())
    for owner, method in list(_RESETS.items()):
        getattr(owner, method)()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew)
