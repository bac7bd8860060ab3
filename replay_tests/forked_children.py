"""The forking half the fork tests' programs share (``runtime/forked_loom.py``,
``memory/forked_store.py``), imported by them; ``forking_program.py`` runs them."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable


def fork_children(count: int, work: Callable[[int], None]) -> list[int]:
    """Fork ``count`` children, as ``multiprocessing``'s fork start method does; child ``n``
    runs ``work(n)`` and exits 0, or 1 with the error on stderr (nothing may raise past
    ``os._exit``). Returns their pids, in order."""
    pids = []
    for child in range(count):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                work(child)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    return pids


def exit_statuses(pids: list[int]) -> list[int]:
    """Wait for every child of ``pids``; their exit statuses, in order."""
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
