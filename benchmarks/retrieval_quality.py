"""Section "retrieval-quality": loom lexical, vector and hybrid next to tantivy, bm25s and
LangChain's EnsembleRetriever, with real embeddings (all-MiniLM-L6-v2).

Every system indexes the same passages (loom's default chunker, as in the peers-retrieval
section, whose workloads, peers and page-level scoring this section reuses) and answers the
same queries with 10 passages, mapped to pages and scored against the judgments: MRR@10 and
Hit@10. loom lexical is ``kb.search``; loom vector and hybrid are
``loom_knowledge.corpus.hybrid.HybridRetriever`` (reciprocal rank fusion of 50 BM25 and
50 cosine candidates, floor 0). LangChain: ``EnsembleRetriever`` (weights 0.5/0.5, its
weighted reciprocal rank fusion) over ``BM25Retriever`` (rank_bm25, the same word terms as
tantivy gets) and an ``InMemoryVectorStore`` of the same vectors (each plain passage given the
vector loom recorded for it, so the model embeds every passage once per run), 50 candidates
each. With ``LOOM_TEST_PG_URL`` (``scripts/with-postgres``), loom on PostgreSQL too: lexical,
vector and hybrid over the same passages and vectors (the cached model's, recorded in its log).

* Corpora: the Python FAQ questions against the FAQ pages plus further pages of the Python
  manual as distractors (each question's own heading removed, as the corpora's README asks),
  and a seeded sample of the PostgreSQL 17 back-of-book index terms against the first pages
  of the manual. Both are cut to a few hundred passages, because all-MiniLM-L6-v2 in numpy
  embeds only a few passages per second on this 2-core machine (ADR 0047).
* Latency is a query's search, its vector already computed: every round after the first would
  hit the embedder's cache anyway, so every round excludes it, for every system alike, and the
  model's own time per query is reported on its own.
* Ingest: ``kb.sync`` then ``HybridRetriever.index()`` with the model, the model's time
  reported separately. Rebuild: every registered projection dropped and rebuilt (what ``loom
  rebuild`` does), then a fresh retriever indexes the corpus; both must call the embedder 0
  times.
* Scale: vector and hybrid search latency over 100,000 passages on SQLite (5,000 with
  ``--quick``), windows of the manuals with random vectors: latency does not depend on what
  the vectors mean, and no real model embeds 100,000 passages in minutes here. That index is
  built in a second process while the model embeds on one core; no round is timed until it is
  done.

Negative control: the same corpora indexed by an embedder of random unit vectors (seeded by
the text) must score at least 0.15 MRR@10 lower in vector mode than the real model; a scorer
or an index that ignored the vectors would not.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from benchmarks.corpora import queries, windows
from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Progress,
    Results,
    SectionResult,
    Settings,
    Table,
    interleave,
    scratch_directory,
    spawned,
)
from benchmarks.peers_corpora import passages, terms
from benchmarks.peers_retrieval import (
    QUALITY_COLUMNS,
    Search,
    Workload,
    _arm,
    _bm25s,
    _check_deterministic,
    _faq_workload,
    _tantivy,
    _workload,
    quality_rows,
)
from benchmarks.peers_targets import Target, publish
from benchmarks.stores import fresh_postgres, fresh_sqlite
from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.hybrid import HybridRetriever, Mode, passage_text
from loom_memory import Embedder
from loom_runtime import Loom
from loom_runtime.projection import rebuild, registered_projections

LIMIT = 10
CANDIDATES = 50
MIN_SCORE = 0.0
"""The floor for both embedders: the control differs from the real arm in its vectors only."""
QUERIES = 200
PG_PAGES, QUICK_PG_PAGES = 60, 12
FAQ_DISTRACTORS, QUICK_FAQ_DISTRACTORS = 10, 0
QUICK_FAQ_PAGES = frozenset(
    {"faq/general.html", "faq/design.html", "faq/library.html", "faq/extending.html"}
)
"""--quick: four of the eight FAQ pages and the questions they answer (about 90 passages of
184): the model embeds every passage of both corpora on one core, most of a quick run's
time at the full FAQ. A quick run is a smoke run; its quality rows say how many passages."""
SCALE, QUICK_SCALE = 100_000, 5_000
SCALE_QUERIES = 100
SCALE_WINDOW = 600
"""Characters per synthetic passage: one passage per document under the default chunker."""
MAX_ROUNDS = 3
DIMENSION = 384
FAQ_MARGIN = 0.10
PG_TOLERANCE = 0.01
LATENCY_TARGET_MS = 10.0
CONTROL_MARGIN = 0.15

SYSTEMS = ("loom lexical", "loom vector", "loom hybrid", "tantivy", "bm25s", "LangChain ensemble")
CONTROL_SYSTEM = "loom vector, random vectors (control)"


@dataclass
class CachedEmbedder:
    """An embedder that embeds each text once per run and counts what it was asked.

    ``calls`` counts calls to :meth:`embed` (a rebuild must make none); ``seconds`` is the time
    spent in the wrapped model, so an ingest can be split into the model's share and loom's;
    ``texts`` counts the texts the model embedded, so the run can check that no system made it
    embed a passage a second time under another text.
    """

    inner: Embedder
    calls: int = 0
    seconds: float = 0.0
    texts: int = 0
    vectors: dict[str, list[float]] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The wrapped model's identity (the cache changes no vector)."""
        return self.inner.model

    @property
    def dimension(self) -> int:
        """The wrapped model's width."""
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts``, the model asked only for texts it has not embedded yet."""
        self.calls += 1
        missing = list(dict.fromkeys(text for text in texts if text not in self.vectors))
        if missing:
            started = time.perf_counter()
            self.vectors.update(zip(missing, self.inner.embed(missing), strict=True))
            self.seconds += time.perf_counter() - started
            self.texts += len(missing)
        return [self.vectors[text] for text in texts]


class RandomEmbedder:
    """Unit vectors drawn from a generator seeded by the text: the same text, the same vector,
    and no meaning at all (the negative control's embedder, and the scale test's)."""

    def __init__(self, dimension: int = DIMENSION) -> None:
        self._dimension = dimension

    @property
    def model(self) -> str:
        """``random-control/<dimension>``."""
        return f"random-control/{self._dimension}"

    @property
    def dimension(self) -> int:
        """The width given at construction."""
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One random unit vector per text."""
        found = []
        for text in texts:
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vector = np.random.default_rng(seed).standard_normal(self._dimension)
            found.append((vector / np.linalg.norm(vector)).tolist())
        return found


@dataclass(frozen=True, kw_only=True)
class Ingest:
    """One loom ingest with embeddings, the rebuild after it, and the model's query time."""

    passages: int
    seconds: float
    model_seconds: float
    texts_embedded: int
    rebuild_calls: int
    reembedded: int
    query_ms: float = 0.0
    queries: int = 0
    """Queries the model embedded (the median of their times is ``query_ms``)."""


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Index both corpora in every system, time the queries in interleaved rounds, then the
    control and the scale arms."""
    from benchmarks.minilm import MiniLMEmbedder

    quick = settings.quick
    rounds = min(settings.rounds, MAX_ROUNDS)
    pg = _workload("pg17", "qrels-pg17-index", QUERIES, QUICK_PG_PAGES if quick else PG_PAGES)
    faq = _faq_workload(QUICK_FAQ_DISTRACTORS if quick else FAQ_DISTRACTORS)
    if quick:
        faq = _restricted(faq, QUICK_FAQ_PAGES)
    model = CachedEmbedder(MiniLMEmbedder())
    noise = CachedEmbedder(RandomEmbedder())
    ingests: dict[str, Ingest] = {}
    size = QUICK_SCALE if quick else SCALE
    with scratch_directory() as scratch, spawned() as pool:
        progress(f"scale: indexing {size:,} passages in a second process, while the model embeds")
        building = pool.submit(build_scale, scratch / "scale.db", size)
        with ExitStack() as stack:
            arms: list[Arm] = []
            for workload in (faq, pg):
                progress(f"{workload.name}: {_count(workload)} passages, ingest with the model")
                retriever, ingest = stack.enter_context(_indexed(workload.pages, model))
                before = model.texts
                query_ms = _embed_queries(model, workload)
                ingests[workload.name] = replace(
                    ingest, query_ms=query_ms, queries=model.texts - before
                )
                progress(f"{workload.name}: the control, tantivy, bm25s, LangChain")
                control, _ = stack.enter_context(_indexed(workload.pages, noise))
                _embed_queries(noise, workload)
                searches: dict[str, Search] = {
                    "loom lexical": _search(retriever, "lexical"),
                    "loom vector": _search(retriever, "vector"),
                    "loom hybrid": _search(retriever, "hybrid"),
                    "tantivy": stack.enter_context(_tantivy(workload.pages)),
                    "bm25s": stack.enter_context(_bm25s(workload.pages)),
                    "LangChain ensemble": _langchain(workload.pages, retriever, model),
                    CONTROL_SYSTEM: _search(control, "vector"),
                }
                if settings.pg_url is not None:  # the same vectors, recorded in a PostgreSQL log
                    on_pg, _ = stack.enter_context(
                        _indexed(workload.pages, model, rebuilt=False, pg_url=settings.pg_url)
                    )
                    for mode in ("lexical", "vector", "hybrid"):
                        searches[f"loom PostgreSQL {mode}"] = _search(on_pg, mode)
                arms += [
                    _arm(f"{system} | {workload.name}", search, workload.judged)
                    for system, search in searches.items()
                ]
            progress("scale: waiting for the second process (nothing is timed while it runs)")
            built = building.result()
            results = interleave(arms, rounds=rounds, progress=progress)
        progress(f"scale: {size:,} passages ingested in {built.seconds:.0f} s")
        scale = _scale(scratch / "scale.db", built, size, rounds, progress)
    _check_embedded_once(model, ingests.values())
    _check_deterministic(results)
    mrr = {name: stats["mrr"].median for name, stats in results.items()}
    controls = tuple(
        control_result(
            workload.name,
            real=mrr[f"loom vector | {workload.name}"],
            random=mrr[f"{CONTROL_SYSTEM} | {workload.name}"],
        )
        for workload in (faq, pg)
    )
    publish(
        targets(
            mrr,
            faq=faq.name,
            pg=pg.name,
            scale_p50={
                mode: scale[f"loom {mode}"]["p50_ms"].median for mode in ("vector", "hybrid")
            },
            scale_size=size,
            ingests=ingests,
        )
    )
    return SectionResult(
        notes=(
            *(
                " ".join(part.removeprefix("* ").split())
                for paragraph in __doc__.split("\n\n")[1:]
                for part in paragraph.split("\n* ")
            ),
            f"Queries: {len(faq.judged)} FAQ questions over {_count(faq)} passages; "
            f"{len(pg.judged)} index terms sampled from qrels-pg17-index over {_count(pg)} "
            "passages. Embedder: all-MiniLM-L6-v2 computed in numpy (benchmarks/minilm.py, "
            "BLAS on one thread), each text embedded once per run and shared by every system.",
        ),
        tables=(
            _quality_table(results, rounds),
            _ingest_table(ingests),
            _scale_table(scale, built, rounds),
        ),
        controls=controls,
    )


def _restricted(workload: Workload, pages: frozenset[str]) -> Workload:
    """``workload`` on ``pages`` only, each question judged on the kept pages it names (a
    question none of them answers is dropped)."""
    judged = tuple((query, rel & pages) for query, rel in workload.judged if rel & pages)
    kept = tuple(doc for doc in workload.pages if doc.id in pages)
    if len(kept) != len(pages):
        raise InstrumentError(f"{workload.name}: pages missing from the corpus: {sorted(pages)}")
    return Workload(workload.name, kept, judged)


def _count(workload: Workload) -> int:
    return sum(len(passages(doc)) for doc in workload.pages)


@contextmanager
def _indexed(
    pages: Sequence[Doc],
    embedder: CachedEmbedder,
    *,
    rebuilt: bool = True,
    pg_url: str | None = None,
) -> Iterator[tuple[HybridRetriever, Ingest]]:
    """A knowledge base of ``pages`` indexed with ``embedder`` then (``rebuilt``) rebuilt from
    the log as ``loom rebuild`` does, a fresh retriever over it, and what that cost; on a new
    SQLite file, or a new database on the PostgreSQL server ``pg_url``."""
    with _database(pg_url) as url, Loom(url) as loom:
        kb = open_knowledge_base(loom, "quality")
        model_before = embedder.seconds
        started = time.perf_counter()
        kb.sync(pages, source="manual")
        embedded = HybridRetriever(
            kb, embedder=embedder, min_score=MIN_SCORE, candidates=CANDIDATES
        ).index()
        seconds = time.perf_counter() - started
        calls = embedder.calls
        for projection in registered_projections(loom.log) if rebuilt else ():
            rebuild(loom.log, projection)
        retriever = HybridRetriever(
            kb, embedder=embedder, min_score=MIN_SCORE, candidates=CANDIDATES
        )
        reembedded = retriever.index()
        yield (
            retriever,
            Ingest(
                passages=len(kb.passages()),
                seconds=seconds,
                model_seconds=embedder.seconds - model_before,
                texts_embedded=embedded,
                rebuild_calls=embedder.calls - calls,
                reembedded=reembedded,
            ),
        )


@contextmanager
def _database(pg_url: str | None) -> Iterator[str]:
    """A loom URL on a new SQLite file, or on a new database of the server ``pg_url``."""
    if pg_url is None:
        with fresh_sqlite() as (url, _):
            yield url
    else:
        with fresh_postgres(pg_url) as url:
            yield url


def _embed_queries(embedder: CachedEmbedder, workload: Workload) -> float:
    """Embed every query now, outside the timed rounds; the model's median ms per query."""
    times = []
    for query, _ in workload.judged:
        before = embedder.seconds
        embedder.embed([query])
        times.append(1000 * (embedder.seconds - before))
    return statistics.median(times)


def _search(retriever: HybridRetriever, mode: Mode) -> Search:
    def search(query: str) -> list[str]:
        return [p.doc_id for p in retriever.search(query, mode=mode, limit=LIMIT)]

    return search


def _check_embedded_once(model: CachedEmbedder, ingests: Iterable[Ingest]) -> None:
    """Every text the model embedded is a passage loom indexed or a query: no system (the
    LangChain arm above all) made it embed a passage again under a text of its own."""
    expected = sum(ingest.texts_embedded + ingest.queries for ingest in ingests)
    if model.texts != expected:
        raise InstrumentError(
            f"the model embedded {model.texts:,} texts, not the {expected:,} passages and "
            "queries of loom's ingests: some system embedded the corpus again"
        )


def _langchain(
    pages: Sequence[Doc], retriever: HybridRetriever, embedder: CachedEmbedder
) -> Search:
    """LangChain's hybrid recipe: BM25 and a vector store of the same vectors, fused.

    Its documents are the plain passage texts, as tantivy and bm25s get them; each one's vector
    is the one loom recorded for that passage (loom embeds the passage with its title, the
    text its lexical index searches), so the two vector rankings differ in nothing but the
    code that ranks, and the model embeds every passage once per run.
    """
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    indexed = {(p.doc_id, p.index): p for p in retriever.kb.passages()}
    texts, owners, embedded = [], [], {}
    for doc in pages:
        for number, text in enumerate(passages(doc)):
            passage = indexed.get((doc.id, number))
            if passage is None or passage.text != text:
                raise InstrumentError(f"loom indexed {doc.id}'s passage {number} otherwise")
            texts.append(text)
            owners.append({"page": doc.id})
            embedded[len(texts) - 1] = passage_text(passage)

    class Same(Embeddings):
        def embed_documents(self, given: list[str]) -> list[list[float]]:
            if given != texts:
                raise InstrumentError("LangChain asked for vectors of other passages")
            return embedder.embed([embedded[n] for n in range(len(texts))])

        def embed_query(self, text: str) -> list[float]:
            return embedder.embed([text])[0]

    lexical = BM25Retriever.from_texts(texts, metadatas=owners, preprocess_func=terms)
    lexical.k = CANDIDATES
    store = InMemoryVectorStore(Same())
    store.add_texts(texts, metadatas=owners)
    dense = store.as_retriever(search_kwargs={"k": CANDIDATES})
    ensemble = EnsembleRetriever(retrievers=[lexical, dense], weights=[0.5, 0.5])

    def search(query: str) -> list[str]:
        return [doc.metadata["page"] for doc in ensemble.invoke(query)[:LIMIT]]

    return search


@dataclass(frozen=True, kw_only=True)
class Built:
    """What :func:`build_scale` indexed: the passages, the seconds it took, the queries."""

    passages: int
    seconds: float
    queries: tuple[str, ...]


def build_scale(path: Path, size: int) -> Built:
    """Index ``size`` one-passage documents with random vectors into a SQLite loom at ``path``.

    Run in a second process while the model embeds the quality corpora: the model runs BLAS on
    one thread, so on an otherwise quiet 2-core machine the second core would idle through
    minutes of it, and this index takes minutes to build. Nothing is timed until it is done.
    """
    texts = [window.text for window in windows(SCALE_WINDOW, size)]
    pages = [Doc(id=f"w{n}", text=text) for n, text in enumerate(texts)]
    embedder = CachedEmbedder(RandomEmbedder())
    with Loom(f"sqlite:///{path}") as loom:
        kb = open_knowledge_base(loom, "quality")
        started = time.perf_counter()
        kb.sync(pages, source="manual")
        HybridRetriever(kb, embedder=embedder, min_score=MIN_SCORE, candidates=CANDIDATES).index()
        seconds = time.perf_counter() - started
        found = len(kb.passages())
    return Built(passages=found, seconds=seconds, queries=tuple(queries(texts, SCALE_QUERIES)))


def _scale(path: Path, built: Built, size: int, rounds: int, progress: Progress) -> Results:
    """Search latency of every mode over the ``size`` passages :func:`build_scale` indexed
    (random vectors), opened here as a fresh process would open it: every vector from the
    log."""
    embedder = CachedEmbedder(RandomEmbedder())
    with Loom(f"sqlite:///{path}") as loom:
        kb = open_knowledge_base(loom, "quality")
        retriever = HybridRetriever(
            kb, embedder=embedder, min_score=MIN_SCORE, candidates=CANDIDATES
        )
        embedded, found = retriever.index(), len(kb.passages())
        if embedded or found != size or built.passages != size:
            raise InstrumentError(
                f"the scale index holds {found:,} passages ({built.passages:,} when built), "
                f"{embedded:,} of them without a recorded vector, not {size:,}"
            )
        unjudged = tuple((query, frozenset[str]()) for query in built.queries)  # timed only
        embedder.embed(list(built.queries))
        arms = [
            _arm(f"loom {mode}", _search(retriever, mode), unjudged)
            for mode in ("lexical", "vector", "hybrid")
        ]
        progress(f"scale: {size:,} passages, latency rounds")
        return interleave(arms, rounds=rounds, progress=progress)


def control_result(corpus: str, *, real: float, random: float) -> Control:
    """The negative control: random vectors must lose at least ``CONTROL_MARGIN`` MRR@10."""
    return Control(
        name=f"vector mode with random vectors instead of the model ({corpus})",
        expected=f"MRR@10 at least {CONTROL_MARGIN} below the model's {real:.3f}",
        observed=f"MRR@10 {random:.3f} ({random - real:+.3f})",
        held=real - random >= CONTROL_MARGIN,
    )


def targets(
    mrr: dict[str, float],
    *,
    faq: str,
    pg: str,
    scale_p50: dict[str, float],
    scale_size: int,
    ingests: dict[str, Ingest],
) -> list[Target]:
    """The issue's targets, each met or missed, from this run's medians."""
    hybrid, tantivy = mrr[f"loom hybrid | {faq}"], mrr[f"tantivy | {faq}"]
    pg_hybrid, pg_lexical = mrr[f"loom hybrid | {pg}"], mrr[f"loom lexical | {pg}"]
    found = [
        Target(
            name=f"hybrid MRR@10 at least tantivy + {FAQ_MARGIN} ({faq})",
            measured=f"{hybrid:.3f} vs {tantivy:.3f} ({hybrid - tantivy:+.3f})",
            met=hybrid >= tantivy + FAQ_MARGIN,
        ),
        Target(
            name=f"hybrid MRR@10 no worse than lexical - {PG_TOLERANCE} ({pg})",
            measured=f"{pg_hybrid:.3f} vs {pg_lexical:.3f} ({pg_hybrid - pg_lexical:+.3f})",
            met=pg_hybrid >= pg_lexical - PG_TOLERANCE,
        ),
    ]
    found += [
        Target(
            name=f"{mode} search p50 at {SCALE:,} passages at most {LATENCY_TARGET_MS:.0f} ms "
            "(SQLite)",
            measured=f"{p50:.2f} ms at {scale_size:,} passages",
            met=p50 <= LATENCY_TARGET_MS and scale_size >= SCALE,
        )
        for mode, p50 in scale_p50.items()
    ]
    for corpus, ingest in ingests.items():
        found += [
            Target(
                name=f"ingest with embeddings bounded by the embedder ({corpus})",
                measured=f"model {ingest.model_seconds:.1f} s of {ingest.seconds:.1f} s",
                met=ingest.model_seconds >= ingest.seconds / 2,
            ),
            Target(
                name=f"rebuild calls the embedder 0 times ({corpus})",
                measured=f"{ingest.rebuild_calls} calls, {ingest.reembedded} texts re-embedded",
                met=ingest.rebuild_calls == 0 and ingest.reembedded == 0,
            ),
        ]
    return found


def _quality_table(results: Results, rounds: int) -> Table:
    return Table(
        title="Lexical, vector and hybrid retrieval on the same passages and vectors",
        columns=QUALITY_COLUMNS,
        rows=quality_rows(results),
        note=f"quality is deterministic (checked identical in every round); latency excludes "
        f"the query's embedding: median of {rounds} interleaved rounds (low-high)",
    )


def _ingest_table(ingests: dict[str, Ingest]) -> Table:
    return Table(
        title="Ingest with embeddings, and the rebuild after it (SQLite)",
        columns=(
            "corpus",
            "passages",
            "texts embedded",
            "ingest",
            "of which the model",
            "model per query",
            "rebuild: embedder calls",
        ),
        rows=tuple(
            (
                corpus,
                f"{ingest.passages:,}",
                f"{ingest.texts_embedded:,}",
                f"{ingest.seconds:.1f} s",
                f"{ingest.model_seconds:.1f} s",
                f"{ingest.query_ms:.1f} ms",
                f"{ingest.rebuild_calls} (texts re-embedded: {ingest.reembedded})",
            )
            for corpus, ingest in ingests.items()
        ),
        note="ingest: kb.sync then HybridRetriever.index(), measured once (the model is too "
        "slow to repeat it); rebuild: every registered projection, then a fresh retriever's "
        "index()",
    )


def _scale_table(scale: Results, built: Built, rounds: int) -> Table:
    size = built.passages
    return Table(
        title=f"Search latency at {size:,} passages (SQLite, random vectors, width {DIMENSION})",
        columns=("mode", "p50", "p95"),
        rows=tuple(
            (name, stats["p50_ms"].cell(" ms"), stats["p95_ms"].cell(" ms"))
            for name, stats in scale.items()
        ),
        note=f"index built in {built.seconds:.0f} s (kb.sync, then the vectors recorded) in a "
        "second process while the model embedded the quality corpora; "
        f"{SCALE_QUERIES} seeded queries, each vector computed before the rounds; median "
        f"of {rounds} interleaved rounds (low-high); target: vector and hybrid p50 <= "
        f"{LATENCY_TARGET_MS:.0f} ms at {SCALE:,}",
    )
