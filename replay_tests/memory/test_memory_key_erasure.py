"""Erasing a memory key (ADR 0060), on SQLite and PostgreSQL.

The claims: with encryption on, every entry an event-sourced memory writes is sealed under
its key's own data key in the log; erasing the key destroys that data key, appends a forget
event, and the memory's projection clears the key on that event (entries, search rows,
postings, counts); a rebuild from position 0 ends in the same state; other keys read and
search identically; ``loom verify`` passes before and after; the raw database holds none of
the key's planted text; an unknown key is a typed error that writes nothing; a write to an
erased key is refused typed and writes nothing.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from loom_memory import (
    EventSourcedMemory,
    InMemoryMemoryStore,
    MemoryEntry,
    PostgresMemoryStore,
    SqliteMemoryStore,
    Tokenizer,
)
from loom_memory.erasure import memory_subject
from loom_memory.events import MemoryAppended, memory_stream
from loom_runtime import (
    EncryptionOffError,
    ErasureSubjectError,
    Loom,
    MasterKey,
    SubjectErasedError,
    Tampering,
    verify_keys,
)
from loom_runtime.erasure import forget_events
from replay_tests.knowledge.test_document_erasure import _table_rows
from replay_tests.runtime.test_erasure import _raw_bytes_postgres, _raw_bytes_sqlite
from replay_tests.runtime.test_verify_keys import delete_key_row

KEY = MasterKey(b"m" * 32)
Opener = Callable[[Loom], EventSourcedMemory]


def _sql(loom: Loom) -> EventSourcedMemory:
    engine = loom.log.engine
    store_class = PostgresMemoryStore if engine.dialect.name == "postgresql" else SqliteMemoryStore
    return EventSourcedMemory(loom, store=store_class(engine))


def _in_process(loom: Loom) -> EventSourcedMemory:
    return EventSourcedMemory(loom, store=InMemoryMemoryStore())


@pytest.fixture(params=[_sql, _in_process], ids=["sql-store", "in-process-store"])
def open_memory(request: pytest.FixtureRequest) -> Opener:
    """Each kind of projection: a SQL store on the log's database, an in-process store."""
    opener: Opener = request.param
    return opener


def _raw(url: str) -> bytes:
    """The raw database: SQLite main file and WAL after checkpoint and VACUUM, or every
    PostgreSQL table read with SQL and ``pg_dump``, with each ``bytea`` value decoded."""
    if url.startswith("sqlite"):
        return _raw_bytes_sqlite(url)
    dumped = _raw_bytes_postgres(url)
    decoded = [bytes.fromhex(h.decode()) for h in re.findall(rb"\\x((?:[0-9a-f]{2})+)", dumped)]
    return dumped + b"".join(decoded)


def _state(memory: EventSourcedMemory, terms: str) -> tuple[object, ...]:
    return (
        memory.read("alice"),
        memory.read("bob"),
        memory.search("alice", terms, limit=10),
        memory.search("bob", terms, limit=10),
    )


def _write(memory: EventSourcedMemory, secret: str, kept: str) -> None:
    memory.append("alice", [MemoryEntry(content=f"my address is {secret}", id="a1", role="user")])
    memory.append("alice", [MemoryEntry(content={"note": f"lives at {secret}"}, id="a2")])
    memory.replace("alice", [MemoryEntry(content=f"moved; still {secret}", id="a3")])
    memory.append("bob", [MemoryEntry(content=f"bob's tag is {kept}", id="b1")])


def test_an_erased_memory_key_is_forgotten_and_a_rebuild_agrees(
    db_url: str, open_memory: Opener
) -> None:
    token = uuid4().hex  # one term of the secret: search rows and postings must lose it too
    secret, kept = f"SECRET-{token}", f"KEPT-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom:
        memory = open_memory(loom)
        _write(memory, secret, kept)
        assert [e.id for e in memory.search("alice", token)] == ["a3"]
        bob_before = (memory.read("bob"), memory.search("bob", kept))
        # The log holds every entry sealed: neither key's text is in a stored event.
        assert not any(
            secret.encode() in r.state or kept.encode() in r.state for r in loom.log.notifications()
        )
        seen_at = loom.log.position
        assert loom.log.verify().problem is None

        dry = loom.erase(memory_key="memory:alice", reason="request", by="dpo", dry_run=True)
        assert not dry.applied and loom.log.position == seen_at  # a dry run writes nothing
        subject = memory_subject("memory", "alice")
        assert [(s.subject, s.events) for s in dry.subjects] == [(subject, 3)]
        report = loom.erase(memory_key="memory:alice", reason="request", by="dpo")

        assert report.applied and [e.subjects for _, e in forget_events(loom)] == [(subject,)]
        assert loom.log.verify().problem is None
        # Purged when erase returns, with no catch-up: an in-process store too (it kept the
        # entries until its next write, and a flow recalling them recorded them again).
        assert memory.read("alice") == [] and memory.search("alice", token) == []
        assert (memory.read("bob"), memory.search("bob", kept)) == bob_before
        erased_state = _state(memory, f"{token} {kept}")

        memory.rebuild(upto=seen_at)  # the past, before the erasure: never the erased text
        assert memory.read("alice") == [] and memory.read("bob") == bob_before[0]
        memory.rebuild()  # from position 0: the key is gone, the forget event stays
        assert _state(memory, f"{token} {kept}") == erased_state
        assert _state(open_memory(loom), f"{token} {kept}") == erased_state  # a new projection

        at = loom.log.position
        for write in (
            lambda: memory.append("alice", [MemoryEntry(content="back again")]),
            lambda: memory.replace("alice", [MemoryEntry(content="back again")]),
            lambda: memory.remove("alice", ["a1"]),
            lambda: memory.clear("alice"),
        ):
            with pytest.raises(SubjectErasedError) as refused:
                write()
            assert refused.value.position == report.position
        assert loom.log.position == at  # nothing was written
        memory.append("bob", [MemoryEntry(content="bob again", id="b2")])  # others write on
        memory.close()

    raw = _raw(db_url)
    assert raw.count(secret.encode()) == 0
    assert raw.count(token.encode()) == 0  # nor its term, in any index
    assert raw.count(secret.lower().encode()) == 0
    assert b"loom.sealed" in raw


def test_verify_checks_memory_keys_against_the_forget_log(db_url: str) -> None:
    """ADR 0049, amended "verify": an erased memory key checks out; a kept key's row deleted
    by hand is named where its first sealed entry is stored."""
    with Loom(db_url, encryption=KEY) as loom:
        memory = _in_process(loom)
        _write(memory, "secret", "kept")
        loom.erase(memory_key="memory:alice", reason="request", by="dpo")
        checked = verify_keys(loom.log, upto=loom.log.position)
        assert checked.ok and checked.checked == 2
        bob = memory_subject("memory", "bob")
        first = next(
            r.position
            for r in loom.log.notifications(topics=(MemoryAppended.TOPIC,))
            if r.stream == memory_stream("memory", "bob")
        )
        delete_key_row(loom, bob)

        report = verify_keys(loom.log, upto=loom.log.position)
        memory.close()

    assert report.problem is Tampering.KEY_MISSING
    assert report.position == first and bob in report.detail


def test_the_raw_log_holds_a_kept_keys_text_only_sealed(db_url: str) -> None:
    """The projection holds live text in clear (it searches it); the log never does."""
    kept = f"KEPT-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom:
        memory = _in_process(loom)
        memory.append("bob", [MemoryEntry(content=f"tag {kept}", id="b1")])
        assert memory.read("bob")[0].content == f"tag {kept}"
    assert _raw(db_url).count(kept.encode()) == 0  # the in-process store is not in the file
    with Loom(db_url, encryption=KEY) as reopened:
        assert _in_process(reopened).read("bob")[0].content == f"tag {kept}"


def test_a_sealed_memory_opened_without_the_key_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        _in_process(loom).append("alice", [MemoryEntry(content="private")])
    with Loom(url) as keyless, pytest.raises(EncryptionOffError):
        _in_process(keyless)  # never projected as if the key were empty


def test_unknown_or_malformed_keys_are_refused_and_write_nothing(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        memory = _in_process(loom)
        memory.append("alice", [MemoryEntry(content="x")])
        memory.clear("carol")  # a stream with no entries: nothing to erase
        at = loom.log.position
        for value in ("memory:nobody", "other:alice", "memory:carol", "alice", ":alice"):
            with pytest.raises(ErasureSubjectError):
                loom.erase(memory_key=value, reason="r", by="dpo")
        with pytest.raises(ErasureSubjectError):  # two subjects named at once
            loom.erase(memory_key="memory:alice", document="s:d", reason="r", by="dpo")
        assert loom.log.position == at and forget_events(loom) == []
        loom.erase(memory_key="memory:alice", reason="r", by="dpo")
        at = loom.log.position
        with pytest.raises(ErasureSubjectError, match="already erased"):
            loom.erase(memory_key="memory:alice", reason="r", by="dpo")
        assert loom.log.position == at


def test_entries_written_before_encryption_are_listed_not_erasable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as clear:
        _in_process(clear).append("alice", [MemoryEntry(content="in clear")])
        with pytest.raises(EncryptionOffError):
            clear.erase(memory_key="memory:alice", reason="r", by="dpo")
    with Loom(url, encryption=KEY) as loom:
        memory = _in_process(loom)
        subject = memory_subject("memory", "alice")
        plan = loom.erase(memory_key="memory:alice", reason="r", by="dpo", dry_run=True)
        assert plan.subjects == () and plan.not_erasable == (f"{subject}@1",)
        memory.append("alice", [MemoryEntry(content="sealed")])
        report = loom.erase(memory_key="memory:alice", reason="r", by="dpo")
        assert [s.events for s in report.subjects] == [1]
        assert report.not_erasable == (f"{subject}@1",)
        memory.catch_up()
        assert memory.read("alice") == []  # the projection forgets the clear entry too


def test_a_long_key_is_named_by_digest_and_still_forgotten(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    key = "k" * 400
    with Loom(url, encryption=KEY) as loom:
        memories = [_sql(loom), _in_process(loom)]
        memories[0].append(key, [MemoryEntry(content="long")])
        memories[0].append("short", [MemoryEntry(content="kept")])
        subject = memory_subject("memory", key)
        assert subject.startswith("memory:sha256:") and len(subject) < 300
        loom.erase(memory_key=f"memory:{key}", reason="r", by="dpo")
        for memory in memories:
            memory.catch_up()
            assert memory.read(key) == [] and len(memory.read("short")) == 1


def test_a_write_after_another_process_erased_the_key_is_refused(db_url: str) -> None:
    with Loom(db_url, encryption=KEY) as loom, Loom(db_url, encryption=KEY) as other:
        memory = _sql(loom)
        memory.append("alice", [MemoryEntry(content="first")])  # its key is cached here
        before = loom.log.position
        other.erase(memory_key="memory:alice", reason="r", by="dpo")
        memory.rebuild(upto=before)  # as of before the erasure, with the key still cached
        assert memory.read("alice") == []  # the cache does not outlive the key
        at = loom.log.position
        with pytest.raises(SubjectErasedError):
            memory.append("alice", [MemoryEntry(content="second")])
        assert loom.log.position == at
        memory.catch_up()
        assert memory.read("alice") == []
        memory.close()


def test_each_entry_is_sealed_for_its_place(tmp_path: Path) -> None:
    """An entry's associated data names the key, the event's version and its slot: the same
    text in two slots is two different ciphertexts, and none is the clear JSON."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url, encryption=KEY) as loom:
        memory = _in_process(loom)
        same = MemoryEntry(content="same", id="x")
        memory.append("alice", [same, same])
        [event] = loom.log.events(memory_stream("memory", "alice"))
        assert isinstance(event, MemoryAppended)
        first, second = (bytes(raw) for raw in event.entries)
        assert first != second and first.startswith(b'"loom.sealed:')
        assert memory.read("alice") == [same, same]


def test_the_cli_erases_a_memory_key_dry_run_first_then_with_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        memory = _sql(loom)
        memory.append("alice", [MemoryEntry(content="private")])
        memory.close()
    runner = CliRunner()
    args = ["erase", "--memory-key", "memory:alice", "--reason", "request", "--db", url]
    dry = runner.invoke(app, args)
    assert dry.exit_code == 0, dry.output
    assert "would erase 1 memory key(s) of memory_key=memory:alice" in dry.output
    applied = runner.invoke(app, [*args, "--apply", "--json"])
    assert applied.exit_code == 0, applied.output
    assert '"applied": true' in applied.output and '"execution_id": null' in applied.output
    unknown = runner.invoke(
        app, ["erase", "--memory-key", "memory:nobody", "--reason", "r", "--db", url]
    )
    assert unknown.exit_code == 2 and "holds no entries" in unknown.output
    verify = runner.invoke(app, ["verify", "--db", url])
    assert verify.exit_code == 0, verify.output


def test_a_vector_memory_seals_its_entries_and_forgets_an_erased_key(db_url: str) -> None:
    """The vector memory's projection opens sealed entries (and so does the indexing of a new
    store, which reads the log's entries to record their vectors); an erased key's entries
    leave the store and its searches, live and rebuilt."""
    from loom_memory import (
        EventSourcedVectorMemory,
        HashingEmbedder,
        PostgresVectorStore,
        SqliteVectorStore,
    )

    def vector_memory(loom: Loom, prefix: str) -> EventSourcedVectorMemory:
        engine = loom.log.engine
        cls = PostgresVectorStore if engine.dialect.name == "postgresql" else SqliteVectorStore
        store = cls(engine, embedder=HashingEmbedder(), min_score=0.1, table_prefix=prefix)
        return EventSourcedVectorMemory(loom, store=store)

    secret = f"SECRET-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom:
        memory = vector_memory(loom, "vec_")
        memory.append("alice", [MemoryEntry(content=f"address {secret} on elm road", id="a")])
        memory.append("bob", [MemoryEntry(content="bob likes elm trees", id="b")])
        assert [e.id for e, _ in memory.search_scored("alice", "elm road")] == ["a"]
        later = vector_memory(loom, "vec2_")  # indexed from the log's sealed entries
        assert [e.id for e, _ in later.search_scored("alice", "elm road")] == ["a"]

        loom.erase(memory_key="memory:alice", reason="r", by="dpo")
        for opened in (memory, later):
            opened.catch_up()
            assert opened.read("alice") == [] and opened.search_scored("alice", "elm") == []
            assert [e.id for e, _ in opened.search_scored("bob", "elm trees")] == ["b"]
            opened.rebuild()
            assert opened.read("alice") == [] and len(opened.read("bob")) == 1
        fresh = vector_memory(loom, "vec3_")  # a new store after the erasure
        assert fresh.read("alice") == [] and len(fresh.read("bob")) == 1


def test_a_write_racing_the_erasure_is_refused_in_its_append(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that read its key live just before another process erased it is refused by
    its own append, which reads the key row in its transaction (SubjectErasedError naming the
    forget event): nothing is stored under the destroyed key, no store holds it, and a
    rebuild agrees (ADR 0060, amended 2026-12-02 "erasurerev"; before, the append went in
    after the forget event and the write reported success for an entry no one could read)."""
    from loom_memory import event_sourced

    racing = f"RACING-{uuid4().hex}"
    with Loom(db_url, encryption=KEY) as loom, Loom(db_url, encryption=KEY) as other:
        memory = _sql(loom)
        memory.append("alice", [MemoryEntry(content="first")])
        original = event_sourced.write_key

        def erased_meanwhile(*args: object, **kwargs: object) -> object:
            aead = original(*args, **kwargs)  # type: ignore[arg-type]
            other.erase(memory_key="memory:alice", reason="r", by="dpo")
            return aead

        monkeypatch.setattr(event_sourced, "write_key", erased_meanwhile)
        with pytest.raises(SubjectErasedError) as refused:
            memory.append("alice", [MemoryEntry(content=racing)])
        monkeypatch.undo()
        [(forget_at, _)] = forget_events(loom)
        assert refused.value.position == forget_at
        assert loom.log.position == forget_at  # nothing appended after the forget event
        memory.catch_up()  # the forget event, appended by the other process
        assert memory.read("alice") == [] and memory.search("alice", racing) == []
        memory.rebuild()
        assert memory.read("alice") == []
        with pytest.raises(SubjectErasedError):
            memory.append("alice", [MemoryEntry(content="third")])
        memory.close()
    assert _raw(db_url).count(racing.encode()) == 0


@pytest.mark.parametrize("key", [None, KEY], ids=["clear", "sealed"])
def test_an_entry_is_redacted_before_it_is_sealed(tmp_path: Path, key: MasterKey | None) -> None:
    """Sealing does not replace redaction (ADR 0012): a secret in an entry is stored redacted
    whether the log is encrypted or not, so the store reads back the same entry."""
    secret = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=key) as loom:
        memory = _in_process(loom)
        memory.append("alice", [MemoryEntry(content=f"my key is {secret}", id="a")])
        [entry] = memory.read("alice")
        assert isinstance(entry.content, str) and "MIIEvQIBADAN" not in entry.content
        assert entry.content.startswith("my key is ")


@pytest.mark.parametrize(
    "options",
    [{"tokenizer": Tokenizer(stemmer="english")}, {"postings": True}],
    ids=["stemmed", "postings"],
)
def test_an_erasure_purges_a_store_built_with_options_nobody_opens_again(
    db_url: str, options: dict[str, Any]
) -> None:
    """The erasure opens every SQL memory store it finds in the database to purge it. It
    opened each with the default options, so a stemmed store refused to open (and kept the
    erased entries until someone opened it right), and a postings store was opened without
    its postings, so the entries it caught up on were never found by its own search. It
    opens each as it was built now."""
    url = db_url
    sql = PostgresMemoryStore if "postgresql" in url else SqliteMemoryStore
    with Loom(url, encryption=KEY) as loom:
        memory = EventSourcedMemory(loom, store=sql(loom.log.engine, **options))
        memory.append("dave", [MemoryEntry(content="card zzdaveterm", id="d")])
        memory.append("erin", [MemoryEntry(content="mail zzerinterm", id="e")])
        memory.close()
        # Written through another projection: the SQL store first sees it in the erasure.
        _in_process(loom).append("erin", [MemoryEntry(content="note zzlaterterm", id="l")])
    with Loom(url, encryption=KEY) as loom:
        report = loom.erase(memory_key="memory:dave", reason="r", by="dpo")
    assert report.unpurged == ()
    rows = _table_rows(url)
    assert "zzerinterm" in rows
    assert "zzdaveterm" not in rows
    with Loom(url, encryption=KEY) as loom:
        memory = EventSourcedMemory(loom, store=sql(loom.log.engine, **options))
        assert [e.id for e in memory.search("erin", "zzerinterm")] == ["e"]
        assert [e.id for e in memory.search("erin", "zzlaterterm")] == ["l"]
        assert memory.read("dave") == []
        memory.close()


def test_a_store_that_cannot_be_opened_does_not_keep_the_others_from_forgetting(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two SQL memory stores hold the erased key's text; one cannot be opened here (its
    recorded tokenizer names a stemmer this environment lacks). The other still forgets it,
    and the report names only the one that could not, by its store; so does the warning
    logged (it named ``loom_memory`` alone, the name's first part)."""
    url = db_url
    _two_stores_one_unopenable(url)
    with Loom(url, encryption=KEY) as loom:
        report = loom.erase(memory_key="memory:dave", reason="r", by="dpo")
    [unpurged] = report.unpurged
    name, _, cause = unpurged.partition(": ")
    assert name.startswith("loom_memory:") and name.endswith(":broken_")
    assert "stem:klingon" in cause
    assert f"read model {name} did not catch up" in caplog.text
    kept, broken = _table_rows(url, "kept_"), _table_rows(url, "broken_")
    assert "_dave" not in kept  # each store projects the memory's every key: both purged
    assert "zzkept_dave" in broken  # what the report says is left, for doctor to catch up


def _two_stores_one_unopenable(url: str) -> None:
    """Two SQL stores of one memory holding dave's entries; ``broken_`` records a tokenizer
    this loom does not know, so it cannot be opened here."""
    sql = PostgresMemoryStore if "postgresql" in url else SqliteMemoryStore
    with Loom(url, encryption=KEY) as loom:
        for prefix in ("kept_", "broken_"):
            memory = EventSourcedMemory(loom, store=sql(loom.log.engine, table_prefix=prefix))
            memory.append("dave", [MemoryEntry(content=f"card zz{prefix}dave", id="d")])
            memory.close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE broken_settings SET value = 'stem:klingon'"))
    engine.dispose()


def test_doctor_reports_a_store_that_cannot_be_opened_and_checks_the_others(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_stores_one_unopenable(db_url)
    from loom_runtime.tools.cli import app

    monkeypatch.setenv("LOOM_MASTER_KEY", base64.b64encode(b"m" * 32).decode())  # KEY's bytes
    result = CliRunner().invoke(app, ["doctor", "--db", db_url])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert any(
        re.match(r"FAIL projection loom_memory:\S+:broken_: cannot be opened: .*klingon", line)
        for line in lines
    ), result.stdout
    assert any(re.match(r"ok   projection loom_memory:\S+:kept_: ", line) for line in lines)


def test_the_report_names_the_executions_that_recalled_the_key(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flow's recorded recall keeps a copy of the key's entries under the execution's own
    key, which erasing the memory key does not reach. A document's erasure names such
    executions (``held_by``, ADR 0055); a memory key's named none, so a data-protection
    officer read "nothing else holds it" (noted by a memory review). Now it names the
    executions whose recalls returned one of the key's entries, and only those."""
    from loom_memory import TieredMemory
    from loom_runtime import FlowContext
    from loom_runtime.tools.cli import app

    with Loom(db_url, encryption=KEY) as loom:
        tiers = TieredMemory(EventSourcedMemory(loom))

        @loom.flow("chat")
        def chat(ctx: FlowContext, user: str) -> int:
            tiers.remember("semantic", user, [MemoryEntry(content=f"{user} likes tea")])
            return len(tiers.recall("semantic", user, 5, decide=ctx.decide))

        @loom.flow("quiet")
        def quiet(ctx: FlowContext, user: str) -> int:
            return len(tiers.read("semantic", user))  # read, not recorded: holds no copy

        alice = str(loom.run("chat", user="alice").execution_id)
        bob = str(loom.run("chat", user="bob").execution_id)
        loom.run("quiet", user="alice")
        key = "memory:tier/semantic/alice"
        dry = loom.erase(memory_key=key, reason="request", by="dpo", dry_run=True)
        assert [s.held_by for s in dry.subjects] == [(alice,)], (dry, bob)
        monkeypatch.setenv("LOOM_MASTER_KEY", base64.b64encode(b"m" * 32).decode())
        cli = CliRunner().invoke(
            app, ["erase", "--memory-key", key, "--reason", "r", "--db", db_url]
        )
        assert f"recalled by execution {alice}" in cli.output, cli.output
        report = loom.erase(memory_key=key, reason="request", by="dpo")
        assert [s.held_by for s in report.subjects] == [(alice,)]
        assert loom.replay(bob).identical  # the control: another key's recall is untouched


def test_recalled_by_names_neither_the_executions_erased_with_it_nor_another_keys(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regression review of the report above: ``--user alice --memory-key K`` told the
    officer to erase, "too", alice's own execution that the same erasure covers; the same
    entry written at two keys (a seeded welcome message, one timestamp) named bob's recall
    under alice's key; and every memory key read the whole log again (20 keys: 40 s)."""
    from datetime import UTC, datetime

    import loom_runtime.erasure as erasure
    from loom_memory import TieredMemory
    from loom_runtime import FlowContext, Labels

    welcome = MemoryEntry(content="welcome!", timestamp=datetime(2026, 1, 1, tzinfo=UTC))
    scans: list[str] = []
    scan = erasure._holding

    def counted(loom: Loom, kind: str) -> Any:
        scans.append(kind)
        return scan(loom, kind)

    monkeypatch.setattr(erasure, "_holding", counted)
    with Loom(db_url, encryption=KEY) as loom:
        tiers = TieredMemory(EventSourcedMemory(loom))

        @loom.flow("greet")
        def greet(ctx: FlowContext, user: str) -> int:
            return len(tiers.recall("semantic", user, 5, decide=ctx.decide))

        for user in ("alice", "bob", "carol"):
            tiers.remember("semantic", user, [welcome])
        alice = str(loom.run("greet", user="alice", labels=Labels(user="alice")).execution_id)
        bob = str(loom.run("greet", user="bob", labels=Labels(user="bob")).execution_id)
        keys = [f"memory:tier/semantic/{user}" for user in ("alice", "bob", "carol")]
        alone = loom.erase(memory_key=keys[0], reason="r", by="dpo", dry_run=True)
        assert [s.held_by for s in alone.subjects] == [(alice,)], bob  # not bob's recall
        scans.clear()
        both = loom.erase(user="alice", memory_keys=keys, reason="r", by="dpo", dry_run=True)
        held = {s.subject: s.held_by for s in both.subjects if s.execution_id is None}
        assert held == {memory_subject("memory", k.split(":", 1)[1]): () for k in keys[:1]} | {
            memory_subject("memory", keys[1].split(":", 1)[1]): (bob,),
            memory_subject("memory", keys[2].split(":", 1)[1]): (),
        }
        assert scans == ["memory"]  # one read of the log for the three keys
