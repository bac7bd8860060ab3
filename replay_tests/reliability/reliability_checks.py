"""The invariants a log must satisfy after any crash or any amount of concurrency.

Every check returns violations as sentences instead of asserting, for two reasons: a restarted
worker prints them for the parent test to show (all of them, not the first), and the negative
controls in ``test_invariants.py`` plant one fault and assert the sentence that names it, which
is how each check is shown to be able to fail.

What is checked, in the order a recovering operator would care:

1. the log is readable: every notification decodes into its event class, ids strictly increase;
2. no lost or duplicated event: each stream's versions are exactly 1..n in log order;
3. the corpus as the crash left it (no catch-up yet): no orphan passage, no listed document
   missing a passage, no duplicate;
4. every execution completed exactly once, or is resumable: it is resumed here, must complete
   once, keep every recorded decision byte for byte and recompute none of them; every execution
   then replays identically;
5. the corpus converges: caught up from where it stopped, it equals a rebuild of the dropped
   index from position 0 (manifest, revision history and passages), and is consistent.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise
from typing import Any, Final

import msgspec
from eventsourcing.domain import DomainEventProtocol
from reliability_workload import COMPUTED, knowledge_base, label_of
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    Table,
    Text,
    inspect,
    text,
)

from loom_knowledge.corpus.knowledge_base import drop_corpus
from loom_runtime import Loom, codec
from loom_runtime.execution import Execution
from loom_runtime.projection import SQLProjection, catch_up, rebuild

_COMPLETED: Final = Execution.Completed.TOPIC
_CREATED: Final = Execution.Created.TOPIC
_FAILED: Final = Execution.Failed.TOPIC


class Report(msgspec.Struct, kw_only=True):
    """What a check found: violations (empty when sound) and counts proving it looked."""

    violations: list[str] = msgspec.field(default_factory=list)
    stats: Counter[str] = msgspec.field(default_factory=Counter)


class LoggedEvent(msgspec.Struct, frozen=True):
    """One notification, reduced to what the invariants need."""

    position: int
    stream: str
    version: int
    topic: str


# -- the log ------------------------------------------------------------------------------------


def read_log(loom: Loom, report: Report) -> list[LoggedEvent]:
    """Every notification, decoded through the mapper (a row that does not decode is reported)."""
    events: list[LoggedEvent] = []
    for notification in loom.log.notifications():
        try:
            loom.log.decode(notification)
        except Exception as exc:  # any failure to decode is the finding, whatever its type
            report.violations.append(
                f"notification {notification.position} ({notification.topic}) does not "
                f"decode: {exc!r}"
            )
        events.append(
            LoggedEvent(
                notification.position,
                str(notification.stream),
                notification.version,
                notification.topic,
            )
        )
    report.stats["events"] = len(events)
    return events


def check_order(events: list[LoggedEvent], report: Report) -> None:
    """Positions strictly increase; every stream's versions are 1..n in log order."""
    positions = [event.position for event in events]
    if any(b <= a for a, b in pairwise(positions)):
        report.violations.append("notification ids do not strictly increase")
    versions: defaultdict[str, list[int]] = defaultdict(list)
    for event in events:
        versions[event.stream].append(event.version)
    for stream, seen in versions.items():
        if seen != list(range(1, len(seen) + 1)):
            report.violations.append(f"stream {stream} has versions {seen}, not 1..{len(seen)}")
    report.stats["streams"] = len(versions)


# -- the corpus ---------------------------------------------------------------------------------


class StoredPassage(msgspec.Struct, frozen=True, order=True):
    """One row of the passage index; ``valid_to`` is set once its revision stopped being current.

    ``revision``, ``valid_from`` and ``valid_to`` exist only where the index keeps superseded
    passages for as-of reads (ADR 0014); an index that deletes them reads as ``None`` here and
    every row is live.
    """

    key: str
    entry_id: str
    entry: str
    revision: int | None
    valid_from: int | None
    valid_to: int | None

    @property
    def doc_id(self) -> str:
        return self.entry_id.rsplit("#", 1)[0]


class CorpusState(msgspec.Struct, frozen=True):
    """The corpus read models as rows: what a rebuild must reproduce exactly."""

    manifest: list[tuple[Any, ...]]
    history: list[tuple[Any, ...]]
    passages: list[StoredPassage]


_CORPUS_QUERIES: Final = {
    "manifest": "SELECT scope, doc_id, revision, fingerprint, fingerprint_algorithm, "
    "passage_count, source FROM loom_kb_documents ORDER BY scope, doc_id",
    "history": "SELECT scope, doc_id, revision, fingerprint, source, written_position, "
    "ended_position, ended_by FROM loom_kb_revisions ORDER BY scope, doc_id, revision",
}
_VALIDITY: Final = ("revision", "valid_from", "valid_to")


def read_corpus(engine: Engine) -> CorpusState | None:
    """The corpus tables read raw, with no catch-up (``None`` before they exist)."""
    with engine.connect() as conn:
        schema = inspect(conn)
        if not schema.has_table("loom_kb_documents"):
            return None
        rows = {
            name: [tuple(row) for row in conn.execute(text(query))]
            for name, query in _CORPUS_QUERIES.items()
        }
        present = {column["name"] for column in schema.get_columns("loom_kb_entries")}
        validity = [c if c in present else f"NULL AS {c}" for c in _VALIDITY]
        entries = conn.execute(
            text(f"SELECT key, entry, {', '.join(validity)} FROM loom_kb_entries")
        ).all()
    passages = sorted(
        StoredPassage(str(key), str(msgspec.json.decode(entry)["id"]), str(entry), *validity_of)
        for key, entry, *validity_of in entries
    )
    return CorpusState(manifest=rows["manifest"], history=rows["history"], passages=passages)


def check_corpus_consistent(state: CorpusState | None, report: Report, *, when: str) -> None:
    """Live passages are exactly those the manifest counts; old ones belong to ended revisions."""
    if state is None:
        return
    counted = {
        (f"knowledge:{scope}", f"{doc_id}#{index}")
        for scope, doc_id, *_, passage_count, _source in state.manifest
        for index in range(passage_count)
    }
    live = Counter((p.key, p.entry_id) for p in state.passages if p.valid_to is None)
    for (key, entry_id), count in sorted(live.items()):
        if (key, entry_id) not in counted:
            report.violations.append(f"{when}: orphan passage {entry_id} under {key}")
        if count > 1:
            report.violations.append(f"{when}: passage {entry_id} stored {count} times")
    for key, entry_id in sorted(counted - set(live)):
        report.violations.append(f"{when}: document listed without passage {entry_id} ({key})")
    ended = {
        (f"knowledge:{scope}", doc_id, revision, ended_position)
        for scope, doc_id, revision, *_, ended_position, _by in state.history
    }
    for p in state.passages:
        if p.valid_to is not None and (p.key, p.doc_id, p.revision, p.valid_to) not in ended:
            report.violations.append(
                f"{when}: superseded passage {p.entry_id} (revision {p.revision}, ended at "
                f"{p.valid_to}) belongs to no revision that ended there"
            )
    report.stats["documents"] = len(state.manifest)
    report.stats["passages"] = sum(live.values())


def check_corpus_converges(loom: Loom, report: Report) -> None:
    """Caught up from where it stopped, the corpus equals a rebuild of the dropped index."""
    knowledge_base(loom).refresh()
    caught_up = read_corpus(loom.log.engine)
    check_corpus_consistent(caught_up, report, when="after catch-up")
    drop_corpus(loom)
    knowledge_base(loom).refresh()  # the tables are recreated empty: this replays from 0
    rebuilt = read_corpus(loom.log.engine)
    if caught_up != rebuilt:
        assert caught_up is not None and rebuilt is not None
        differing = [
            field
            for field in CorpusState.__struct_fields__
            if getattr(caught_up, field) != getattr(rebuilt, field)
        ]
        report.violations.append(f"the caught-up corpus differs from a rebuild in {differing}")


# -- executions ---------------------------------------------------------------------------------


def check_executions(loom: Loom, events: list[LoggedEvent], report: Report) -> None:
    """Each execution completed once, or is resumed here exactly once; all replay identically.

    ``loom`` must have the workload's flows registered.
    """
    topics: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for event in events:
        topics[event.stream][event.topic] += 1
    executions = [stream for stream, counts in topics.items() if counts[_CREATED]]
    for execution_id in executions:
        completed, failed = topics[execution_id][_COMPLETED], topics[execution_id][_FAILED]
        if failed:
            report.violations.append(f"execution {execution_id} failed")
        elif completed == 0:
            _check_resume(loom, execution_id, report)
        elif completed > 1:
            report.violations.append(f"execution {execution_id} completed {completed} times")
        replayed = loom.replay(execution_id)
        if not replayed.identical:
            report.violations.append(f"execution {execution_id} replays differently: {replayed}")
    report.stats["executions"] = len(executions)


def _check_resume(loom: Loom, execution_id: str, report: Report) -> None:
    """Resume an interrupted execution: it completes once and recomputes nothing it recorded."""
    before = loom.execution(execution_id)
    recorded = {key: _decision_bytes(decision) for key, decision in before.decisions.items()}
    COMPUTED.clear()
    loom.resume(execution_id)
    after = loom.execution(execution_id)
    report.stats["resumed"] += 1
    changed = [key for key, raw in recorded.items() if _decision_bytes(after.decisions[key]) != raw]
    if changed:
        report.violations.append(f"resuming {execution_id} changed recorded decisions {changed}")
    labels = {
        label
        for decision in before.decisions.values()
        if decision.value is not None
        and (label := label_of(codec.decode(decision.value))) is not None
    }
    again = sorted(labels.intersection(COMPUTED))
    if again:
        report.violations.append(f"resuming {execution_id} recomputed recorded decisions {again}")
    completions = sum(1 for row in loom.log.rows(after.id) if row.topic == _COMPLETED)
    if completions != 1:
        report.violations.append(f"execution {execution_id} completed {completions} times")


def _decision_bytes(decision: Any) -> tuple[bytes, ...]:
    return tuple(
        bytes(part) if isinstance(part, msgspec.Raw) else str(part).encode()
        for part in (decision.input, decision.value, decision.error_type)
    )


# -- the whole check ----------------------------------------------------------------------------


def check_log(loom: Loom) -> Report:
    """Run every invariant on ``loom``'s log (flows registered); repairs by resuming/rebuilding."""
    report = Report()
    events = read_log(loom, report)
    check_order(events, report)
    check_corpus_consistent(read_corpus(loom.log.engine), report, when="as the crash left it")
    check_executions(loom, events, report)
    check_corpus_converges(loom, report)
    return report


# -- a projection that records what it saw -----------------------------------------------------


class SeenEvents(SQLProjection):
    """A projection with one row per event it applied: which events, and how many times.

    Its table has no key on the position on purpose, so applying an event twice (two
    projectors winning the same page) shows up as a duplicate row instead of an error, and
    skipping one (a tail reading past an id that committed late) as a missing row.
    """

    def __init__(self, engine: Engine, *, name: str) -> None:
        super().__init__(engine, name=name)
        self.seen = Table(
            f"rel_seen_{name}",
            self.metadata,
            Column("position", BigInteger, nullable=False, index=True),
            Column("stream", Text, nullable=False),
            Column("version", Integer, nullable=False),
        )
        self.create_tables()

    def handle(self, conn: Connection, position: int, event: DomainEventProtocol[Any]) -> None:
        conn.execute(
            self.seen.insert().values(
                position=position,
                stream=str(event.originator_id),
                version=event.originator_version,
            )
        )

    def clear(self, conn: Connection) -> None:
        conn.execute(self.seen.delete())

    def rows(self) -> list[tuple[int, str, int]]:
        with self.engine.connect() as conn:
            query = self.seen.select().order_by(self.seen.c.position)
            return [(int(p), str(s), int(v)) for p, s, v in conn.execute(query)]


def check_seen(loom: Loom, tailed: SeenEvents, report: Report) -> None:
    """The tailed projection holds every event exactly once: equal to a rebuild and to the log."""
    catch_up(loom.log, tailed)  # whatever the tail had not reached when it stopped
    fresh = SeenEvents(loom.log.engine, name=f"{tailed.name}_rebuild")
    rebuild(loom.log, fresh)
    rows, expected = tailed.rows(), fresh.rows()
    positions = Counter(position for position, _, _ in rows)
    doubled = sorted(p for p, n in positions.items() if n > 1)
    if doubled:
        report.violations.append(f"projection {tailed.name} applied {doubled[:10]} twice")
    skipped = sorted({p for p, _, _ in expected} - set(positions))
    if skipped:
        report.violations.append(f"projection {tailed.name} skipped positions {skipped[:10]}")
    if not doubled and not skipped and rows != expected:
        report.violations.append(f"projection {tailed.name} differs from its rebuild")
    logged = [(event.position, event.stream, event.version) for event in read_log(loom, Report())]
    if expected != logged:
        report.violations.append("a rebuild of the seen-events projection differs from the log")
    report.stats["seen"] = len(rows)
