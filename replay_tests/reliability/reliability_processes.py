"""Worker processes forked from a server that imported loom once, for the reliability tests
that start dozens of them (the soak, the recovery kills, the concurrent writers).

Each started as a new interpreter (``python worker.py ...``) and spent 0.35-0.45 s of CPU
importing loom, SQLAlchemy and eventsourcing before its first statement: most of those tests'
CPU, on a machine whose two cores the rest of the suite shares. Here they are forked by
the standard library's fork server (``multiprocessing``'s ``forkserver`` start method), which
imported the worker modules and loom's storage backends once.

A forked worker is as good a fresh process as a new interpreter for these tests, for the reason
the crash harness' zygote gives (``reliability_worker.serve``): the server only imports. It
never opens a Loom, a connection or a thread, so a worker starts with none, its ``LOOM_``
variables removed as the subprocess was given them, and a SIGKILL takes down that worker alone.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

STORAGE: Final = ("loom_runtime.storage.sqlite", "loom_runtime.storage.postgres")
"""What opening a log imports on its first use: the storage backends (psycopg and its pool
for PostgreSQL). A process that forks workers imports them first; a forked worker otherwise
imported them again on its first open: on PostgreSQL 286 ms of CPU per open instead of 42."""


def import_storage() -> None:
    """Import :data:`STORAGE`, for the processes this one forks."""
    for module in STORAGE:
        importlib.import_module(module)


_SERVER = multiprocessing.get_context("forkserver")
_SERVER.set_forkserver_preload(
    ["reliability_worker", "reliability_soak_worker", "reliability_recovery_worker", *STORAGE]
)


def _run(main: Callable[..., int], args: tuple[object, ...], out: str, err: str) -> None:
    """In the forked worker: output to the two files, no ``LOOM_`` variable, exit with main's
    status."""
    for name in [name for name in os.environ if name.startswith("LOOM_")]:
        del os.environ[name]
    with open(out, "w") as stdout, open(err, "w") as stderr:
        os.dup2(stdout.fileno(), 1)
        os.dup2(stderr.fileno(), 2)
    sys.exit(main(*args))


class Worker:
    """One forked worker: ``main(*args)``, its stdout and stderr kept in files in ``folder``."""

    def __init__(self, main: Callable[..., int], *args: object, folder: Path) -> None:
        self._output = folder / f"worker-output.{id(self)}"
        out, err = (f"{self._output}.{stream}" for stream in ("out", "err"))
        self._process = _SERVER.Process(target=_run, args=(main, args, out, err))
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid

    @property
    def exitcode(self) -> int | None:
        """None while it runs; its exit status, or minus the signal that ended it."""
        return self._process.exitcode

    def kill(self) -> None:
        """SIGKILL it and wait for it to be gone; its exit code is then ``-SIGKILL``."""
        self._process.kill()
        self._process.join()

    def finish(self, timeout: float) -> tuple[int | None, str, str]:
        """Wait (bounded) for it to exit: its exit code (None if still running), stdout and
        stderr."""
        self._process.join(timeout)
        return (
            self._process.exitcode,
            *(Path(f"{self._output}.{stream}").read_text() for stream in ("out", "err")),
        )


KILLED = -signal.SIGKILL
"""A worker's exit code after :meth:`Worker.kill`."""
