"""The sections of docs/benchmarks.md, in order: the registry a new benchmark is added to.

Each section is a module with a ``run(settings, progress) -> SectionResult`` built on
:mod:`benchmarks.harness`; a section without one is printed as a heading that says it is not
measured yet (never a number).
"""

from __future__ import annotations

from benchmarks import (
    bundles,
    capture,
    corpus,
    encryption,
    imports,
    memory,
    peers_durable,
    peers_retrieval,
    peers_sync,
    peers_targets,
    persistence,
    redaction,
    retrieval_quality,
    runtime,
    scaleout,
)
from benchmarks.harness import Section

SECTIONS: tuple[Section, ...] = (
    Section(
        name="runtime",
        title="Runtime: decisions recorded and replayed per second",
        run=runtime.run,
    ),
    Section(
        name="imports",
        title="Import cost: a program, a pytest session and `loom --help` (ADR 0022)",
        run=imports.run,
    ),
    Section(
        name="redaction",
        title="Redaction: what the built-in secret patterns cost per value and per decision "
        "(ADR 0012)",
        run=redaction.run,
    ),
    Section(
        name="encryption",
        title="Encryption: recording and replay with sealed fields vs in clear (ADR 0049)",
        run=encryption.run,
    ),
    Section(
        name="persistence",
        title="Persistence: built-in modules vs eventsourcing-sqlalchemy, NORMAL vs FULL "
        "(ADR 0001)",
        run=persistence.run,
    ),
    Section(
        name="memory",
        title="Memory stores: append throughput and search latency (SQLite, PostgreSQL)",
        run=memory.run,
    ),
    Section(
        name="corpus",
        title="Corpus: ingest, unchanged and edited sync, retrieval",
        run=corpus.run,
    ),
    Section(
        name="bundles",
        title="Bundles: export and database-free replay; as-of vs current retrieval",
        run=bundles.run,
    ),
    Section(
        name="scaleout",
        title="Scale-out: recording with concurrent worker processes; replay and rebuild",
        run=scaleout.run,
    ),
    Section(
        name="capture",
        title="Capture: recording an unchanged OpenAI client, and replaying it (vs VCR.py)",
        run=capture.run,
    ),
    Section(
        name="peers-runtime",
        title="Recording and replay vs DBOS Transact and LangGraph",
        run=peers_durable.run,
    ),
    Section(
        name="peers-sync",
        title="Corpus sync vs LangChain indexing and LlamaIndex ingestion",
        run=peers_sync.run,
    ),
    Section(
        name="peers-retrieval",
        title="Retrieval quality and latency vs tantivy and bm25s",
        run=peers_retrieval.run,
    ),
    Section(
        name="retrieval-quality",
        title="Lexical, vector and hybrid retrieval vs tantivy, bm25s and LangChain's "
        "EnsembleRetriever (ADR 0047)",
        run=retrieval_quality.run,
    ),
    Section(
        name="peers-targets",
        title="Targets against the peers and the ratios measured",
        run=peers_targets.run,
    ),
)
