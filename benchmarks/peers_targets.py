"""Section "peers-targets": every target next to its measured ratio.

The peer sections publish their targets here as they finish; this section, registered after
them, prints the one table a reader checks first. A target is never hidden when missed: it is
printed as MISSED with the ratio measured, and a section not run by this command says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from benchmarks.harness import Progress, SectionResult, Settings, Table


@dataclass(frozen=True, kw_only=True)
class Target:
    """A goal against a peer and what this run measured for it."""

    name: str
    measured: str
    met: bool


_PUBLISHED: list[Target] = []
PEERS = (
    "dbos",
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "langchain-classic",
    "llama-index-core",
    "tantivy",
    "bm25s",
)
"""The ``bench`` extra (``pip install -e .[bench]``): every peer measured, with its version."""


def publish(targets: list[Target]) -> None:
    """Called by a peer section once its figures exist."""
    _PUBLISHED.extend(targets)


def run(settings: Settings, progress: Progress) -> SectionResult:
    """The table of targets published by the peer sections of this run."""
    del settings
    progress(f"{len(_PUBLISHED)} targets published")
    met = sum(target.met for target in _PUBLISHED)
    return SectionResult(
        notes=(
            f"{met} of {len(_PUBLISHED)} targets met in this run. Each ratio is between "
            "medians measured in this one run, on this machine, in the sections above. "
            "Run it all with `bash scripts/bench` (the peers, the model weights, PostgreSQL).",
            "Peer versions: " + ", ".join(f"{name} {_version(name)}" for name in PEERS) + ".",
        ),
        tables=(
            Table(
                title="Targets against the peers",
                columns=("target", "measured", "status"),
                rows=tuple(
                    (target.name, target.measured, "met" if target.met else "MISSED")
                    for target in _PUBLISHED
                ),
            ),
        ),
    )


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"
