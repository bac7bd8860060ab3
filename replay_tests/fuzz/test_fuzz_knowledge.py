"""Bad input to a KnowledgeBase, fuzzed: documents, ids, meta, sources and queries.

The property: every call either succeeds and the document
round-trips (listed, its passages are what the chunker cut, a word only it has finds it), or
raises a subclass of ``LoomError`` having written NOTHING: the log position and the corpus
(``list_docs`` + ``passages``) are exactly what they were before the call.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loom_knowledge import (
    Doc,
    InvalidDocumentError,
    InvalidOptionError,
    KnowledgeBase,
    open_knowledge_base,
    pack_paragraphs,
    passage_content,
)
from loom_knowledge.domain.types import MAX_META_DEPTH
from loom_memory import MemoryEntry, entry_terms, tokenize
from loom_runtime import FlowContext, FlowRegistry, Loom, LoomError

FUZZ = settings.get_profile("loom-fuzz")

# Text of every kind: NUL, lone surrogates, RTL marks, emoji, combining marks, whitespace.
NASTY = st.sampled_from(
    ["", " ", "\t\n \r\n", "\x00", "\ud800", "\udfff", "\u202e", "\u200f", "🦜", "e\u0301", "#"]
)
TEXT = st.one_of(st.text(), NASTY, st.lists(st.one_of(st.text(), NASTY)).map("".join))
IDS = st.one_of(
    TEXT,
    st.sampled_from(
        ["a#b", "a/b", "guide.md#0", "x#01", "ü/中文/\u200f\u05e2\u05d1", "id" * 500, "#", "/"]
    ),
    st.integers(),
    st.none(),
    st.binary(max_size=5),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included
    TEXT,
    st.binary(max_size=5),
)
META = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(TEXT, inner, max_size=3),
        st.dictionaries(st.one_of(st.integers(), st.floats(), st.none(), TEXT), inner, max_size=3),
    ),
    max_leaves=12,
)


@pytest.fixture
def kb(db_url: str) -> Iterator[KnowledgeBase]:
    """A corpus on a fresh log (each backend), closed after the test."""
    with Loom(db_url) as loom:
        yield open_knowledge_base(loom, "fuzz")


def snapshot(kb: KnowledgeBase) -> tuple[int, list[Any], list[Any]]:
    """Everything a refused call must leave unchanged: log position, manifest, passages."""
    return kb.loom.log.position, kb.list_docs(), kb.passages()


def terms_of(kb: KnowledgeBase, doc_id: str) -> tuple[set[str], set[str]]:
    """The searchable terms of ``doc_id``'s passages and of every other document's."""
    own: set[str] = set()
    others: set[str] = set()
    for passage in kb.passages():
        content = msgspec.to_builtins(passage_content(passage))
        terms = set(entry_terms(MemoryEntry(content=content)))
        (own if passage.doc_id == doc_id else others).update(terms)
    return own, others


def assert_round_trips(kb: KnowledgeBase, doc: Doc) -> None:
    """The stored document is listed and cut as the chunker cuts it; a word only it has finds
    it; a second identical put writes nothing."""
    [record] = [r for r in kb.list_docs() if r.id == doc.id]
    texts = [p.text for p in kb.passages() if p.doc_id == doc.id]
    assert texts == pack_paragraphs()(doc)
    assert record.passage_count == len(texts)
    own, others = terms_of(kb, doc.id)
    unique = sorted(own - others)
    if unique:
        hits = kb.search(unique[0])
        assert doc.id in {p.doc_id for p in hits}, unique[0]
    position = kb.loom.log.position
    assert kb.put_doc(doc) == record
    assert kb.loom.log.position == position


def put_or_refuse(kb: KnowledgeBase, make: Any) -> None:
    """Build a document with ``make`` and put it: round trip, or a LoomError writing nothing."""
    before = snapshot(kb)
    try:
        doc = make()
    except InvalidDocumentError:
        assert snapshot(kb) == before
        return
    try:
        kb.put_doc(doc)
    except LoomError:
        assert snapshot(kb) == before
        return
    assert_round_trips(kb, doc)


@FUZZ
@given(doc_id=IDS, text=TEXT, title=st.one_of(st.none(), TEXT, st.integers()))
@example(doc_id="empty", text="", title=None)
@example(doc_id="blank", text=" \t\n\n \r\n", title=None)
@example(doc_id="nul", text="a\x00b", title=None)
@example(doc_id="surrogate", text="a\ud800b", title=None)
@example(doc_id="nul-title", text="fine", title="\x00")
@example(doc_id="rtl", text="\u202e\u05e9\u05dc\u05d5\u05dd 🦜 \u0645\u0631", title="\u200f")
def test_any_document_round_trips_or_is_refused_whole(
    kb: KnowledgeBase, doc_id: Any, text: Any, title: Any
) -> None:
    """A document of any id, text and title round-trips, or is refused with nothing written."""
    put_or_refuse(kb, lambda: Doc(id=doc_id, text=text, title=title))


@FUZZ
@given(meta=st.one_of(META, st.dictionaries(TEXT, META, max_size=4)))
@example(meta={"x": float("nan")})
@example(meta={"x": float("inf")})
@example(meta={"x": (1, 2)})
@example(meta={"x": b"bytes"})
@example(meta={"x": {1, 2}})
@example(meta={1: "non-str key"})
@example(meta={"k\x00": 1})
@example(meta={"\ud800": 1})
def test_any_meta_round_trips_or_is_refused_whole(kb: KnowledgeBase, meta: Any) -> None:
    """Any meta (nested, non-str keys, NaN, tuples, bytes, sets) round-trips or is refused whole."""
    put_or_refuse(kb, lambda: Doc(id="meta-doc", text="metadata carrier", meta=meta))


@pytest.mark.parametrize(
    "doc_id",
    ["guide.md#install", "a/b/c", "ü/中文/\u05e2\u05d1/🦜", "x" * 1000, "#", "a#0", "a#b#3", "//"],
)
def test_awkward_ids_round_trip(kb: KnowledgeBase, doc_id: str) -> None:
    """Ids with '#', '/', unicode or 1,000 characters round-trip and can be removed again."""
    doc = Doc(id=doc_id, text=f"body of an awkward id zq{len(doc_id)}q")
    put_or_refuse(kb, lambda: doc)
    assert kb.remove_doc(doc_id) is True
    assert [r.id for r in kb.list_docs()] == []
    assert kb.passages() == []


@pytest.mark.parametrize("doc_id", ["", " ", "\t\n", "a\x00", "\ud800", 7, None, b"id"])
def test_unusable_ids_are_refused_as_invalid_documents(doc_id: Any) -> None:
    """A blank, NUL, lone-surrogate or non-str id cannot make a Doc (InvalidDocumentError)."""
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id=doc_id, text="x")
    assert caught.value.field == "id"


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n", "\r\n\r\n"])
def test_empty_and_whitespace_text_is_listed_with_no_passages(kb: KnowledgeBase, text: str) -> None:
    """Empty or whitespace-only text is a listed document with zero passages."""
    record = kb.put_doc(Doc(id="hollow", text=text))
    assert record.passage_count == 0
    assert [r.id for r in kb.list_docs()] == ["hollow"]
    assert kb.passages() == []


@pytest.mark.slow  # a 10 MB document: CI runs it, the quick run does not
def test_ten_megabyte_document_round_trips(db_url: str) -> None:
    """A 10 MB document is stored whole (every passage within the limit) and searchable."""
    paragraph = "lorem ipsum dolor sit amet consectetur " * 25 + "\n\n"
    text = paragraph * (10_000_000 // len(paragraph)) + "zqtenmegabytemarker"
    assert len(text) >= 9_900_000
    loom = Loom(db_url)  # not closed if the write hangs: closing would wait on the hung thread
    kb = open_knowledge_base(loom, "fuzz")
    done: list[Any] = []

    def write() -> None:
        try:
            done.append(kb.put_doc(Doc(id="huge", text=text)))
        except BaseException as error:  # reported by the assertion below, not as a thread warning
            done.append(error)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    # About 2 s on SQLite and 7 s on PostgreSQL. The watchdog stays: PostgreSQL used to hang
    # here in psycopg's pipeline mode (ChainedPostgresRecorder.insert_events no longer uses it).
    writer.join(timeout=60)
    assert done, "put_doc of a 10 MB document did not return within 30 s"
    [record] = done
    assert not isinstance(record, BaseException), repr(record)
    passages = kb.passages()
    assert record.passage_count == len(passages) > 1000
    assert all(len(p.text) <= 1000 for p in passages)
    assert [p.doc_id for p in kb.search("zqtenmegabytemarker")] == ["huge"]
    loom.close()


def nested(depth: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"leaf": "deepword"}
    for _ in range(depth):
        meta = {"k": meta}
    return meta


def test_moderately_nested_meta_round_trips(kb: KnowledgeBase) -> None:
    """Meta nested 100 levels deep round-trips (its leaf is searchable)."""
    doc = Doc(id="nested", text="shallow text", meta=nested(100))
    put_or_refuse(kb, lambda: doc)
    assert [p.doc_id for p in kb.search("deepword")] == ["nested"]


def test_meta_nested_500_levels_is_stored_or_refused_with_a_typed_error(
    kb: KnowledgeBase,
) -> None:
    """Meta nested 500 levels deep is stored, or refused with a LoomError writing nothing."""
    put_or_refuse(kb, lambda: Doc(id="deep", text="deep text", meta=nested(500)))


def test_meta_nested_1000_levels_is_refused_as_an_invalid_document() -> None:
    """A Doc whose meta is nested 1,000 levels deep is refused with InvalidDocumentError."""
    with pytest.raises(InvalidDocumentError):
        Doc(id="deeper", text="x", meta=nested(1000))


@FUZZ
@given(query=TEXT)
@example(query="")
@example(query="   ")
@example(query="?!.,;:()[]{}-_/\\*&^%$#@~`'\"<>|+=")
@example(query='NOT OR AND * ^ : "')
@example(query="\x00")
@example(query="\ud800")
@example(query="the of and")
def test_any_query_returns_live_passages_and_writes_nothing(kb: KnowledgeBase, query: str) -> None:
    """Any query returns passages of live documents (or a LoomError) and writes nothing."""
    if not kb.list_docs():
        kb.put_doc(Doc(id="seed", text="seed text with words: alpha beta 42 ünïcode 中文"))
    before = snapshot(kb)
    try:
        hits = kb.search(query)
    except LoomError:
        hits = []
    live = {record.id for record in before[1]}
    assert {p.doc_id for p in hits} <= live
    assert snapshot(kb) == before
    if not tokenize(query):
        assert hits == []


@pytest.mark.parametrize("query", ["", " ", "?!...", "--", "()[]{}", "¿¡«»"])
def test_a_query_with_no_terms_returns_nothing(kb: KnowledgeBase, query: str) -> None:
    """An empty or punctuation-only query returns [] (documented in loom_memory.text)."""
    kb.put_doc(Doc(id="d", text="punctuation? yes! many... (words)"))
    assert kb.search(query) == []


@pytest.mark.parametrize("query", [None, 5, b"bytes", ["list"]])
def test_a_query_that_is_not_text_is_refused(kb: KnowledgeBase, query: Any) -> None:
    """A non-str query is refused with a LoomError."""
    with pytest.raises(LoomError):
        kb.search(query)


@FUZZ
@given(doc_id=IDS)
def test_removing_any_id_is_typed_and_exact(kb: KnowledgeBase, doc_id: Any) -> None:
    """remove_doc of any id removes exactly that document, says False, or raises a LoomError."""
    if not kb.list_docs():
        kb.put_doc(Doc(id="keeper", text="keep me"))
    before = snapshot(kb)
    try:
        removed = kb.remove_doc(doc_id)
    except LoomError:
        assert snapshot(kb) == before
        return
    assert removed == (doc_id in {r.id for r in before[1]})
    if not removed:
        assert snapshot(kb) == before


@pytest.mark.parametrize("doc", [None, "text", {"id": "a", "text": "b"}, 3])
def test_putting_something_that_is_not_a_doc_is_refused(kb: KnowledgeBase, doc: Any) -> None:
    """put_doc and sync refuse a non-Doc with a LoomError and write nothing."""
    before = snapshot(kb)
    with pytest.raises(LoomError):
        kb.put_doc(doc)
    with pytest.raises(LoomError):
        kb.sync([doc])
    assert snapshot(kb) == before


@pytest.mark.parametrize("source", ["ok", "ü/#", " padded "])
def test_a_textual_source_owns_its_document(kb: KnowledgeBase, source: str) -> None:
    """A document written under any ordinary source string is listed under that source (a
    blank one is refused: test_knowledge_sync.test_a_blank_source_is_refused)."""
    record = kb.put_doc(Doc(id="owned", text="owned text"), source=source)
    assert record.source == source
    assert kb.list_docs() == [record]


def put_with_source(kb: KnowledgeBase, source: Any) -> None:
    """Put under ``source``: round trip, or a LoomError writing nothing; the corpus stays usable."""
    before = snapshot(kb)
    try:
        kb.put_doc(Doc(id="sourced", text="sourced text"), source=source)
    except LoomError:
        assert snapshot(kb) == before
    other = open_knowledge_base(kb.loom, "other-scope")
    other.put_doc(Doc(id="after", text="written after"))
    assert [r.id for r in other.list_docs()] == ["after"]


def test_a_non_str_source_is_refused_without_poisoning_the_corpus(kb: KnowledgeBase) -> None:
    """A non-str source is refused with a LoomError, and the corpus stays usable."""
    put_with_source(kb, 5)


def test_a_nul_source_is_stored_or_refused_without_poisoning_the_corpus(
    kb: KnowledgeBase,
) -> None:
    """A source containing NUL is stored or refused with a LoomError; the corpus stays usable."""
    put_with_source(kb, "a\x00")


def test_a_lone_surrogate_source_is_refused_with_a_typed_error(kb: KnowledgeBase) -> None:
    """A source containing a lone surrogate is refused with a LoomError, writing nothing."""
    before = snapshot(kb)
    with pytest.raises(LoomError):
        kb.put_doc(Doc(id="sourced", text="sourced text"), source="\ud800")
    assert snapshot(kb) == before


@pytest.mark.parametrize("scope", ["s\ud800", "s\x00"])
def test_an_unusable_scope_is_refused_with_a_typed_error(db_url: str, scope: str) -> None:
    """A scope with a lone surrogate or NUL works or is refused (LoomError) writing nothing."""
    with Loom(db_url) as loom:
        position = loom.log.position
        try:
            kb = open_knowledge_base(loom, scope)
            kb.put_doc(Doc(id="d", text="scoped words"))
        except LoomError:
            assert loom.log.position == position
            return
        assert [p.doc_id for p in kb.search("scoped")] == ["d"]


def test_nan_is_never_stored_as_meta() -> None:
    """A NaN meta leaf is refused with the path of the leaf, so stored meta always equals itself."""
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id="n", text="t", meta={"a": [1, {"b": math.nan}]})
    assert caught.value.field == "meta['a'][1]['b']"


@pytest.mark.parametrize("source", [5, b"s", "a\x00", "\ud800"])
@pytest.mark.parametrize("verb", ["remove_doc", "sync", "plan_sync"])
def test_every_verb_refuses_an_unstorable_source_up_front(
    kb: KnowledgeBase, verb: str, source: Any
) -> None:
    """remove_doc, sync and plan_sync refuse a source put_doc would refuse, writing nothing."""
    kb.put_doc(Doc(id="kept", text="kept text"))
    before = snapshot(kb)
    call = {
        "remove_doc": lambda: kb.remove_doc("kept", source=source),
        "sync": lambda: kb.sync([Doc(id="new", text="new text")], source=source),
        "plan_sync": lambda: kb.plan_sync([Doc(id="new", text="new text")], source=source),
    }[verb]
    with pytest.raises(InvalidOptionError):
        call()
    assert snapshot(kb) == before


def test_meta_nested_exactly_max_meta_depth_round_trips(db_url: str) -> None:
    """Meta nested MAX_META_DEPTH levels is stored, indexed and retrievable in a recorded
    decision; one level more is an InvalidDocumentError."""
    flows = FlowRegistry()

    @flows.flow("ask", version="fuzz")
    def ask(ctx: FlowContext) -> list[str]:
        kb = open_knowledge_base(loom, "deep")
        return [p.doc_id for p in kb.retrieve("deepword", decide=ctx.decide)]

    with Loom(db_url, flows=flows) as loom:
        kb = open_knowledge_base(loom, "deep")
        meta = nested(MAX_META_DEPTH - 1)  # nested(n) is n + 1 dicts deep
        put_or_refuse(kb, lambda: Doc(id="at-limit", text="limit text", meta=meta))
        assert [p.doc_id for p in kb.search("deepword")] == ["at-limit"]
        run = loom.run("ask")
        assert run.output == ["at-limit"]
        assert loom.replay(run.execution_id).identical
    with pytest.raises(InvalidDocumentError) as caught:
        Doc(id="past-limit", text="x", meta=nested(MAX_META_DEPTH))
    assert caught.value.field.startswith("meta.k.k")


def test_a_long_document_id_and_a_large_meta_are_indexed(db_url: str) -> None:
    """The corpus index is a projection of documents into a memory store: the bounds an
    event-sourced memory puts on its keys, ids and entries (ADR 0004, "bounds") must not apply
    to it. Put on every store, they refused a 1,100-byte document id in the projection, after
    the document's event was in the log: the scope's index failed from then on."""
    with Loom(db_url) as loom:
        kb = open_knowledge_base(loom, "fuzz")
        long_id = "docs/" + "a" * 1_100
        kb.sync(
            [
                Doc(id=long_id, text="hello from a long path"),
                Doc(id="meta.md", text="hello with meta", meta={"blob": "x" * 300_000}),
            ]
        )
        assert sorted(p.doc_id for p in kb.search("hello")) == sorted([long_id, "meta.md"])
