"""Section "bundles": bundle export and database-free replay; as-of vs current retrieval.

**Bundles.** One execution of the runtime workload (1,000 decisions of ~1 KB,
:mod:`benchmarks.workload`) is recorded once into a SQLite file (and into PostgreSQL when
``LOOM_TEST_PG_URL`` is set). The arms: ``loom.export(id, path)`` to JSON and to msgpack (time
and bytes); ``replay_bundle(path)`` of each bundle by a ``Loom(url, flows=registry)`` whose URL
names a file in a directory that does not exist, so opening its log would fail: after every
sample the harness checks that the log was never opened and no file appeared (a process
with no database); and ``loom.replay(id)`` of the same execution from the log,
by a fresh ``Loom`` whose log is opened before the clock starts (both replay arms then time
reading the recording from where it lives, rebuilding the execution and answering every
``decide``). Every replay must be identical, else the harness stops.

**As of.** A corpus of 10,000 documents (:func:`benchmarks.corpus.base_docs`, windows of real
manuals) is synced three times into one log, each sync after the first editing every document
(its marker term becomes ``loommark<r>x<n>`` for revision r), so the index holds 3 revisions
of each. The first sync is restored from the corpus section's build of the same documents
when that section ran earlier in the run (:class:`benchmarks.harness.Snapshots`). P2 is the
log position right after the second sync. Per round, 100 seeded queries are timed three ways:
``kb.search(q, limit=4)`` (current), ``kb.as_of(P2).retrieve(q, limit=4)`` (the view made
per question, as an auditor calls it) and ``view.retrieve(q, limit=4)`` on one view made
before the clock. Before the rounds the harness checks that as-of is a real filter: revision
2's marker of sampled documents is found as of P2 and not in the current corpus, and revision
3's marker is not found as of P2.

**Divergence reports.** An execution whose output is one string of 4 MB (and 20 MB) is
recorded and exported; it is replayed by code whose output differs in its second half, and the
report is printed as ``loom replay`` prints it (``result.describe()`` through a Rich console,
80 columns, into memory). Timed: ``replay_bundle`` plus the printing; the printed size is
reported too, since the report must stay bounded (unbounded diffs took 11.6 s at 4 MB and did
not finish in 300 s at 20 MB). Each replay must report the divergence.

Negative controls: a bundle with one recorded value altered must be refused as tampered (a
replay that skipped the hash check would also have been timed cheaper); and the design ADR 0014
rules out, rebuilding the index up to P into a scratch database for every question, run
on a small corpus with a few questions, must come out far beyond the 2x target.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from rich.console import Console

from benchmarks.corpora import queries
from benchmarks.corpus import base_docs, edited, marker, synced_key
from benchmarks.harness import (
    SNAPSHOTS,
    Arm,
    Control,
    InstrumentError,
    Progress,
    Results,
    Sample,
    SectionResult,
    Settings,
    Table,
    interleave,
    ratio,
    scratch_directory,
)
from benchmarks.memory import percentile
from benchmarks.stores import fresh_postgres, fresh_sqlite
from benchmarks.workload import FLOW, Value, make_values, record, recording_flow
from loom_knowledge import Doc, KnowledgeBase, Passage, open_knowledge_base
from loom_knowledge.corpus.corpus_index import CorpusIndex
from loom_runtime import FlowContext, FlowRegistry, LogSettings, Loom
from loom_runtime.errors import BundleTamperedError
from loom_runtime.projection import rebuild

DECISIONS = 1_000
QUICK_DECISIONS = 300
CORPUS_DOCS = 10_000
QUICK_CORPUS_DOCS = 500
REVISIONS = 3
QUERIES = 100
QUICK_QUERIES = 40
LIMIT = 4
SCOPE = "bench"
SOURCE = "bench"
FILTER_CHECKS = 50
"""Documents whose markers are searched to prove as-of filters (before the rounds, untimed)."""
AS_OF_TARGET = 2.0
"""The target: an as-of retrieval costs at most this many times a current one."""
CONTROL_DOCS = 300
QUICK_CONTROL_DOCS = 150
CONTROL_QUERIES = 5
QUICK_CONTROL_QUERIES = 3
CONTROL_FACTOR = 10.0
"""The forbidden design must cost at least this many times a current search (5x the target)."""
DIVERGENT_OUTPUT_MB = (4, 20)
"""Sizes of the changed output whose divergence report is timed."""
QUICK_DIVERGENT_OUTPUT_MB = (4,)


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Record and export the execution, build the 3-revision corpus, then interleave all arms."""
    decisions = QUICK_DECISIONS if settings.quick else DECISIONS
    corpus_docs = QUICK_CORPUS_DOCS if settings.quick else CORPUS_DOCS
    query_count = QUICK_QUERIES if settings.quick else QUERIES
    values = make_values(decisions)
    with ExitStack() as stack:
        progress(f"recording a {decisions:,}-decision execution (SQLite)")
        url, _ = stack.enter_context(fresh_sqlite())
        execution_id, _ = record(url, values)
        logs = [("SQLite", url, execution_id)]
        if settings.pg_url:
            progress(f"recording a {decisions:,}-decision execution (PostgreSQL)")
            pg_url = stack.enter_context(fresh_postgres(settings.pg_url))
            logs.append(("PostgreSQL", pg_url, record(pg_url, values)[0]))
        directory = stack.enter_context(scratch_directory())
        bundles = {
            suffix: _export(url, execution_id, directory / f"fixture.{suffix}")
            for suffix in ("json", "msgpack")
        }
        bundle_arms = [
            *(_export_arm(url, execution_id, directory, suffix) for suffix in bundles),
            *(_bundle_replay_arm(path, values, directory) for path in bundles.values()),
            *(_log_replay_arm(name, log_url, log_id, values) for name, log_url, log_id in logs),
        ]
        sizes = QUICK_DIVERGENT_OUTPUT_MB if settings.quick else DIVERGENT_OUTPUT_MB
        progress(f"recording outputs of {', '.join(f'{mb} MB' for mb in sizes)}")
        report_arms = [_divergence_report_arm(directory, mb) for mb in sizes]

        progress(f"building a {corpus_docs:,}-document corpus with {REVISIONS} revisions each")
        corpus = _build_corpus(stack, base_docs(corpus_docs), progress)
        corpus.check_filter(FILTER_CHECKS)
        query_set = queries([doc.text.rpartition("\n\n")[0] for doc in corpus.docs], query_count)
        as_of_arms = _retrieval_arms(corpus, query_set)

        results = interleave(
            [*bundle_arms, *report_arms, *as_of_arms], rounds=settings.rounds, progress=progress
        )
        progress("negative controls")
        tampered = _tampered_control(bundles["json"], values, directory)
        forbidden = _rebuild_per_question_control(stack, progress, quick=settings.quick)

    return SectionResult(
        notes=(
            f"Bundles: one execution of {decisions:,} sequential decisions of ~1 KB (the runtime "
            "workload), recorded once. Bundle replays run in a `Loom(url, flows=registry)` whose "
            "log is never opened (checked after every sample: a URL in a directory that does "
            "not exist, and no file created); the log replay's `Loom` opens its log before "
            "the clock. Every replay must report identical.",
            f"As of: {corpus_docs:,} documents (~2,000-character windows of the PostgreSQL and "
            f"Python manuals, default chunker), synced {REVISIONS} times, every document "
            f"edited in each sync after the first{_first_sync(corpus)}, so the index holds "
            f"{REVISIONS} revisions of each; P2 = log "
            f"position {corpus.positions[1]:,} (after the second sync), head "
            f"{corpus.positions[2]:,}. {query_count} seeded queries of 2-4 words drawn from the "
            f"corpus, e.g. {', '.join(repr(q) for q in query_set[:3])}. Checked before timing: "
            f"revision 2's marker of {FILTER_CHECKS} documents is found as of P2 and not now; "
            "revision 3's is not found as of P2.",
        ),
        tables=(
            _bundle_table(bundle_arms, results, decisions, settings.rounds),
            _report_table(report_arms, results, settings.rounds),
            _retrieval_table(as_of_arms, results, settings.rounds, query_count),
        ),
        controls=(tampered, forbidden),
    )


# -- bundles --------------------------------------------------------------------------------


def _registry(values: list[Value]) -> FlowRegistry:
    registry = FlowRegistry()
    registry.flow(FLOW)(recording_flow(values))
    return registry


def _export(url: str, execution_id: UUID, path: Path) -> Path:
    with Loom(url) as loom:
        return loom.export(execution_id, path)


def _export_arm(url: str, execution_id: UUID, directory: Path, suffix: str) -> Arm:
    def measure() -> Sample:
        path = directory / f"export.{suffix}"
        with Loom(url) as loom:
            loom.log  # noqa: B018 - open the log before the clock, as the log replay does
            started = time.perf_counter()
            loom.export(execution_id, path)
            elapsed = time.perf_counter() - started
        size = path.stat().st_size
        path.unlink()
        return {"ms": elapsed * 1e3, "bytes": size}

    return Arm(f"loom.export(id, path), {suffix}", measure)


def _bundle_replay_arm(path: Path, values: list[Value], directory: Path) -> Arm:
    never = directory / "no-such-directory" / "never.db"

    def measure() -> Sample:
        loom = Loom(f"sqlite:///{never}", flows=_registry(values))
        started = time.perf_counter()
        result = loom.replay_bundle(path)
        elapsed = time.perf_counter() - started
        _expect(
            "log" not in loom.__dict__ and not never.parent.exists(),
            "the bundle replay opened a database",
        )
        _identical(result.divergences)
        return {"ms": elapsed * 1e3, "per_s": len(values) / elapsed}

    return Arm(f"loom.replay_bundle(path), {path.suffix[1:]}, no database", measure)


def _log_replay_arm(backend: str, url: str, execution_id: UUID, values: list[Value]) -> Arm:
    def measure() -> Sample:
        with Loom(url, flows=_registry(values)) as loom:
            loom.log  # noqa: B018 - open the log before the clock
            started = time.perf_counter()
            result = loom.replay(execution_id)
            elapsed = time.perf_counter() - started
        _identical(result.divergences)
        return {"ms": elapsed * 1e3, "per_s": len(values) / elapsed}

    return Arm(f"loom.replay(id) from the log, {backend}", measure)


def _identical(divergences: tuple[object, ...]) -> None:
    _expect(
        not divergences,
        f"a timed replay diverged ({', '.join(type(d).__name__ for d in divergences)})",
    )


def _divergence_report_arm(directory: Path, megabytes: int) -> Arm:
    """Replay a bundle whose recorded output of ``megabytes`` MB changed, and print the report."""
    size = megabytes * 1_000_000
    output = {"value": "y" * size}
    registry = FlowRegistry()

    @registry.flow("big-output", version="bench")
    def big_output(ctx: FlowContext) -> str:
        return output["value"]

    with Loom(f"sqlite:///{directory / f'output-{megabytes}.db'}", flows=registry) as loom:
        run = loom.run("big-output")
        path = loom.export(run.execution_id, directory / f"output-{megabytes}.json")
    output["value"] = "y" * (size // 2) + "x" * (size - size // 2)

    def measure() -> Sample:
        printed = io.StringIO()
        started = time.perf_counter()
        result = Loom(flows=registry).replay_bundle(path)
        Console(file=printed, width=80, highlight=False).print(result.describe(), markup=False)
        elapsed = time.perf_counter() - started
        _expect(not result.identical, "a changed output replayed as identical")
        return {"ms": elapsed * 1e3, "chars": len(printed.getvalue())}

    return Arm(f"replay_bundle + printed report, a {megabytes} MB output changed", measure)


def _report_table(arms: list[Arm], results: Results, rounds: int) -> Table:
    return Table(
        title="Divergence report of a changed output, as `loom replay` prints it",
        columns=("arm", "time", "printed characters"),
        rows=tuple(
            (
                arm.name,
                results[arm.name]["ms"].cell(" ms"),
                f"{results[arm.name]['chars'].median:,.0f}",
            )
            for arm in arms
        ),
        note=f"median of {rounds} interleaved rounds (low-high)",
    )


def _tampered_control(path: Path, values: list[Value], directory: Path) -> Control:
    """One recorded value altered in the bundle's text: replay_bundle must refuse it."""
    tampered = directory / "tampered.json"
    text = path.read_text()
    needle = values[len(values) // 2]["text"][:40]
    _expect(needle in text, "the bundle does not hold the recorded value as text")
    tampered.write_text(text.replace(needle, needle.upper(), 1))
    loom = Loom(f"sqlite:///{directory / 'none' / 'never.db'}", flows=_registry(values))
    try:
        result = loom.replay_bundle(tampered)
        observed = f"replayed ({len(result.divergences)} divergences)"
        held = False
    except BundleTamperedError:
        observed, held = "refused: BundleTamperedError", True
    except Exception as exc:  # any other outcome is what the control reports
        observed, held = f"refused with {type(exc).__name__}", False
    return Control(
        name=f"replay_bundle of a JSON bundle with one of its {len(values):,} recorded values "
        "altered",
        expected="refused: BundleTamperedError",
        observed=observed,
        held=held,
    )


def _bundle_table(arms: list[Arm], results: Results, decisions: int, rounds: int) -> Table:
    rows = []
    sqlite_replay = next(
        results[arm.name]["ms"] for arm in arms if arm.name.endswith("from the log, SQLite")
    )
    for arm in arms:
        stats = results[arm.name]
        size = f"{stats['bytes'].median:,.0f}" if "bytes" in stats else ""
        rate = stats["per_s"].cell("/s") if "per_s" in stats else ""
        against = ratio(stats["ms"], sqlite_replay) if "replay" in arm.name else ""
        rows.append((arm.name, stats["ms"].cell(" ms"), rate, size, against))
    return Table(
        title=f"Export and replay of one {decisions:,}-decision execution",
        columns=(
            "arm",
            "time",
            "decisions replayed/s",
            "bundle bytes",
            "time / replay from the SQLite log",
        ),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high)",
    )


# -- as of ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """The 3-revision corpus: its knowledge base, base documents and the position after each
    sync."""

    kb: KnowledgeBase
    docs: list[Doc]
    positions: tuple[int, ...]
    first_restored: bool
    """Whether the first sync was the corpus section's build, copied (``Snapshots``)."""

    def check_filter(self, count: int) -> None:
        """As of P2 finds revision 2's markers and not revision 3's; now finds no revision 2."""
        p2 = self.positions[1]
        step = max(1, len(self.docs) // count)
        for index in range(0, len(self.docs), step)[:count]:
            doc_id = self.docs[index].id
            then = self.kb.as_of(p2)
            _expect(
                doc_id in _ids(then.retrieve(marker(2, index), limit=LIMIT)),
                f"as of P2, revision 2 of {doc_id} is not found by its marker",
            )
            _expect(
                not then.retrieve(marker(3, index), limit=LIMIT),
                f"as of P2, revision 3's marker of {doc_id} is found (not yet written then)",
            )
            _expect(
                not self.kb.search(marker(2, index), limit=LIMIT),
                f"now, the superseded revision 2 of {doc_id} is still found",
            )


def _first_sync(corpus: Corpus) -> str:
    if not corpus.first_restored:
        return ""
    return (
        " (the first: a copy of the corpus section's build of the same documents, made "
        "earlier in this run by one kb.sync into a fresh SQLite loom; the copy must list "
        "every document)"
    )


def _ids(passages: list[Passage]) -> list[str]:
    return [passage.doc_id for passage in passages]


def _build_corpus(stack: ExitStack, docs: list[Doc], progress: Progress) -> Corpus:
    """The corpus, its first sync restored from the corpus section's snapshot of the same
    documents when that section kept one this run (a copy: nothing here reaches it)."""
    url, path = stack.enter_context(fresh_sqlite())
    restored = SNAPSHOTS.restore(synced_key(docs), path)
    if restored:
        progress(f"sync 1/{REVISIONS}: the corpus section's {len(docs):,}-document build, copied")
    loom = stack.enter_context(Loom(url))
    return _synced(loom, docs, progress, first_restored=restored)


def _synced(
    loom: Loom, docs: list[Doc], progress: Progress, *, first_restored: bool = False
) -> Corpus:
    """Sync ``docs`` as they are, then ``REVISIONS - 1`` times with every marker edited (the
    first sync already in the log if ``first_restored``); the position after each sync."""
    kb = open_knowledge_base(loom, SCOPE)
    kb.refresh()
    positions = []
    if first_restored:
        listed = len(kb.list_docs())
        _expect(listed == len(docs), f"the restored corpus lists {listed} of {len(docs)} docs")
        positions.append(loom.log.position)
    for revision in range(1 + first_restored, REVISIONS + 1):
        progress(f"sync {revision}/{REVISIONS} of {len(docs):,} documents")
        texts = docs if revision == 1 else [edited(d, i, revision) for i, d in enumerate(docs)]
        result = kb.sync(texts, source=SOURCE)
        _expect(len(result.written) == len(docs), f"sync {revision} wrote {len(result.written)}")
        positions.append(loom.log.position)
    return Corpus(kb, docs, tuple(positions), first_restored)


def _retrieval_arms(corpus: Corpus, query_set: list[str]) -> list[Arm]:
    kb, p2 = corpus.kb, corpus.positions[1]
    view = kb.as_of(p2)

    def timed(search: Callable[[str], list[Passage]]) -> Callable[[], Sample]:
        def measure() -> Sample:
            latencies = []
            for query in query_set:
                started = time.perf_counter()
                found = search(query)
                latencies.append(time.perf_counter() - started)
                _expect(bool(found), f"query {query!r} was drawn from the corpus, found nothing")
            return {
                "p50_ms": percentile(latencies, 50) * 1e3,
                "p95_ms": percentile(latencies, 95) * 1e3,
            }

        return measure

    return [
        Arm(f"kb.search(q, limit={LIMIT}) (current)", timed(lambda q: kb.search(q, limit=LIMIT))),
        Arm(
            f"kb.as_of(P2).retrieve(q, limit={LIMIT})",
            timed(lambda q: kb.as_of(p2).retrieve(q, limit=LIMIT)),
        ),
        Arm(
            f"view.retrieve(q, limit={LIMIT}), view = kb.as_of(P2) made once",
            timed(lambda q: view.retrieve(q, limit=LIMIT)),
        ),
    ]


def _retrieval_table(arms: list[Arm], results: Results, rounds: int, count: int) -> Table:
    current = results[arms[0].name]
    rows = []
    for index, arm in enumerate(arms):
        stats = results[arm.name]
        p50, p95 = stats["p50_ms"], stats["p95_ms"]
        if index == 0:
            against, verdict = "1.00x / 1.00x", "n/a"
        else:
            factor = p50.median / current["p50_ms"].median
            against = f"{ratio(p50, current['p50_ms'])} / {ratio(p95, current['p95_ms'])}"
            verdict = f"{'met' if factor <= AS_OF_TARGET else 'MISSED'} (p50 {factor:.2f}x)"
        rows.append((arm.name, p50.cell(" ms"), p95.cell(" ms"), against, verdict))
    return Table(
        title=f"As-of vs current retrieval, {count} queries per round",
        columns=("arm", "p50", "p95", "p50 / p95 vs current", f"target <= {AS_OF_TARGET:.0f}x"),
        rows=tuple(rows),
        note=f"median over {rounds} interleaved rounds of each round's p50/p95 (low-high); "
        "ratios between medians",
    )


def _rebuild_per_question_control(stack: ExitStack, progress: Progress, *, quick: bool) -> Control:
    """The forbidden design: rebuild the index up to P into a scratch database per question."""
    size = QUICK_CONTROL_DOCS if quick else CONTROL_DOCS
    progress(f"control corpus: {size} documents x {REVISIONS} revisions")
    url, _ = stack.enter_context(fresh_sqlite())
    loom = stack.enter_context(Loom(url))
    corpus = _synced(loom, base_docs(size), progress)
    p2 = corpus.positions[1]
    count = QUICK_CONTROL_QUERIES if quick else CONTROL_QUERIES
    query_set = queries([doc.text for doc in corpus.docs], count)
    current, forbidden = [], []
    for number, query in enumerate(query_set):
        started = time.perf_counter()
        corpus.kb.search(query, limit=LIMIT)
        current.append(time.perf_counter() - started)
        progress(f"control question {number + 1}/{len(query_set)}: rebuilding up to P2")
        with scratch_directory() as directory:
            started = time.perf_counter()
            engine = LogSettings(f"sqlite:///{directory / 'index.db'}").create_engine()
            try:
                index = CorpusIndex(engine)
                rebuild(loom.log, index, upto=p2)
                found = index.search_passages(SCOPE, query, limit=LIMIT)
            finally:
                engine.dispose()
            forbidden.append(time.perf_counter() - started)
        _expect(bool(found), f"the rebuilt index found nothing for {query!r}")
    factor = percentile(forbidden, 50) / percentile(current, 50)
    return Control(
        name=f"as-of by rebuilding the index up to P2 per question ({size} documents x "
        f"{REVISIONS} revisions, {len(query_set)} questions)",
        expected=f"p50 >= {CONTROL_FACTOR:.0f}x a current search on the same corpus (the "
        f"target allows {AS_OF_TARGET:.0f}x)",
        observed=f"p50 {percentile(forbidden, 50) * 1e3:,.0f} ms = {factor:,.0f}x "
        f"(current {percentile(current, 50) * 1e3:.2f} ms)",
        held=factor >= CONTROL_FACTOR,
    )


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise InstrumentError(f"bundles section: {problem}")
