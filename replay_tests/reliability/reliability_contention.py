"""Many processes writing ONE corpus stream and ONE memory key at once, and the audit of it.

The workload is the worst case for optimistic appends: every writer of every process appends
to the same two streams (``knowledge:contended`` and ``memory:contended:shared``), so nearly
every append races another one. Worker ``w``'s op ``i`` is one knowledge write, alternately

* ``kb.sync`` of its own source ``w<w>`` (three small documents, one revised per sync), and
* ``kb.put_doc`` of one of three documents every worker revises (``source=None``),

followed by one ``memory.append`` to the shared key. Every written document carries a unique
``meta["label"]`` and every memory entry a unique content, so the audit can match each event
in the log to the one call that reported writing it.

:func:`audit` is the one judge, used by ``test_concurrent_writes.py`` and by the scale-out
benchmark (through ``reliability_worker.py audit-writes``): failures, lost and duplicated
writes, whether the final corpus and memory equal a serial replay of the log, and the chain.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Final

import msgspec

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base, pack_paragraphs
from loom_knowledge.corpus.events import CorpusReconciled, DocumentWritten
from loom_memory import EventSourcedMemory, MemoryEntry, PostgresMemoryStore, SqliteMemoryStore
from loom_memory.events import MemoryAppended
from loom_runtime import Loom, verify_log

SCOPE: Final = "contended"
MEMORY: Final = "contended"
KEY: Final = "shared"
SHARED_DOCS: Final = 3
OWN_DOCS: Final = 3


class WriterReport(msgspec.Struct, kw_only=True):
    """What one worker says it wrote: labels of its document writes and memory entries."""

    worker: int
    syncs: int = 0
    documents: list[str] = msgspec.field(default_factory=list)
    entries: list[str] = msgspec.field(default_factory=list)
    failures: list[str] = msgspec.field(default_factory=list)
    seconds: float = 0.0


class Audit(msgspec.Struct, kw_only=True):
    """The verdict on one contended run: every count must be 0 and the chain ok."""

    writes: int
    failures: int
    lost: int
    duplicated: int
    violations: list[str]
    chain_ok: bool


def open_streams(loom: Loom) -> tuple[KnowledgeBase, EventSourcedMemory]:
    """The contended corpus and memory, same options in every process (creates their tables)."""
    kb = open_knowledge_base(loom, SCOPE, chunker=pack_paragraphs())
    postgres = loom.log.engine.dialect.name == "postgresql"
    store = (PostgresMemoryStore if postgres else SqliteMemoryStore)(loom.log.engine)
    kb.refresh()
    return kb, EventSourcedMemory(loom, store=store, name=MEMORY)


def write(loom: Loom, worker: int, ops: int) -> WriterReport:
    """Run worker ``worker``'s ``ops`` contended ops; a raised error is counted, not fatal."""
    kb, memory = open_streams(loom)
    report = WriterReport(worker=worker)
    own = [_doc(f"w{worker}-d{k}", f"w{worker}:first") for k in range(OWN_DOCS)]
    started = time.monotonic()
    for op in range(ops):
        label = f"w{worker}:op{op}"
        try:
            if op % 2 == 0:
                revised = (op // 2) % OWN_DOCS
                own[revised] = _doc(own[revised].id, label)
                result = kb.sync(own, source=f"w{worker}")
                report.syncs += 1
                report.documents += [_label(doc) for doc in own if doc.id in result.written]
            else:
                kb.put_doc(_doc(f"shared-{op % SHARED_DOCS}", label), source=None)
                report.documents.append(label)
        except Exception as exc:  # the instrument counts every kind of failure
            report.failures.append(f"{label} knowledge: {type(exc).__name__}: {exc}")
        try:
            memory.append(KEY, [MemoryEntry(content=label, id=label)])
            report.entries.append(label)
        except Exception as exc:
            report.failures.append(f"{label} memory: {type(exc).__name__}: {exc}")
    report.seconds = time.monotonic() - started
    return report


def audit(loom: Loom, reports: list[WriterReport]) -> Audit:
    """Judge the log against what the workers reported, and the read models against the log."""
    violations: list[str] = []
    written: list[DocumentWritten] = []
    appended: list[str] = []
    reconciles: Counter[str | None] = Counter()
    for notification in loom.log.notifications():
        event: Any = loom.log.decode(notification)
        if isinstance(event, DocumentWritten) and event.scope == SCOPE:
            written.append(event)
        elif isinstance(event, CorpusReconciled) and event.scope == SCOPE:
            reconciles[event.source] += 1
        elif isinstance(event, MemoryAppended) and (event.memory, event.key) == (MEMORY, KEY):
            appended += [msgspec.json.decode(raw)["content"] for raw in event.entries]

    logged = Counter([_label(event) for event in written] + appended)
    claimed = Counter(label for r in reports for label in [*r.documents, *r.entries])
    lost, extra = claimed - logged, logged - claimed
    if lost:
        violations.append(f"reported but not in the log: {sorted(lost)[:10]}")
    if extra:
        violations.append(f"in the log more often than reported: {sorted(extra)[:10]}")
    for r in reports:
        if reconciles[f"w{r.worker}"] != r.syncs:
            violations.append(
                f"worker {r.worker} reported {r.syncs} syncs, the log holds "
                f"{reconciles[f'w{r.worker}']} CorpusReconciled"
            )
    violations += _serial_order_problems(loom, written, appended)
    return Audit(
        writes=sum(claimed.values()),
        failures=sum(len(r.failures) for r in reports),
        lost=sum(lost.values()),
        duplicated=sum(extra.values()),
        violations=violations,
        chain_ok=verify_log(loom.log).ok,
    )


def _serial_order_problems(
    loom: Loom, written: list[DocumentWritten], appended: list[str]
) -> list[str]:
    """The corpus and memory now equal applying the logged writes one by one, in log order."""
    problems: list[str] = []
    last: dict[str, DocumentWritten] = {}
    revisions: dict[str, list[int]] = {}
    for event in written:
        last[event.doc_id] = event
        revisions.setdefault(event.doc_id, []).append(event.revision)
    for doc_id, seen in revisions.items():
        if seen != list(range(1, len(seen) + 1)):
            problems.append(f"{doc_id} has revisions {seen} in log order, not 1..{len(seen)}")
    kb, memory = open_streams(loom)
    manifest = {record.id: record.revision for record in kb.list_docs()}
    expected = {doc_id: event.revision for doc_id, event in last.items()}
    if manifest != expected:
        problems.append(f"the manifest {manifest} is not the log's last revisions {expected}")
    passages = sorted((p.doc_id, p.text) for p in kb.passages())
    texts = sorted((doc_id, text) for doc_id, event in last.items() for text in event.passages)
    if passages != texts:
        problems.append("the current passages are not the last logged revision of each doc")
    if [entry.content for entry in memory.read(KEY)] != appended:
        problems.append("the memory key does not hold the logged entries in log order")
    return problems


def _doc(doc_id: str, label: str) -> Doc:
    return Doc(id=doc_id, text=f"{doc_id} written by {label}", meta={"label": label})


def _label(item: Doc | DocumentWritten) -> str:
    return str((item.meta or {}).get("label"))
