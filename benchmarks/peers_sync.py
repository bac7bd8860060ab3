"""Section "peers-sync": corpus sync vs LangChain and LlamaIndex.

One workload on the real PostgreSQL manual, the same for every arm and run from scratch each
round: ingest pg15.18 (1,167 pages), reconcile to pg15.20 (a minor release), reconcile to
pg17 (a major one: pages edited, added, dropped), then re-sync pg17 unchanged.

* **loom**: ``kb.sync(pages, source=...)`` on a ``Loom`` with its defaults (a SQLite file,
  WAL, ``synchronous=NORMAL``); writes are events appended to the log.
* **LangChain**: ``index(chunks, SQLRecordManager(sqlite file), store, cleanup="full",
  source_id_key="source")``, the documented reconcile; writes are record-manager rows
  (INSERT/UPDATE/DELETE row counts) plus store rows.
* **LlamaIndex**: ``IngestionPipeline(transformations=[chunker], docstore=SimpleDocumentStore(),
  vector_store=store, docstore_strategy=UPSERTS_AND_DELETE)``, then ``pipeline.persist(dir)``
  (its docstore is in memory; persisting is how its docs make it durable); writes are docstore
  key-value entries plus store rows.

Equivalent keyword store: both peers write passages to :class:`KeywordTable`, a SQLite FTS5
table like loom's own index; the chunks are cut by loom's chunker for every arm, and the
LlamaIndex chunker attaches a one-float constant embedding (its pipeline hands only embedded
nodes to a vector store). No model runs anywhere.

Correctness after every step: the documents present must equal the source set, and stale
probes must find nothing. A probe is three consecutive words of a page that an earlier
version had and the current version has nowhere (rarest first, one per changed or dropped
page, at most 100 a step); a leak is a probe whose search (limit 10) returns a passage
containing those words.

Negative controls: loom re-syncing pg17 with every page's text changed by two characters (the
fingerprint defeated) must write an event per page and take far longer than the unchanged
re-sync; the same stale probes run against a keyword store that never applied the reconcile
must find most of them (else the probes are blind and "0 leaks" proves nothing).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
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
    scratch_directory,
)
from benchmarks.peers_corpora import KeywordTable, docs, passages, terms
from benchmarks.peers_targets import Target, publish
from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom

STEPS = (
    ("ingest pg15.18", "pg15.18"),
    ("reconcile to pg15.20", "pg15.20"),
    ("reconcile to pg17", "pg17"),
    ("re-sync pg17 unchanged", "pg17"),
)
SOURCE = "postgresql-manual"
MAX_ROUNDS = 3
QUICK_PAGES = 80
"""--quick: the first pages of each version only (same ids across versions)."""
PROBES = 100
PROBE_SEED = 7
LIMIT = 10
RESYNC_TARGET = 20.0
DEFEATED_FACTOR = 5.0
ARMS = ("loom", "LangChain index()", "LlamaIndex pipeline")

Syncer = Callable[[Sequence[Doc]], int]
"""Reconcile the store to these pages; return the rows/events written."""
Searcher = Callable[[str], list[str]]
Present = Callable[[], set[str]]


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Every arm runs the whole workload once per round; correctness is checked every step."""
    versions = _versions(settings.quick)
    rounds = min(settings.rounds, MAX_ROUNDS)
    progress("choosing stale probes")
    probes = {index: _probes(versions, index) for index in range(len(STEPS))}
    arms = [
        Arm("loom", lambda: _workload(_loom, versions, probes)),
        Arm("LangChain index()", lambda: _workload(_langchain, versions, probes)),
        Arm("LlamaIndex pipeline", lambda: _workload(_llamaindex, versions, probes)),
    ]
    results = interleave(arms, rounds=rounds, progress=progress)
    _check_identical(results)
    publish(_targets(results, probes))
    progress("negative controls")
    pages = len(versions["pg17"])
    return SectionResult(
        notes=(
            __doc__.split("\n\n", 2)[1].replace("\n", " "),
            "Arms: loom `kb.sync` (SQLite, WAL, synchronous=NORMAL); LangChain `index()` with "
            '`SQLRecordManager` on a SQLite file and `cleanup="full"` (record manager: '
            "SQLAlchemy's SQLite defaults, rollback journal, synchronous=FULL); LlamaIndex "
            "`IngestionPipeline` with `SimpleDocumentStore`, `UPSERTS_AND_DELETE` and "
            "`persist()` after each run (a JSON file rewritten). Both peers index passages in "
            "the same SQLite FTS5 keyword store (WAL, synchronous=FULL), one transaction per "
            "call; chunks cut by loom's chunker for all; no embeddings (LlamaIndex nodes carry "
            "a constant one-float vector so its pipeline passes them to the store).",
            f"{pages:,} pages in pg17; {rounds} interleaved rounds (capped at {MAX_ROUNDS}: a "
            "round runs the four steps for every arm from scratch). Stale probes per step: "
            + ", ".join(f"{STEPS[i][0]} {len(p)}" for i, p in probes.items() if i),
        ),
        tables=(_figures_table(results, rounds), _correctness_table(results, probes)),
        controls=_controls(versions, probes),
    )


def _versions(quick: bool) -> dict[str, tuple[Doc, ...]]:
    versions = {version: docs(version) for _, version in STEPS}
    if quick:
        keep = {doc.id for doc in versions["pg15.18"][:QUICK_PAGES]}
        versions = {v: tuple(d for d in pages if d.id in keep) for v, pages in versions.items()}
    return versions


def _workload(
    open_arm: Callable[[Path], tuple[Syncer, Searcher, Present, Callable[[], None]]],
    versions: dict[str, tuple[Doc, ...]],
    probes: dict[int, list[str]],
) -> Sample:
    sample: dict[str, float] = {}
    with scratch_directory() as directory:
        sync, search, present, close = open_arm(directory)
        try:
            for index, (_, version) in enumerate(STEPS):
                pages = versions[version]
                started = time.perf_counter()
                written = sync(pages)
                sample[f"{index}_ms"] = 1000 * (time.perf_counter() - started)
                sample[f"{index}_writes"] = float(written)
                sample[f"{index}_docs_ok"] = float(present() == {doc.id for doc in pages})
                sample[f"{index}_leaks"] = float(_leaks(search, probes[index]))
        finally:
            close()
    return sample


def _leaks(search: Searcher, probes: list[str]) -> int:
    found = 0
    for probe in probes:
        needle = f" {probe} "
        if any(needle in f" {' '.join(terms(text))} " for text in search(probe)):
            found += 1
    return found


def _loom(directory: Path) -> tuple[Syncer, Searcher, Present, Callable[[], None]]:
    loom = Loom(f"sqlite:///{directory / 'loom.db'}")
    kb = open_knowledge_base(loom, "manual")

    def sync(pages: Sequence[Doc]) -> int:
        before = loom.log.position
        kb.sync(pages, source=SOURCE, allow_mass_delete=True)
        return loom.log.position - before

    def search(query: str) -> list[str]:
        return [passage.text for passage in kb.search(query, limit=LIMIT)]

    def present() -> set[str]:
        return {record.id for record in kb.list_docs()}

    return sync, search, present, loom.close


def _langchain(directory: Path) -> tuple[Syncer, Searcher, Present, Callable[[], None]]:
    from langchain_classic.indexes import SQLRecordManager
    from langchain_core.documents import Document
    from langchain_core.indexing import index
    from sqlalchemy import event

    table = KeywordTable(directory / "store.db")
    store = _langchain_store(table)
    manager = SQLRecordManager("manual", db_url=f"sqlite:///{directory / 'records.db'}")
    manager.create_schema()
    counted = [0]

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            counted[0] += max(cursor.rowcount, 0)

    event.listen(manager.engine, "after_cursor_execute", count)

    def sync(pages: Sequence[Doc]) -> int:
        before = counted[0] + table.rows_written
        chunks = [
            Document(page_content=text, metadata={"source": doc.id})
            for doc in pages
            for text in passages(doc)
        ]
        index(chunks, manager, store, cleanup="full", source_id_key="source", key_encoder="sha256")
        return counted[0] + table.rows_written - before

    def search(query: str) -> list[str]:
        return [text for _, text in table.search(query, LIMIT)]

    def close() -> None:
        manager.engine.dispose()
        table.close()

    return sync, search, table.sources, close


@cache
def _langchain_store_class() -> type:
    from langchain_core.documents import Document
    from langchain_core.vectorstores import VectorStore

    class KeywordVectorStore(VectorStore):
        """LangChain's VectorStore interface over a KeywordTable (no embeddings)."""

        def __init__(self, table: KeywordTable) -> None:
            self.table = table

        def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
            ids = list(kwargs["ids"])
            self.table.add(
                [
                    (i, str(d.metadata["source"]), d.page_content)
                    for i, d in zip(ids, documents, strict=True)
                ]
            )
            return ids

        def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
            self.table.delete(ids or [])
            return True

        def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
            return [
                Document(page_content=text, metadata={"source": source})
                for source, text in self.table.search(query, k)
            ]

        @classmethod
        def from_texts(cls, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return KeywordVectorStore


def _langchain_store(table: KeywordTable) -> Any:
    return _langchain_store_class()(table)


def _llamaindex(directory: Path) -> tuple[Syncer, Searcher, Present, Callable[[], None]]:
    from llama_index.core import Document
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.storage.docstore import SimpleDocumentStore

    classes = _llamaindex_classes()
    table = KeywordTable(directory / "store.db")
    kvstore = classes["kv"]()
    pipeline = IngestionPipeline(
        transformations=[classes["chunker"]()],
        docstore=SimpleDocumentStore(simple_kvstore=kvstore),
        vector_store=classes["store"](table=table),
        docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE,
    )
    persist = str(directory / "pipeline_storage")

    def sync(pages: Sequence[Doc]) -> int:
        before = kvstore.writes + table.rows_written
        documents = [
            Document(id_=doc.id, text=doc.text, metadata={"title": doc.title or ""})
            for doc in pages
        ]
        pipeline.run(documents=documents)
        pipeline.persist(persist)
        return kvstore.writes + table.rows_written - before

    def search(query: str) -> list[str]:
        return [text for _, text in table.search(query, LIMIT)]

    return sync, search, table.sources, table.close


@cache
def _llamaindex_classes() -> dict[str, type]:
    from llama_index.core.schema import (
        BaseNode,
        NodeRelationship,
        TextNode,
        TransformComponent,
    )
    from llama_index.core.storage.kvstore import SimpleKVStore
    from llama_index.core.vector_stores.types import (
        BasePydanticVectorStore,
        VectorStoreQuery,
        VectorStoreQueryResult,
    )

    class LoomChunker(TransformComponent):
        """loom's chunker as a LlamaIndex transformation; a constant one-float embedding."""

        def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
            out: list[BaseNode] = []
            for node in nodes:
                doc = Doc(id=node.node_id, text=node.get_content())
                for number, text in enumerate(passages(doc)):
                    out.append(
                        TextNode(
                            id_=f"{node.node_id}#{number}",
                            text=text,
                            embedding=[0.0],
                            relationships={NodeRelationship.SOURCE: node.as_related_node_info()},
                        )
                    )
            return out

    class KeywordVectorStore(BasePydanticVectorStore):
        """LlamaIndex's vector-store interface over a KeywordTable (the embedding is ignored)."""

        stores_text: bool = True
        table: Any

        @property
        def client(self) -> Any:
            return self.table

        def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
            self.table.add(
                [(n.node_id, str(n.ref_doc_id), n.get_content()) for n in nodes]  # type: ignore[union-attr]
            )
            return [n.node_id for n in nodes]

        def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
            self.table.delete_source(ref_doc_id)

        def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
            raise NotImplementedError

    class CountingKVStore(SimpleKVStore):
        """The docstore's default key-value store, counting the entries written and deleted."""

        writes: int = 0

        def put(self, key: str, val: dict[str, Any], collection: str = "data") -> None:
            self.writes += 1
            super().put(key, val, collection)

        def delete(self, key: str, collection: str = "data") -> bool:
            self.writes += 1
            return super().delete(key, collection)

    return {"chunker": LoomChunker, "store": KeywordVectorStore, "kv": CountingKVStore}


def _probes(versions: dict[str, tuple[Doc, ...]], step: int) -> list[str]:
    """Three-word phrases earlier versions had that the version of ``step`` has nowhere."""
    current = versions[STEPS[step][1]]
    earlier = [STEPS[i][1] for i in range(step) if STEPS[i][1] != STEPS[step][1]]
    if not earlier:
        return []
    now = {doc.id: doc.text for doc in current}
    present: set[tuple[str, ...]] = set()
    frequency: Counter[str] = Counter()
    for doc in current:
        words = terms(doc.text)
        present.update(zip(words, words[1:], words[2:], strict=False))
        frequency.update(set(words))
    chosen: dict[str, str] = {}
    for version in earlier:
        for doc in versions[version]:
            if doc.id in chosen or now.get(doc.id) == doc.text:
                continue
            words = terms(doc.text)
            stale = [
                shingle
                for shingle in zip(words, words[1:], words[2:], strict=False)
                if shingle not in present
            ]
            if stale:
                rarest = min(stale, key=lambda s: (sum(frequency[w] for w in s), s))
                chosen[doc.id] = " ".join(rarest)
    probes = sorted(chosen.values())
    random.Random(PROBE_SEED).shuffle(probes)
    return sorted(probes[:PROBES])


def _check_identical(results: Results) -> None:
    """Correctness figures are facts, not timings: every round must agree."""
    for arm, metrics in results.items():
        for name, stats in metrics.items():
            if name.endswith(("_docs_ok", "_leaks")) and len(set(stats.samples)) > 1:
                raise InstrumentError(f"{arm}: {name} differed between rounds: {stats.samples}")


def _figures_table(results: Results, rounds: int) -> Table:
    rows = []
    for index, (step, _) in enumerate(STEPS):
        loom = results["loom"]
        for arm in ARMS:
            stats = results[arm]
            time_ms = stats[f"{index}_ms"]
            ratio = time_ms.median / loom[f"{index}_ms"].median
            rows.append(
                (
                    step,
                    arm,
                    time_ms.cell(" ms"),
                    "1.00x" if arm == "loom" else f"{ratio:.1f}x",
                    f"{stats[f'{index}_writes'].median:,.0f}",
                )
            )
    return Table(
        title="Sync steps: time, and rows or events written",
        columns=("step", "arm", "time", "time / loom's", "rows/events written"),
        rows=tuple(rows),
        note=f"median of {rounds} interleaved rounds (low-high); loom writes are log events, "
        "LangChain's record-manager + store rows, LlamaIndex's docstore entries + store rows",
    )


def _correctness_table(results: Results, probes: dict[int, list[str]]) -> Table:
    rows = []
    for index, (step, _) in enumerate(STEPS):
        for arm in ARMS:
            stats = results[arm]
            ok = stats[f"{index}_docs_ok"].median == 1.0
            leaks = stats[f"{index}_leaks"].median
            rows.append(
                (
                    step,
                    arm,
                    "yes" if ok else "NO",
                    f"{leaks:.0f} of {len(probes[index])}" if probes[index] else "n/a",
                )
            )
    return Table(
        title="Correctness after every step (identical in every round)",
        columns=("step", "arm", "documents present == source set", "stale leaks"),
        rows=tuple(rows),
    )


def _targets(results: Results, probes: dict[int, list[str]]) -> list[Target]:
    last = len(STEPS) - 1
    loom = results["loom"]
    langchain = results["LangChain index()"]
    ratio = langchain[f"{last}_ms"].median / loom[f"{last}_ms"].median
    events = loom[f"{last}_writes"].median
    leaks = [loom[f"{i}_leaks"].median for i in range(1, len(STEPS))]
    probed = sum(len(probes[i]) for i in range(1, len(STEPS)))
    return [
        Target(
            name=f"unchanged re-sync of the PostgreSQL manual at least {RESYNC_TARGET:.0f}x "
            "faster than LangChain index(), one event written",
            measured=f"{ratio:.1f}x, {events:.0f} event(s)",
            met=ratio >= RESYNC_TARGET and events == 1,
        ),
        Target(
            name="zero stale leaks after every reconcile (loom)",
            measured=f"{sum(leaks):.0f} leaks over {probed} probes in {len(leaks)} steps",
            met=sum(leaks) == 0 and all(loom[f"{i}_docs_ok"].median == 1 for i in range(4)),
        ),
    ]


def _controls(
    versions: dict[str, tuple[Doc, ...]], probes: dict[int, list[str]]
) -> tuple[Control, ...]:
    pages = versions["pg17"]
    with scratch_directory() as directory:
        sync, _, _, close = _loom(directory)
        try:
            sync(pages)
            started = time.perf_counter()
            unchanged_events = sync(pages)
            unchanged = time.perf_counter() - started
            defeated_pages = [
                Doc(id=doc.id, text=doc.text + " x", title=doc.title) for doc in pages
            ]
            started = time.perf_counter()
            defeated_events = sync(defeated_pages)
            defeated = time.perf_counter() - started
        finally:
            close()
    factor = defeated / unchanged
    step = len(STEPS) - 2  # the reconcile to pg17
    with scratch_directory() as directory:
        table = KeywordTable(directory / "never-reconciled.db")
        try:
            table.add(
                [
                    (f"{doc.id}#{n}", doc.id, text)
                    for doc in versions["pg15.18"]
                    for n, text in enumerate(passages(doc))
                ]
            )
            found = _leaks(lambda q: [text for _, text in table.search(q, LIMIT)], probes[step])
        finally:
            table.close()
    total = len(probes[step])
    return (
        Control(
            name=f"loom re-sync of pg17 with every page's fingerprint defeated ({len(pages):,} "
            "pages)",
            expected=f">= {len(pages):,} events and >= {DEFEATED_FACTOR:.0f}x the unchanged time",
            observed=f"{defeated_events:,} events, {factor:.1f}x (unchanged: "
            f"{unchanged_events} event)",
            held=defeated_events >= len(pages) and factor >= DEFEATED_FACTOR,
        ),
        Control(
            name="stale probes of the pg17 step against a store still holding pg15.18",
            expected=f"> half of {total} probes leak",
            observed=f"{found} leak",
            held=found > total / 2,
        ),
    )
