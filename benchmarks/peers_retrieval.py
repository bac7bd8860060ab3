"""Section "peers-retrieval": quality and latency vs tantivy and bm25s.

Every system indexes the same passages (loom's default chunker over the pages, the
back-of-book index page left out) and answers the same queries with 10 passages; passages are
mapped to their pages, duplicates dropped, and the page list scored against the judgments:
MRR@10 and Hit@10. Latency is per query, p50 and p95 per round, medians over rounds.

* Judgments: ``qrels-pg17-index`` (the PostgreSQL 17 manual's back-of-book index: short
  lexical queries; a seeded sample of 200) and ``qrels-py3.11-faq`` (the Python FAQ's 162
  questions; each question's own heading is removed from the page text first, as the
  corpora's README asks, or the match is trivial).
* loom: ``kb.search(query, limit=10)`` on SQLite (FTS5) and, with ``LOOM_TEST_PG_URL``, on
  PostgreSQL (a fresh database). tantivy: an in-memory index, default tokenizer, the query's
  terms OR-ed through its query parser. bm25s: ``bm25s.tokenize(..., stopwords="en")`` and
  ``BM25().retrieve(k=10)``, one query at a time.
* As of: one loom knowledge base syncs pg15.18, then pg15.20, then pg17; ``kb.as_of(position
  after pg15.18).retrieve`` is scored against ``qrels-pg15-index`` next to tantivy over the
  pg15.18 passages, and timed against a current ``kb.search`` on the same queries (target: the
  as-of query at most 2x the current one).

* History independence (ADR 0014): on each backend, one knowledge base reconciles pg15.18 ->
  pg15.20 -> pg17 -> pg15.18 (three versions and back), searching the sampled pg15 queries
  after each sync. Reported as percentages that must be 100%: the final current search equal
  (passages and order) to a fresh corpus of the pg15.18 pages (the first sync, into an empty
  knowledge base, is that corpus), and ``as_of(P).retrieve`` at each earlier position equal to
  the search that ran at P.

Negative control: the pg17 results of tantivy scored against judgments rotated by one query
(every query judged by its neighbour's relevant pages) must score MRR@10 below 0.05; a scorer
that counted anything as a hit would not.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.harness import (
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
    spawned,
)
from benchmarks.memory import percentile
from benchmarks.peers_corpora import INDEX_PAGE, docs, passages, qrels, terms
from benchmarks.peers_targets import Target, publish
from benchmarks.stores import fresh_postgres, fresh_sqlite
from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom

LIMIT = 10
QUERIES = 200
QUICK_QUERIES = 40
QUICK_PAGES = 200
"""--quick: the first pages of each manual only, judgments restricted to them."""
QUICK_FAQ_PAGES = 100
"""--quick: the FAQ's distractor pages (its own pages are always kept)."""
QUICK_HISTORY_PAGES = 60
"""--quick: the history row syncs four versions on each backend, over a third of this
section's time at 300 pages; its answer (equal or not) needs no more pages."""
MAX_ROUNDS = 5
"""A round runs every query set on every system (~15 s): more rounds add little."""
QUERY_SEED = 11
MRR_TOLERANCE = 0.02
AS_OF_TARGET = 2.0
CONTROL_CEILING = 0.05

Search = Callable[[str], list[str]]
"""A query -> the page ids of the passages returned, best first."""
Judged = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True)
class Workload:
    """One corpus version, its passages' pages, and the sampled judgments."""

    name: str
    pages: tuple[Doc, ...]
    judged: Judged


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Index each corpus once per system, then time the query sets in interleaved rounds.

    The history checks (a correctness row, untimed) run in a second process per backend while
    this one indexes: each is minutes of syncs, mostly waited for (the PostgreSQL server, or
    the other core idle), and every result is in before the first timed round."""
    count = QUICK_QUERIES if settings.quick else QUERIES
    pages = QUICK_PAGES if settings.quick else None
    rounds = min(settings.rounds, MAX_ROUNDS)
    pg17 = _workload("pg17", "qrels-pg17-index", count, pages)
    faq = _faq_workload(QUICK_FAQ_PAGES if settings.quick else None)
    if settings.quick:  # every FAQ question was half of a quick round's time on PostgreSQL
        faq = _sampled(faq, count)
    pg15 = _workload("pg15.18", "qrels-pg15-index", count, pages)
    backends = list(_history_backends(settings))
    with ExitStack() as stack:
        pool = stack.enter_context(spawned(len(backends)))
        progress(f"history: pg15 -> 17 -> 15 in a process per backend ({', '.join(backends)})")
        checking = {
            backend: pool.submit(
                history_check,
                settings,
                backend,
                tuple(query for query, _ in pg15.judged),
                QUICK_HISTORY_PAGES if settings.quick else None,
            )
            for backend in backends
        }
        arms: list[Arm] = []
        searches: dict[str, Search] = {}
        for workload in (pg17, faq):
            progress(f"indexing {workload.name} in every system")
            builders = _builders(settings)
            for system, build in builders.items():
                search = stack.enter_context(build(workload.pages))
                searches[f"{system} | {workload.name}"] = search
                arms.append(_arm(f"{system} | {workload.name}", search, workload.judged))
        progress("as of: syncing pg15.18, pg15.20, pg17 into one knowledge base")
        as_of, current = stack.enter_context(
            _as_of_searches({d.id for d in pg15.pages}, later=pages is None)
        )
        arms.append(_arm("loom SQLite as of pg15.18 | pg15.18", as_of, pg15.judged))
        arms.append(_arm("loom SQLite current | pg15.18", current, pg15.judged))
        tantivy15 = stack.enter_context(_tantivy(pg15.pages))
        arms.append(_arm("tantivy | pg15.18", tantivy15, pg15.judged))
        progress("history: waiting for the checks (nothing is timed while they run)")
        history = {backend: future.result() for backend, future in checking.items()}
        pool.shutdown()
        results = interleave(arms, rounds=rounds, progress=progress)
        progress("negative control: rotated judgments")
        control = _rotated_control(searches["tantivy | pg17"], pg17.judged)
    _check_deterministic(results)
    publish([*_targets(results, pg17, faq), *_history_targets(history)])
    return SectionResult(
        notes=(
            __doc__.split("\n\n", 2)[1].replace("\n", " "),
            f"Queries: {len(pg17.judged)} sampled from qrels-pg17-index (seed {QUERY_SEED}), "
            f"{len(faq.judged)} FAQ questions, {len(pg15.judged)} sampled from "
            "qrels-pg15-index for the as-of rows; judged at page level (passages mapped to "
            "pages, duplicates dropped, top 10 pages).",
            "PostgreSQL rows need LOOM_TEST_PG_URL (scripts/with-postgres)."
            if settings.pg_url is None
            else "PostgreSQL: a fresh database on the LOOM_TEST_PG_URL server (fsync off).",
        ),
        tables=(
            _quality_table(results, rounds),
            _as_of_table(results),
            _history_table(history, len(pg15.judged)),
        ),
        controls=(control,),
    )


def _workload(version: str, judgments: str, count: int, limit: int | None) -> Workload:
    pages = tuple(doc for doc in docs(version) if doc.id != INDEX_PAGE)[:limit]
    ids = {doc.id for doc in pages}
    judged = [(q, rel & ids) for q, rel in qrels(judgments) if rel & ids and terms(q)]
    judged = random.Random(QUERY_SEED).sample(judged, min(count, len(judged)))
    return Workload(version, pages, tuple(judged))


def _sampled(workload: Workload, count: int) -> Workload:
    """``workload`` with ``count`` of its judged queries, sampled as :func:`_workload` does."""
    judged = random.Random(QUERY_SEED).sample(workload.judged, min(count, len(workload.judged)))
    return replace(workload, judged=tuple(judged))


def _faq_workload(limit: int | None) -> Workload:
    judged = tuple((q, rel) for q, rel in qrels("qrels-py3.11-faq") if terms(q))
    questions = sorted({q for q, _ in judged}, key=len, reverse=True)
    pages = []
    for doc in docs("py3.11"):
        text = doc.text
        for question in questions:
            text = text.replace(question, " ")
        pages.append(Doc(id=doc.id, text=text, title=doc.title))
    if limit is not None:  # keep the FAQ pages, so every question stays answerable
        faq = {page for _, rel in judged for page in rel}
        pages = [doc for doc in pages if doc.id in faq] + [
            doc for doc in pages if doc.id not in faq
        ][:limit]
    return Workload("py3.11 FAQ", tuple(pages), judged)


Builder = Callable[[Sequence[Doc]], Any]


def _builders(settings: Settings) -> dict[str, Builder]:
    builders: dict[str, Builder] = {"loom SQLite": _loom_sqlite}
    if settings.pg_url is not None:
        url = settings.pg_url
        builders["loom PostgreSQL"] = lambda pages: _loom_postgres(url, pages)
    builders["tantivy"] = _tantivy
    builders["bm25s"] = _bm25s
    return builders


def _loom_search(loom: Loom, pages: Sequence[Doc]) -> Search:
    kb = open_knowledge_base(loom, "retrieval")
    kb.sync(pages, source="manual")
    return lambda query: [p.doc_id for p in kb.search(query, limit=LIMIT)]


@contextmanager
def _loom_sqlite(pages: Sequence[Doc]) -> Iterator[Search]:
    with fresh_sqlite() as (url, _), Loom(url) as loom:
        yield _loom_search(loom, pages)


@contextmanager
def _loom_postgres(admin_url: str, pages: Sequence[Doc]) -> Iterator[Search]:
    with fresh_postgres(admin_url) as url, Loom(url) as loom:
        yield _loom_search(loom, pages)


@contextmanager
def _tantivy(pages: Sequence[Doc]) -> Iterator[Search]:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("page", stored=True, tokenizer_name="raw")
    builder.add_text_field("text", stored=False)
    index = tantivy.Index(builder.build())
    writer = index.writer()
    for doc in pages:
        for text in passages(doc):
            writer.add_document(tantivy.Document(page=doc.id, text=text))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def search(query: str) -> list[str]:
        parsed = index.parse_query(" OR ".join(dict.fromkeys(terms(query))), ["text"])
        hits = searcher.search(parsed, LIMIT).hits
        return [searcher.doc(address)["page"][0] for _, address in hits]

    yield search


@contextmanager
def _bm25s(pages: Sequence[Doc]) -> Iterator[Search]:
    import bm25s

    owners = [doc.id for doc in pages for _ in passages(doc)]
    texts = [text for doc in pages for text in passages(doc)]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)

    def search(query: str) -> list[str]:
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        found, _ = retriever.retrieve(tokens, k=LIMIT, show_progress=False, n_threads=1)
        return [owners[int(i)] for i in found[0]]

    yield search


@contextmanager
def _as_of_searches(keep: set[str], *, later: bool) -> Iterator[tuple[Search, Search]]:
    """pg15.18's ``keep`` pages, then the later versions: every page with ``later``, else only
    ``keep``'s (--quick: a full pg15.20 and pg17 would be most of its untimed syncing)."""
    with fresh_sqlite() as (url, _), Loom(url) as loom:
        kb = open_knowledge_base(loom, "history")
        for number, version in enumerate(("pg15.18", "pg15.20", "pg17")):
            pages = [doc for doc in docs(version) if doc.id in keep or (number and later)]
            kb.sync(pages, source="manual", allow_mass_delete=True)
            if not number:
                position = loom.log.position
        past = kb.as_of(position)
        yield (
            lambda query: [p.doc_id for p in past.retrieve(query, limit=LIMIT)],
            lambda query: [p.doc_id for p in kb.search(query, limit=LIMIT)],
        )


HISTORY_VERSIONS = ("pg15.18", "pg15.20", "pg17", "pg15.18")
"""Three versions and back: the last corpus is the first one's text again."""

LoomOpener = Callable[[], Any]
"""A context manager giving a Loom on a fresh database of one backend."""


@dataclass(frozen=True)
class Equivalence:
    """How many searches agreed: current vs a fresh corpus, as of P vs the search at P."""

    fresh_equal: int
    fresh_total: int
    as_of_equal: int
    as_of_total: int
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    sync_seconds: tuple[float, ...] = ()
    """Wall seconds of each ``kb.sync``, the versions in order (the first builds the fresh
    corpus). On PostgreSQL the reconciles that end most pages take most of the check's time,
    in the server (its CPU is not the worker's), and the section waits for them before
    timing."""


def _history_backends(settings: Settings) -> dict[str, LoomOpener]:
    @contextmanager
    def sqlite() -> Iterator[Loom]:
        with fresh_sqlite() as (url, _), Loom(url) as loom:
            yield loom

    backends: dict[str, LoomOpener] = {"SQLite": sqlite}
    if settings.pg_url is not None:
        admin = settings.pg_url

        @contextmanager
        def postgres() -> Iterator[Loom]:
            with fresh_postgres(admin) as url, Loom(url) as loom:
                yield loom

        backends["PostgreSQL"] = postgres
    return backends


def history_check(
    settings: Settings, backend: str, queries: Sequence[str], limit_pages: int | None
) -> Equivalence:
    """:func:`_history_equivalence` on ``backend``, run in a worker process; it reports its
    own wall and CPU seconds, which the table's note gives."""
    started, cpu = time.perf_counter(), time.process_time()
    found = _history_equivalence(_history_backends(settings)[backend], queries, limit_pages)
    return replace(
        found, seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu
    )


def _history_equivalence(
    open_loom: LoomOpener, queries: Sequence[str], limit_pages: int | None
) -> Equivalence:
    """Reconcile three versions and back; compare every query with a fresh corpus and as of.

    The fresh corpus is the first sync's: the last version is the first one's pages, and the
    first sync goes into an empty knowledge base in a new database, which is what a fresh
    corpus of them is; the searches that ran right after it are its answers. Syncing the same
    pages into a second new database would repeat that sync and those searches (on
    PostgreSQL 12 s of sync in the worker the section waits for, ADR 0063)."""

    def key(passages: Sequence[Any]) -> list[tuple[str, int, str]]:
        return [(p.doc_id, p.index, p.text) for p in passages]

    versions = [
        tuple(doc for doc in docs(name) if doc.id != INDEX_PAGE)[:limit_pages]
        for name in HISTORY_VERSIONS
    ]
    if versions[-1] != versions[0]:
        raise InstrumentError("the history check must end on its first version's pages")
    with open_loom() as loom:
        kb = open_knowledge_base(loom, "history")
        then = []
        syncs = []
        for pages in versions:
            started = time.perf_counter()
            kb.sync(pages, source="manual", allow_mass_delete=True)
            syncs.append(time.perf_counter() - started)
            then.append((loom.log.position, [kb.search(q, limit=LIMIT) for q in queries]))
        current = [key(found) for found in then[-1][1]]
        expected = [key(found) for found in then[0][1]]
        as_of = [
            kb.as_of(position).retrieve(q, limit=LIMIT) == past
            for position, found in then[:-1]
            for q, past in zip(queries, found, strict=True)
        ]
    return Equivalence(
        fresh_equal=sum(a == b for a, b in zip(current, expected, strict=True)),
        fresh_total=len(queries),
        as_of_equal=sum(as_of),
        as_of_total=len(as_of),
        sync_seconds=tuple(syncs),
    )


def _percent(equal: int, total: int) -> str:
    return f"{100 * equal / total:.1f}% ({equal}/{total})"


def _history_table(history: dict[str, Equivalence], queries: int) -> Table:
    return Table(
        title="Retrieval independent of history (pg15.18 -> 15.20 -> 17 -> 15.18)",
        columns=("backend", "current = fresh corpus", "as of P = search at P"),
        rows=tuple(
            (
                backend,
                _percent(found.fresh_equal, found.fresh_total),
                _percent(found.as_of_equal, found.as_of_total),
            )
            for backend, found in history.items()
        ),
        note=f"{queries} sampled pg15 queries, top {LIMIT} passages compared in order; as of "
        f"each of the {len(HISTORY_VERSIONS) - 1} earlier positions; must be 100%. Checked in "
        "a process per backend while the systems above indexed ("
        + ", ".join(
            f"{backend} {found.seconds:.0f} s, CPU {found.cpu_seconds:.0f} s, its syncs "
            + " / ".join(f"{seconds:.0f}" for seconds in found.sync_seconds)
            + " s, the first the fresh corpus"
            for backend, found in history.items()
        )
        + "); nothing was timed until both were done",
    )


def _history_targets(history: dict[str, Equivalence]) -> list[Target]:
    return [
        Target(
            name=f"retrieval independent of history ({backend}): current = fresh, as of = then",
            measured=f"{_percent(found.fresh_equal, found.fresh_total)}, "
            f"{_percent(found.as_of_equal, found.as_of_total)}",
            met=found.fresh_equal == found.fresh_total and found.as_of_equal == found.as_of_total,
        )
        for backend, found in history.items()
    ]


def _ranked_pages(found: list[str]) -> list[str]:
    return list(dict.fromkeys(found))[:LIMIT]


def _scores(ranked: Sequence[list[str]], judged: Judged) -> tuple[float, float]:
    reciprocal, hits = [], []
    for pages, (_, relevant) in zip(ranked, judged, strict=True):
        rank = next((n for n, page in enumerate(pages, 1) if page in relevant), None)
        reciprocal.append(1 / rank if rank else 0.0)
        hits.append(1.0 if rank else 0.0)
    return statistics.fmean(reciprocal), statistics.fmean(hits)


def _arm(name: str, search: Search, judged: Judged) -> Arm:
    def measure() -> Sample:
        latencies, ranked = [], []
        for query, _ in judged:
            started = time.perf_counter()
            found = search(query)
            latencies.append(1000 * (time.perf_counter() - started))
            ranked.append(_ranked_pages(found))
        mrr, hit = _scores(ranked, judged)
        return {
            "mrr": mrr,
            "hit": hit,
            "p50_ms": percentile(latencies, 50),
            "p95_ms": percentile(latencies, 95),
        }

    return Arm(name, measure)


def _rotated_control(search: Search, judged: Judged) -> Control:
    ranked = [_ranked_pages(search(query)) for query, _ in judged]
    relevant = [rel for _, rel in judged]
    rotated = tuple(
        (query, rel) for (query, _), rel in zip(judged, relevant[1:] + relevant[:1], strict=True)
    )
    mrr, _ = _scores(ranked, rotated)
    return Control(
        name="tantivy pg17 results scored against judgments rotated by one query",
        expected=f"MRR@10 < {CONTROL_CEILING}",
        observed=f"MRR@10 {mrr:.3f}",
        held=mrr < CONTROL_CEILING,
    )


def _check_deterministic(results: Results) -> None:
    for arm, metrics in results.items():
        for metric in ("mrr", "hit"):
            if len(set(metrics[metric].samples)) > 1:
                raise InstrumentError(f"{arm}: {metric} changed between rounds")


QUALITY_COLUMNS = ("corpus", "system", "MRR@10", "MRR - tantivy", "Hit@10", "p50", "p95")


def quality_rows(
    results: Results, *, keep: Callable[[str, str], bool] = lambda _system, _corpus: True
) -> tuple[tuple[str, ...], ...]:
    """One row per ``"system | corpus"`` arm that ``keep(system, corpus)`` accepts, in the
    order of :data:`QUALITY_COLUMNS`, each scored against tantivy on the same corpus."""
    rows = []
    for name, stats in results.items():
        system, corpus = name.split(" | ")
        if not keep(system, corpus):
            continue
        tantivy = results[f"tantivy | {corpus}"]["mrr"].median
        rows.append(
            (
                corpus,
                system,
                f"{stats['mrr'].median:.3f}",
                f"{stats['mrr'].median - tantivy:+.3f}",
                f"{stats['hit'].median:.3f}",
                stats["p50_ms"].cell(" ms"),
                stats["p95_ms"].cell(" ms"),
            )
        )
    return tuple(rows)


def _quality_table(results: Results, rounds: int) -> Table:
    return Table(
        title="Retrieval quality and latency on the same passages",
        columns=QUALITY_COLUMNS,
        rows=quality_rows(
            results,
            keep=lambda system, corpus: (
                not ("as of" in system or "current" in system or corpus == "pg15.18")
            ),
        ),
        note=f"quality is deterministic (checked identical in every round); latency: median "
        f"of {rounds} interleaved rounds (low-high)",
    )


def _as_of_table(results: Results) -> Table:
    past = results["loom SQLite as of pg15.18 | pg15.18"]
    now = results["loom SQLite current | pg15.18"]
    tantivy = results["tantivy | pg15.18"]
    rows = [
        (
            name,
            f"{stats['mrr'].median:.3f}",
            f"{stats['hit'].median:.3f}",
            stats["p50_ms"].cell(" ms"),
            stats["p95_ms"].cell(" ms"),
        )
        for name, stats in (
            ("loom as of pg15.18 (after reconciling to pg17)", past),
            ("loom current (pg17) on the same queries", now),
            ("tantivy over the pg15.18 passages", tantivy),
        )
    ]
    ratio = past["p50_ms"].median / now["p50_ms"].median
    return Table(
        title="As-of retrieval scored against the pg15 judgments",
        columns=("arm", "MRR@10", "Hit@10", "p50", "p95"),
        rows=tuple(rows),
        note=f"as-of / current p50 latency: {ratio:.2f}x (target <= {AS_OF_TARGET:.0f}x)",
    )


def _targets(results: Results, *workloads: Workload) -> list[Target]:
    targets = []
    for workload in workloads:
        tantivy = results[f"tantivy | {workload.name}"]["mrr"].median
        for system in ("loom SQLite", "loom PostgreSQL"):
            name = f"{system} | {workload.name}"
            if name not in results:
                continue
            mrr = results[name]["mrr"].median
            targets.append(
                Target(
                    name=f"retrieval quality within {MRR_TOLERANCE} MRR of tantivy "
                    f"({system}, {workload.name})",
                    measured=f"{mrr:.3f} vs {tantivy:.3f} ({mrr - tantivy:+.3f})",
                    met=mrr >= tantivy - MRR_TOLERANCE,
                )
            )
    past = results["loom SQLite as of pg15.18 | pg15.18"]["p50_ms"].median
    now = results["loom SQLite current | pg15.18"]["p50_ms"].median
    targets.append(
        Target(
            name=f"as-of retrieval at most {AS_OF_TARGET:.0f}x the latency of a current search",
            measured=f"{past / now:.2f}x (p50)",
            met=past / now <= AS_OF_TARGET,
        )
    )
    return targets
