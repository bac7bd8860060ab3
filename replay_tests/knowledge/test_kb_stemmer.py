"""A knowledge scope created with a stemmer: recorded in the log, kept apart, replayed alike.

The rule that must fire: "indexes" and "indexing" share the English stem "index", so a
stemmed scope finds a passage about indexing for "indexes" where a plain one finds nothing.
Everything else (rebuild, as-of, a fresh corpus, a replay with the corpus gone, the other
backend) must give the answer the live stemmed index gave.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect

from loom_knowledge import Doc, KnowledgeBase, KnowledgeBaseOptionsError, open_knowledge_base
from loom_knowledge.corpus.corpus_index import stemmed_prefix
from loom_knowledge.corpus.events import DocumentWritten, TokenizerChosen
from loom_knowledge.corpus.keys import stream_name
from loom_knowledge.corpus.knowledge_base import corpus_index, drop_corpus
from loom_knowledge.corpus.retrieval import Mode
from loom_knowledge.errors import InvalidOptionError
from loom_memory import HashingEmbedder
from loom_runtime import Loom, MissingExtraError, stream_id
from replay_tests.conftest import PG_URL, fresh_postgres_database
from replay_tests.knowledge.test_retrieval_modes import (
    DOCS,
    FLOOR,
    HISTORY,
    QUESTIONS,
    TWIN,
    UnavailableEmbedder,
    _id,
    _seen,
    _twins,
)

STRICT_FLOOR = 0.95
"""A floor no passage here reaches, so the vector half of hybrid finds nothing and hybrid's
answer is its lexical half: whether the stem matched decides it (the hashing embedder's
trigrams would otherwise find "indexing" for "indexes" in a plain scope too)."""

INDEXING = Doc(id="idx", text="Indexing a large table takes a lock.", meta={"team": "dba"})
STEMMED_QUESTIONS = ["indexes", "locking tables", "streamed replica", "restarting stalled job"]
"""Each matches a passage only through a stem (the passages say indexing, lock, streams,
replicas, restart, stall, jobs)."""


def _open(
    loom: Loom,
    scope: str = "stemmed",
    *,
    embedder: Any = None,
    min_score: float = STRICT_FLOOR,
    **options: Any,
) -> KnowledgeBase:
    """A scope that answers every mode: the hashing embedder (or ``embedder``) at a floor."""
    chosen = HashingEmbedder() if embedder is None else embedder
    return open_knowledge_base(loom, scope, embedder=chosen, min_score=min_score, **options)


def _ids(kb: KnowledgeBase, question: str, mode: Mode) -> list[str]:
    return [p.doc_id for p in kb.search(question, mode=mode)]


def _chosen(loom: Loom, scope: str) -> list[TokenizerChosen]:
    """The tokenizer events of ``scope``'s stream."""
    events = loom.log.events(stream_id(stream_name(scope)))
    return [event for event in events if isinstance(event, TokenizerChosen)]


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_a_stemmed_scope_finds_another_inflection_a_plain_one_does_not(
    loom: Loom, mode: Mode
) -> None:
    """ "indexes" finds the passage about indexing only where the scope stems."""
    stemmed = _open(loom, stemmer="english")
    plain = _open(loom, "plain")
    for kb in (stemmed, plain):
        kb.sync([*DOCS, INDEXING], source="test")
    assert _ids(stemmed, "indexes", mode) == ["idx"]
    assert _ids(plain, "indexes", mode) == []
    assert _ids(plain, "indexing", mode) == ["idx"]  # the control: the word itself matches
    assert (stemmed.stemmer, plain.stemmer) == ("english", None)


def test_the_choice_is_the_first_event_of_the_stream_written_once(loom: Loom) -> None:
    """Recorded with the first write, in its append, and never again; a plain scope has none."""
    kb = open_knowledge_base(loom, "stemmed", stemmer="english")
    assert _chosen(loom, "stemmed") == []  # opening writes nothing
    kb.sync(DOCS, source="test")
    kb.put_doc(INDEXING, source="test")
    kb.remove_doc("lunch", source="test")
    kb.sync(DOCS, source="test")
    [chosen] = _chosen(loom, "stemmed")
    assert (chosen.originator_version, chosen.scope, chosen.stemmer) == (1, "stemmed", "english")
    open_knowledge_base(loom, "plain").sync(DOCS, source="test")
    assert _chosen(loom, "plain") == []


def test_a_fresh_process_reads_the_stemmer_from_the_log(db_url: str) -> None:
    """Opened without stemmer=, an existing scope is what its log says; asked for another (or
    for none), it is refused naming what it was created with; a plain scope refuses a stemmer."""
    with Loom(db_url) as loom:
        open_knowledge_base(loom, "stemmed", stemmer="english").sync([INDEXING])
        open_knowledge_base(loom, "plain").sync([INDEXING])
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "stemmed")
        assert kb.stemmer == "english"
        assert [p.doc_id for p in kb.search("indexes")] == ["idx"]
        assert open_knowledge_base(loom, "stemmed", stemmer="english") is kb
        with pytest.raises(KnowledgeBaseOptionsError, match="created with stemmer='english'"):
            open_knowledge_base(loom, "stemmed", stemmer="french")
    for asked in ("french", None):
        with (
            Loom(db_url) as loom,
            pytest.raises(KnowledgeBaseOptionsError, match="created with stemmer='english'"),
        ):
            open_knowledge_base(loom, "stemmed", stemmer=asked)
    with (
        Loom(db_url) as loom,
        pytest.raises(KnowledgeBaseOptionsError, match="created with stemmer=None"),
    ):
        open_knowledge_base(loom, "plain", stemmer="english")


def test_a_scope_created_elsewhere_after_this_open_is_read_by_its_choice(db_url: str) -> None:
    """Opened without stemmer= before another process created the scope stemmed: it searches
    by the log's stemmer; opened asking for plain, its write is refused, nothing appended."""
    with Loom(db_url) as first, Loom(db_url) as second:
        unsaid = open_knowledge_base(first, "shared")
        plain = open_knowledge_base(first, "other-shared", stemmer=None)
        open_knowledge_base(second, "shared", stemmer="english").sync([INDEXING])
        open_knowledge_base(second, "other-shared", stemmer="english").sync([INDEXING])
        assert [p.doc_id for p in unsaid.search("indexes")] == ["idx"]
        head = first.log.position
        with pytest.raises(KnowledgeBaseOptionsError, match="created with stemmer='english'"):
            plain.put_doc(DOCS[0])
        assert first.log.position == head


def test_an_old_scope_without_the_event_answers_as_before(db_url: str) -> None:
    """A scope written without a stemmer has no event, its passages stay in the plain store,
    and in a fresh process it answers exactly as it did (no stem matches)."""
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "old")
        kb.sync([*DOCS, INDEXING], source="test")
        before = {q: kb.search(q) for q in [*STEMMED_QUESTIONS, "indexing", "worker"]}
        assert _chosen(loom, "old") == []
    assert before["indexes"] == [] and before["indexing"] != []
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "old")
        assert kb.stemmer is None
        assert {q: kb.search(q) for q in before} == before
        kb.rebuild()
        assert {q: kb.search(q) for q in before} == before
        tables = set(inspect(loom.log.engine).get_table_names())
    assert not any(name.startswith(stemmed_prefix("english")) for name in tables)


@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_a_stemmed_retrieval_replays_with_the_corpus_and_model_gone(
    db_url: str, mode: Mode
) -> None:
    """Every corpus table (the stemmed store's included) dropped, the model unavailable: a
    fresh Loom replays the stemmed retrieval identically from the log."""

    def register(loom: Loom, embedder: Any) -> None:
        @loom.flow("ask")
        def ask(ctx: Any, question: str) -> list[str]:
            kb = _open(loom, embedder=embedder, min_score=FLOOR)  # the stemmer is the log's
            return [p.doc_id for p in kb.retrieve(question, decide=ctx.decide, mode=mode)]

    with Loom(db_url) as loom:
        register(loom, HashingEmbedder())
        _open(loom, min_score=FLOOR, stemmer="english").sync([*DOCS, INDEXING], source="test")
        run = loom.run("ask", question="indexes of a large table")
    assert run.output and run.output[0] == "idx"
    with Loom(db_url) as loom:
        drop_corpus(loom)
        with loom.log.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS loom_kb_embeddings")
        left = [t for t in inspect(loom.log.engine).get_table_names() if t.startswith("loom_kb_")]
        assert left == []
        register(loom, UnavailableEmbedder())
        result = loom.replay(run.execution_id)
    assert result.identical, result.describe()
    assert result.output == run.output


def _history(kb: KnowledgeBase) -> Iterator[tuple[int, list[Doc]]]:
    """Sync a history into ``kb``, yielding (log position, the documents current then)."""
    kb.sync([*HISTORY, INDEXING], source="test")
    for doc_id in ("twin-b", "twin-a"):  # history order is not id order
        kb.put_doc(Doc(id=doc_id, text=TWIN, meta={"team": "sre"}), source="test")
    now = {doc.id: doc for doc in [*HISTORY, INDEXING, *_twins()]}
    yield kb.loom.log.position, sorted(now.values(), key=_id)
    revised = Doc(id="idx", text="Indexes are rebuilt nightly; locks are short.")
    kb.put_doc(revised, source="test")
    kb.remove_doc("dns", source="test")
    now["idx"] = revised
    now.pop("dns")
    yield kb.loom.log.position, sorted(now.values(), key=_id)


def _answers(search: Any) -> dict[tuple[str, str], list[tuple[str, int, str]]]:
    questions = [*STEMMED_QUESTIONS, *QUESTIONS]
    return {
        (q, m): _seen(search(q, mode=m, limit=3)) for q in questions for m in ("lexical", "hybrid")
    }


def test_rebuild_as_of_and_a_fresh_corpus_answer_as_the_live_stemmed_index(loom: Loom) -> None:
    """After a history of revisions and a removal: the current corpus answers as a fresh
    stemmed corpus of its documents; each earlier position's as-of view answers what the
    live index answered then; a rebuild from position 0 and a dropped corpus change nothing."""
    kb = _open(loom, stemmer="english")
    live: list[tuple[int, dict[Any, Any], list[Doc]]] = []
    for position, docs in _history(kb):
        live.append((position, _answers(kb.search), docs))
    assert live[0][1][("indexes", "lexical")] != []  # the stem fired
    for number, (position, answers, docs) in enumerate(live):
        fresh = _open(loom, f"fresh-{number}", stemmer="english")
        fresh.sync(docs, source="test")
        assert _answers(fresh.search) == answers
        assert _answers(kb.as_of(position).search) == answers
    kb.rebuild()
    assert _answers(kb.search) == live[-1][1]
    assert _answers(kb.as_of(live[0][0]).search) == live[0][1]
    drop_corpus(loom)
    assert _answers(kb.search) == live[-1][1]


def test_a_stemmed_store_left_behind_by_a_partial_drop_is_not_counted_twice(
    db_url: str,
) -> None:
    """Only the manifest, history and tokenizer tables dropped (the stemmed store kept): the
    rebuild starts the scope's passages afresh instead of appending them beside the old."""
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "stemmed", stemmer="english")
        kb.sync([*DOCS, INDEXING], source="test")
        passages, found = kb.passages(), kb.search("indexes")
        with loom.log.engine.begin() as conn:
            for table in ("documents", "revisions", "tokenizers"):
                conn.exec_driver_sql(f"DROP TABLE loom_kb_{table}")
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "stemmed")
        assert (kb.passages(), kb.search("indexes")) == (passages, found)


def test_a_dropped_stemmed_store_is_rebuilt_from_the_log(db_url: str) -> None:
    """The stemmed store's tables dropped, the rest kept: the next open rebuilds the corpus
    (its position would otherwise claim passages that are gone)."""
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "stemmed", stemmer="english")
        kb.sync([*DOCS, INDEXING], source="test")
        passages, found = kb.passages(), kb.search("indexes")
        corpus_index(loom).passage_store("english").drop()
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "stemmed")
        assert (kb.passages(), kb.search("indexes")) == (passages, found) != ([], [])


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="LOOM_TEST_PG_URL is not set")
def test_sqlite_and_postgresql_return_the_same_stemmed_passages(sqlite_url: str) -> None:
    """The same documents and questions: the same passages in the same order on both."""
    answers = []
    for url in chain([sqlite_url], fresh_postgres_database()):
        with Loom(url) as loom:
            kb = _open(loom, stemmer="english")
            for _ in _history(kb):
                pass
            answers.append(_answers(kb.search))
    sqlite_answers, postgres_answers = answers
    assert sqlite_answers[("indexes", "lexical")] != []
    assert sqlite_answers == postgres_answers


def test_an_unknown_stemmer_is_refused_naming_the_known_ones(loom: Loom) -> None:
    with pytest.raises(InvalidOptionError, match=r"no Snowball stemmer for .klingon.*english"):
        open_knowledge_base(loom, "s", stemmer="klingon")
    with pytest.raises(InvalidOptionError, match="stemmer must be"):
        open_knowledge_base(loom, "s", stemmer=3)  # type: ignore[arg-type]


def test_without_the_stem_extra_the_error_says_what_to_install(
    loom: Loom, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "snowballstemmer", None)  # import raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'loom-replay\[stem\]'"):
        open_knowledge_base(loom, "s", stemmer="english")


def test_the_sync_command_creates_a_stemmed_scope_and_keeps_it(tmp_path: Path, db_url: str) -> None:
    """`loom knowledge sync --stemmer english` creates the scope stemmed; a later sync without
    the flag keeps it; another stemmer is a usage error; `search` finds by stems."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "idx.md").write_text(INDEXING.text, encoding="utf-8")
    sync = ["knowledge", "sync", str(folder), "--scope", "s", "--apply", "--db", db_url]
    assert CliRunner().invoke(app, [*sync, "--stemmer", "english"]).exit_code == 0
    assert CliRunner().invoke(app, sync).exit_code == 0
    refused = CliRunner().invoke(app, [*sync, "--stemmer", "french"])
    assert refused.exit_code == 2
    assert "created with stemmer='english'" in refused.output
    search = ["knowledge", "search", "indexes", "--scope", "s", "--db", db_url, "--json"]
    found = CliRunner().invoke(app, search)
    assert found.exit_code == 0 and "idx.md" in found.output
    with Loom(db_url) as loom:
        assert len(_chosen(loom, "s")) == 1


def test_a_process_that_did_not_see_the_choice_indexes_the_scopes_next_document(
    db_url: str,
) -> None:
    """Another process applied the choice and the first document; this one, its index open
    since before, applies the next document into the stemmed store (opened before the page's
    transaction, not inside it)."""
    with Loom(db_url) as early, Loom(db_url) as writer:
        corpus_index(early)  # its read model opened before the scope existed
        kb = open_knowledge_base(writer, "stemmed", stemmer="english")
        kb.sync([DOCS[0]])
        fields = {
            "scope": "stemmed",
            "doc_id": "idx",
            "revision": 1,
            "fingerprint": "0" * 64,
            "fingerprint_algorithm": "test",
            "source": None,
            "title": None,
            "meta": None,
            "passages": [INDEXING.text],
        }
        stream = stream_id(stream_name("stemmed"))
        version = writer.log.stream_version(stream)
        writer.log.append(stream, expected_version=version, events=[(DocumentWritten, fields)])
        late = open_knowledge_base(early, "stemmed")
        assert [p.doc_id for p in late.search("indexes")] == ["idx"]


def _plain_and_stemmed(url: str) -> tuple[list[object], set[str]]:
    """A log with a plain and a stemmed scope: their answers, and the tables in its database."""
    with Loom(url) as loom:
        plain = open_knowledge_base(loom, "plain")
        plain.sync([*DOCS, INDEXING], source="test")
        stemmed = open_knowledge_base(loom, "stemmed", stemmer="english")
        stemmed.sync([*DOCS, INDEXING], source="test")
        return _both(loom), set(inspect(loom.log.engine).get_table_names())


def _both(loom: Loom) -> list[object]:
    kbs = [open_knowledge_base(loom, scope) for scope in ("plain", "stemmed")]
    return [(kb.passages(), kb.search("indexes"), kb.search("lock")) for kb in kbs]


def test_any_one_corpus_table_dropped_is_rebuilt_on_the_next_open(tmp_path: Path) -> None:
    """ADR 0010: dropping the corpus tables, all or any one, and opening again rebuilds the
    corpus. With a plain and a stemmed scope in one log, a model-based review dropped the
    stemmed store's postings (every search of the scope then found nothing), its settings
    (every read of the log, a rebuild's too, refused the store's own tokenizer), and the
    plain store's postings (the first open failed clearing a store whose tables it had just
    dropped). Each table in turn, in a log of its own: the next open answers as before."""
    before, tables = _plain_and_stemmed(f"sqlite:///{tmp_path / 'first.db'}")
    # The corpus's own tables; an FTS5 table's shadow tables are SQLite's, dropped with it.
    names = sorted(
        name
        for name in tables
        if name.startswith("loom_kb_") and name.rpartition("_")[0] not in tables
    )
    assert any("stem_english" in name for name in names) and len(names) > 6
    failed = []
    for number, name in enumerate(names):
        url = f"sqlite:///{tmp_path / f'{number}.db'}"
        assert _plain_and_stemmed(url)[0] == before
        with Loom(url) as loom, loom.log.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {name}")
        with Loom(url) as loom:
            try:
                after: object = _both(loom)
            except Exception as exc:  # named in the failure below
                after = repr(exc)[:300]
        if after != before:
            failed.append(f"{name}: {after if isinstance(after, str) else 'answers differ'}")
    assert failed == [], "\n".join(failed)
