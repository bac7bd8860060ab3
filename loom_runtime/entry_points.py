"""The entry points installed packages declare to loom, read once per process.

Packages above the runtime plug into it through entry-point groups (``loom.projections``,
``loom.erasure``, ``loom.retention``, ``loom.events``, ``loom.cli``), so the runtime never
imports them. :func:`importlib.metadata.entry_points` reads the metadata files of every
installed distribution on each call: 10-20 ms with the test extra's ~190 distributions. An
erasure asked it once per memory key it named (97% of a 100-key dry run's 0.9 s), and every walk
of the read models once more. Packages are installed before a process uses loom, as pytest and
pluggy assume of their plugins, so each group is read once; a package installed while a process
runs is seen by the next one.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points


@cache
def installed(group: str) -> tuple[EntryPoint, ...]:
    """The entry points of ``group`` in the installed distributions, in name order (equal
    names in the order the distributions are found, the first of them the one loaded)."""
    return tuple(sorted(entry_points(group=group), key=lambda entry_point: entry_point.name))


def installed_named(group: str, name: str) -> EntryPoint | None:
    """The first entry point of ``group`` called ``name``, or None when no package declares one."""
    return next((point for point in installed(group) if point.name == name), None)
