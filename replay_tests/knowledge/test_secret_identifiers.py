"""Identifiers are never rewritten by the redactor (ADR 0012).

A doc id, scope, source or memory key that a redaction pattern matched used to be rewritten
inside its event: the next write re-issued revision 1 under the rewritten id and every read
and write of every scope failed from then on. Now a benign name is stored as given, and a
real secret shape is refused at the boundary, typed, naming the field, with nothing written.
"""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import text

from loom_knowledge import Doc, KnowledgeError, open_knowledge_base
from loom_knowledge.corpus import events as knowledge_events
from loom_memory import EventSourcedMemory, MemoryEntry, MemoryStoreError
from loom_memory import events as memory_events
from loom_runtime import FlowContext, LogEvent, Loom, SecretIdentifierError
from loom_runtime.execution import EXECUTION_EVENT_TYPES
from loom_runtime.integrity import verify_log
from loom_runtime.projection import rebuild, registered_projections
from loom_runtime.stream import stream_id

BENIGN_ID = "Bearer authentication.md"
SECRET_ID = "https://svc:pw123456@wiki/page.md"


def _rebuild_everything(loom: Loom) -> None:
    """What `loom rebuild` does: every registered projection dropped and rebuilt from 0."""
    for projection in registered_projections(loom.log):
        rebuild(loom.log, projection)


def test_a_benign_doc_id_survives_two_syncs_a_rebuild_and_another_scope(loom: Loom) -> None:
    """A name that merely mentions 'Bearer' is stored as given; nothing breaks afterwards."""
    kb = open_knowledge_base(loom, "docs")
    docs = [Doc(id=BENIGN_ID, text="How bearer authentication works.", title=BENIGN_ID)]
    kb.sync(docs, source="Bearer authentication")
    kb.sync(
        [Doc(id=BENIGN_ID, text="Revised: bearer tokens expire.")], source="Bearer authentication"
    )
    assert [(r.id, r.revision, r.source) for r in kb.list_docs()] == [
        (BENIGN_ID, 2, "Bearer authentication")
    ]
    _rebuild_everything(loom)
    assert [r.id for r in kb.list_docs()] == [BENIGN_ID]
    assert [p.doc_id for p in kb.search("expire")] == [BENIGN_ID]
    other = open_knowledge_base(loom, "Bearer authentication scope")
    other.put_doc(Doc(id="b.md", text="other scope still writes"))
    assert [r.id for r in other.list_docs()] == ["b.md"]
    assert verify_log(loom.log).ok


@pytest.mark.parametrize("field", ["id", "source", "scope"])
def test_a_secret_in_a_corpus_identifier_is_refused_and_nothing_is_written(
    loom: Loom, field: str
) -> None:
    """A URL with a password as doc id, source or scope: typed refusal naming the field."""
    before = loom.log.position
    with pytest.raises(KnowledgeError) as refused:
        if field == "scope":
            open_knowledge_base(loom, SECRET_ID)
        else:
            kb = open_knowledge_base(loom, "docs")
            doc_id = SECRET_ID if field == "id" else "page.md"
            source = SECRET_ID if field == "source" else None
            kb.sync([Doc(id=doc_id, text="text")], source=source)
    assert isinstance(refused.value, SecretIdentifierError)
    assert field in refused.value.path
    assert "pw123456" not in str(refused.value)
    assert loom.log.position == before
    # the corpus keeps working, in this scope and in another, and after a rebuild
    kb = open_knowledge_base(loom, "docs")
    kb.sync([Doc(id="page.md", text="still writable")])
    kb.sync([Doc(id="page.md", text="still writable, revised")])
    _rebuild_everything(loom)
    open_knowledge_base(loom, "other").put_doc(Doc(id="x.md", text="x"))
    assert [(r.id, r.revision) for r in kb.list_docs()] == [("page.md", 2)]


def test_put_doc_refuses_a_secret_doc_id(loom: Loom) -> None:
    """The one-document write checks its id like a sync does."""
    with pytest.raises(KnowledgeError, match="id"):
        open_knowledge_base(loom, "docs").put_doc(Doc(id=SECRET_ID, text="t"))


def test_a_benign_memory_key_reads_back(loom: Loom) -> None:
    """A key that mentions 'Bearer' is stored as given: append, then read returns the entry."""
    memory = EventSourcedMemory(loom)
    memory.append(BENIGN_ID, [MemoryEntry(content="remembered", id="Bearer authentication")])
    [entry] = memory.read(BENIGN_ID)
    assert (entry.content, entry.id) == ("remembered", "Bearer authentication")
    memory.rebuild()
    assert [e.content for e in memory.read(BENIGN_ID)] == ["remembered"]


@pytest.mark.parametrize("where", ["key", "entry id", "removed id"])
def test_a_secret_memory_identifier_is_refused_and_nothing_is_stored(
    loom: Loom, where: str
) -> None:
    """A memory key or entry id with a URL password is refused typed; nothing is appended."""
    memory = EventSourcedMemory(loom)
    before = loom.log.position
    with pytest.raises(MemoryStoreError) as refused:
        if where == "key":
            memory.append(SECRET_ID, [MemoryEntry(content="c")])
        elif where == "entry id":
            memory.append("k", [MemoryEntry(content="c", id=SECRET_ID)])
        else:
            memory.remove("k", [SECRET_ID])
    assert isinstance(refused.value, SecretIdentifierError)
    assert "pw123456" not in str(refused.value)
    assert loom.log.position == before
    assert memory.read(SECRET_ID) == [] and memory.read("k") == []


class Named(LogEvent):
    TOPIC = "test.identifiers.Named"
    IDENTIFIERS = ("name",)
    name: str
    note: str


def test_the_mapper_refuses_rather_than_rewrites_an_identifier(loom: Loom) -> None:
    """Defence in depth: an identifier field holding a secret is refused, never redacted."""
    stream = stream_id("identifiers")
    with pytest.raises(SecretIdentifierError, match=r"test\.identifiers\.Named\.name"):
        loom.log.append(
            stream, expected_version=0, events=[(Named, {"name": SECRET_ID, "note": ""})]
        )
    assert loom.log.position == 0
    loom.log.append(stream, expected_version=0, events=[(Named, {"name": "n", "note": SECRET_ID})])
    [event] = loom.log.events(stream)
    assert "pw123456" not in event.note  # a non-identifier field is still redacted


def test_a_decision_key_holding_a_secret_is_refused_not_rewritten(loom: Loom) -> None:
    """A decision key is how a replay finds its value: refused typed, never rewritten."""

    @loom.flow("keyed")
    def keyed(ctx: FlowContext) -> str:
        return ctx.decide(f"fetch {SECRET_ID}", lambda: "v")

    with pytest.raises(SecretIdentifierError, match="key"):
        loom.run("keyed")
    table = loom.log.application.recorder.events_table_name  # type: ignore[attr-defined]
    with loom.log.engine.connect() as conn:
        states = conn.execute(text(f"SELECT state FROM {table}")).scalars().all()
    assert states and all(b"pw123456" not in bytes(state) for state in states)


def test_every_declared_identifier_is_a_field_of_its_event() -> None:
    """A misspelt IDENTIFIERS entry would protect nothing: each names a stored field."""
    events: list[type] = [*EXECUTION_EVENT_TYPES]
    for module in (knowledge_events, memory_events):
        events += [c for c in vars(module).values() if getattr(c, "TOPIC", None) and c.IDENTIFIERS]
    assert len(events) == len(EXECUTION_EVENT_TYPES) + 9  # knowledge's and memory's
    for cls in events:
        fields = {field.name for field in dataclasses.fields(cls)}
        assert set(getattr(cls, "IDENTIFIERS", ())) <= fields, cls


def test_a_decision_key_holding_a_secret_is_refused_before_compute_runs(loom: Loom) -> None:
    """The key is checked when decide is called: the model is never called (nor billed) for a
    decision that could not be recorded."""
    calls: list[str] = []

    @loom.flow("keyed-early")
    def keyed(ctx: FlowContext) -> str:
        return ctx.decide(f"fetch {SECRET_ID}", lambda: calls.append("computed") or "v")

    with pytest.raises(SecretIdentifierError, match="key"):
        loom.run("keyed-early")
    assert calls == []


def test_a_query_holding_a_secret_is_retrieved_recorded_redacted_and_replayed(
    loom: Loom,
) -> None:
    """A user's question may quote a password: retrieval works, the query is recorded as the
    decision's input, redacted (never the secret), and the replay is identical."""
    kb = open_knowledge_base(loom, "faq")
    kb.put_doc(Doc(id="login.md", text="When login fails, reset the password in the portal."))
    question = "login fails with password=Hunter2x9 why"

    @loom.flow("ask-secret")
    def ask(ctx: FlowContext) -> list[str]:
        return [p.doc_id for p in kb.retrieve(question, decide=ctx.decide)]

    run = loom.run("ask-secret")
    assert run.output == ["login.md"]
    assert loom.replay(run.execution_id).identical
    table = loom.log.application.recorder.events_table_name  # type: ignore[attr-defined]
    with loom.log.engine.connect() as conn:
        states = conn.execute(text(f"SELECT state FROM {table}")).scalars().all()
    assert all(b"Hunter2x9" not in bytes(state) for state in states)
    assert any(b"login fails with password=" in bytes(state) for state in states)


@pytest.mark.parametrize("store", ["corpus", "memory"])
def test_an_identifier_refused_inside_a_decision_is_rebuilt_on_replay(
    loom: Loom, store: str
) -> None:
    """A tool (a decision's compute) writing a document or a memory entry under an id that
    holds a secret gets the package's refusal, and the flow catching it by its class takes
    the same path on replay. Before, the recorded failure came back as
    ``RecordedComputeError`` (loom's own classes are rebuilt only when registered), so the
    unchanged flow diverged (ADR 0026, amended "identifier refusals")."""
    kb, memory = open_knowledge_base(loom, "docs"), EventSourcedMemory(loom)
    refusal = {"corpus": KnowledgeError, "memory": MemoryStoreError}[store]

    def write() -> str:
        if store == "corpus":
            kb.put_doc(Doc(id=SECRET_ID, text="t"))
        else:
            memory.append(SECRET_ID, [MemoryEntry(content="c")])
        return "written"

    @loom.flow("tool")
    def tool(ctx: FlowContext) -> str:
        try:
            return ctx.decide("write", write)
        except refusal as refused:
            assert isinstance(refused, SecretIdentifierError)
            return f"refused: {type(refused).__name__} {refused.path} {refused.pattern}"

    run = loom.run("tool")
    assert run.output.startswith("refused: ") and "url-password" in run.output, run.output
    replayed = loom.replay(run.execution_id)
    assert replayed.identical, replayed.describe()
