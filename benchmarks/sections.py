"""The sections of docs/benchmarks.md, in order: the registry a new benchmark is added to.

A section with ``run=None`` is a promise, not a measurement: it is printed as a heading that
says which issue will measure it. Issue 7 replaces its placeholders with modules of its own
(a ``run(settings, progress) -> SectionResult`` each) built on :mod:`benchmarks.harness`.
"""

from __future__ import annotations

from benchmarks import (
    bundles,
    corpus,
    imports,
    memory,
    peers_durable,
    peers_retrieval,
    peers_sync,
    peers_targets,
    persistence,
    redaction,
    runtime,
    scaleout,
)
from benchmarks.harness import Section

SECTIONS: tuple[Section, ...] = (
    Section(
        name="runtime",
        title="Runtime: decisions recorded and replayed per second",
        issue=2,
        run=runtime.run,
    ),
    Section(
        name="imports",
        title="Import cost: a program, a pytest session and `loom --help` (ADR 0022)",
        issue=12,
        run=imports.run,
    ),
    Section(
        name="redaction",
        title="Redaction: what the built-in secret patterns cost per value and per decision "
        "(ADR 0012)",
        issue=11,
        run=redaction.run,
    ),
    Section(
        name="persistence",
        title="Persistence: built-in modules vs eventsourcing-sqlalchemy, NORMAL vs FULL "
        "(ADR 0001)",
        issue=2,
        run=persistence.run,
    ),
    Section(
        name="memory",
        title="Memory stores: append throughput and search latency (SQLite, PostgreSQL)",
        issue=3,
        run=memory.run,
    ),
    Section(
        name="corpus",
        title="Corpus: ingest, unchanged and edited sync, retrieval",
        issue=4,
        run=corpus.run,
    ),
    Section(
        name="bundles",
        title="Bundles: export and database-free replay; as-of vs current retrieval",
        issue=5,
        run=bundles.run,
    ),
    Section(
        name="scaleout",
        title="Scale-out: recording with concurrent worker processes; replay and rebuild",
        issue=6,
        run=scaleout.run,
    ),
    Section(
        name="peers-runtime",
        title="Recording and replay vs DBOS Transact and LangGraph",
        issue=7,
        run=peers_durable.run,
    ),
    Section(
        name="peers-sync",
        title="Corpus sync vs LangChain indexing and LlamaIndex ingestion",
        issue=7,
        run=peers_sync.run,
    ),
    Section(
        name="peers-retrieval",
        title="Retrieval quality and latency vs tantivy and bm25s",
        issue=7,
        run=peers_retrieval.run,
    ),
    Section(
        name="peers-targets",
        title="Targets of issue 7 and the ratios measured",
        issue=7,
        run=peers_targets.run,
    ),
)
