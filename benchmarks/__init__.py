"""loom's benchmarks: one command, ``python -m benchmarks``, rewrites docs/benchmarks.md.

Why not timed tests: a test that fails when a shared 2-core machine is busy teaches people to
ignore failures. Speed is measured here, in fresh scratch databases, in interleaved rounds
reported as medians and ratios, next to negative controls that must stay bad.

Layout: :mod:`benchmarks.harness` is the instrument (rounds, medians, tables, controls),
:mod:`benchmarks.stores` gives each sample a fresh database, :mod:`benchmarks.workload` is
loom's recording/replay workload, :mod:`benchmarks.corpora` cuts realistic text and queries
from the shared corpora, one module per section (:mod:`benchmarks.runtime`,
:mod:`benchmarks.persistence`, :mod:`benchmarks.memory`, :mod:`benchmarks.corpus`),
:mod:`benchmarks.sections` orders them, and :mod:`benchmarks.report` renders the terminal
tables and the markdown.
"""

from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Section,
    SectionResult,
    Settings,
    Stats,
    Table,
    interleave,
    ratio,
    scratch_directory,
)

__all__ = [
    "Arm",
    "Control",
    "InstrumentError",
    "Section",
    "SectionResult",
    "Settings",
    "Stats",
    "Table",
    "interleave",
    "ratio",
    "scratch_directory",
]
