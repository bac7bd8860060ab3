"""Memory keys by age, and a person's memory keys erased with their executions (ADR 0060,
amended; ADR 0053, amended), on SQLite and PostgreSQL.

The claims: ``retain(older_than=..., memory=NAME)`` erases every key of that memory whose last
write (of any kind) is older than the cutoff, in one forget event naming the keys and never
their content, and keeps keys written since and other memories' keys; a dry run, a second run
and an unknown memory write nothing (counted in log events); the stores forget the erased keys
and a rebuild agrees. ``erase(user=U, memory_keys=[...])`` erases the user's executions and
the named keys in one forget event; one unknown key refuses the whole erasure, nothing
written. Both run from the CLI.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from freezegun import freeze_time
from typer.testing import CliRunner

from loom_memory import EventSourcedMemory, MemoryEntry, PostgresMemoryStore, SqliteMemoryStore
from loom_memory.erasure import memory_subject
from loom_runtime import (
    ErasureSubjectError,
    FlowContext,
    Labels,
    Loom,
    MasterKey,
    RetentionPolicyError,
)
from loom_runtime.erasure import forget_events
from loom_runtime.execution import Forgotten

KEY = MasterKey(b"r" * 32)
NINETY = timedelta(days=90)
SECRET = "card ends in 4242"


def _memory(loom: Loom, name: str = "chat") -> EventSourcedMemory:
    engine = loom.log.engine
    store_class = PostgresMemoryStore if engine.dialect.name == "postgresql" else SqliteMemoryStore
    return EventSourcedMemory(loom, store=store_class(engine, table_prefix=f"{name}_"), name=name)


def _count(loom: Loom) -> int:
    """How many events the log holds: what "writes nothing" is measured by."""
    return sum(1 for _ in loom.log.notifications())


def _history(loom: Loom) -> None:
    """Keys of memory ``chat``: ``old`` written in January only; ``revisited`` written in
    January and removed from in April (its last write is recent); ``young`` written in April.
    Memory ``other`` has a January key too."""
    chat, other = _memory(loom), _memory(loom, "other")
    with freeze_time("2026-01-01T12:00:00Z"):
        chat.append("old", [MemoryEntry(content=f"my {SECRET}", id="o1")])
        chat.append("old", [MemoryEntry(content="and I live in Leeds", id="o2")])
        chat.append("revisited", [MemoryEntry(content="first note", id="r1")])
        other.append("old", [MemoryEntry(content="another memory's note", id="x1")])
    with freeze_time("2026-04-01T12:00:00Z"):
        chat.remove("revisited", ["r1"])
        chat.append("young", [MemoryEntry(content="written in April", id="y1")])
    chat.close()
    other.close()


def test_keys_last_written_before_the_cutoff_are_erased_and_a_rebuild_agrees(
    db_url: str,
) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _history(loom)
        chat = _memory(loom)
        with freeze_time("2026-04-15T12:00:00Z"):  # 104 days after January, 14 after April
            events = _count(loom)
            plan = loom.retain(older_than=NINETY, memory="chat", dry_run=True)
            assert _count(loom) == events  # a dry run writes nothing
            assert not plan.applied
            assert [(s.subject, s.events) for s in plan.subjects] == [
                (memory_subject("chat", "old"), 2)
            ]
            report = loom.retain(older_than=NINETY, memory="chat")
            assert report.applied and _count(loom) == events + 1  # one forget event
            assert report.selector.startswith("keys of memory=chat last written before 2026-01-15")
            (position, forgotten), *_ = forget_events(loom)
            assert position == report.position
            assert forgotten.subjects == ('memory:["chat","old"]',)
            assert forgotten.reason == "retention: older than 90d"
            assert forgotten.by == "retention"
            (row,) = loom.log.notifications(topics=(Forgotten.TOPIC,))
            assert b"4242" not in row.state and b"Leeds" not in row.state  # never content

            chat.catch_up()
            assert chat.read("old") == [] and chat.search("old", "4242") == []
            assert [e.id for e in chat.read("young")] == ["y1"]
            assert chat.read("revisited") == []  # removed, not erased: its key is live
            chat.append("revisited", [MemoryEntry(content="still in use", id="r2")])
            other = _memory(loom, "other")
            assert [e.id for e in other.read("old")] == ["x1"]  # another memory's key
            live = (chat.read("old"), chat.read("young"), chat.read("revisited"))
            chat.rebuild()
            assert (chat.read("old"), chat.read("young"), chat.read("revisited")) == live
            assert loom.log.verify().problem is None

            events = _count(loom)
            again = loom.retain(older_than=NINETY, memory="chat")  # the next night
            assert again.subjects == () and again.already_erased == (memory_subject("chat", "old"),)
            assert _count(loom) == events  # nothing written
        chat.close()
        other.close()


def test_an_unknown_memory_or_a_second_selector_is_refused_with_nothing_written(
    db_url: str,
) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _history(loom)
        events = _count(loom)
        with pytest.raises(ErasureSubjectError, match="no memory named 'chats'"):
            loom.retain(older_than=NINETY, memory="chats")
        with pytest.raises(RetentionPolicyError, match="one selector"):
            loom.retain(older_than=NINETY, memory="chat", tenant="acme")
        with pytest.raises(RetentionPolicyError, match="one selector"):
            loom.retain(older_than=NINETY, memory="chat", scope="handbook")
        assert _count(loom) == events


def test_a_users_memory_keys_are_erased_with_their_executions_in_one_forget_event(
    db_url: str,
) -> None:
    with Loom(db_url, encryption=KEY) as loom:

        @loom.flow("chat")
        def chat_flow(ctx: FlowContext, message: str) -> str:
            return ctx.decide("reply", lambda: f"noted: {message}")

        ran = loom.run("chat", message=SECRET, labels=Labels(user="u-42"))
        kept = loom.run("chat", message="hello", labels=Labels(user="u-7"))
        chat = _memory(loom)
        chat.append("u-42", [MemoryEntry(content=SECRET, id="a")])
        chat.append("u-42/prefs", [MemoryEntry(content="prefers email", id="b")])
        chat.append("u-7", [MemoryEntry(content="hello", id="c")])
        keys = ["chat:u-42", "chat:u-42/prefs"]

        events = _count(loom)
        with pytest.raises(ErasureSubjectError, match="holds no entries"):
            loom.erase(user="u-42", memory_keys=[*keys, "chat:u-99"], reason="r", by="dpo")
        with pytest.raises(ErasureSubjectError, match="of user= or tenant="):
            loom.erase(execution=ran.execution_id, memory_keys=keys, reason="r", by="dpo")
        with pytest.raises(ErasureSubjectError, match="no executions of user=u-99"):
            loom.erase(user="u-99", memory_keys=keys, reason="r", by="dpo")  # a misspelt user
        with pytest.raises(ErasureSubjectError, match="a list of NAME:KEY"):
            loom.erase(user="u-42", memory_keys="chat:u-42", reason="r", by="dpo")
        plan = loom.erase(user="u-42", memory_keys=keys, reason="r", by="dpo", dry_run=True)
        assert _count(loom) == events  # refusals and the dry run wrote nothing
        subjects = [
            f"execution:{ran.execution_id}",
            memory_subject("chat", "u-42"),
            memory_subject("chat", "u-42/prefs"),
        ]
        assert [s.subject for s in plan.subjects] == subjects

        report = loom.erase(user="u-42", memory_keys=keys, reason="request 9", by="dpo")
        assert _count(loom) == events + 1
        assert [e.subjects for _, e in forget_events(loom)] == [tuple(subjects)]
        chat.catch_up()
        assert chat.read("u-42") == [] and chat.read("u-42/prefs") == []
        assert [e.id for e in chat.read("u-7")] == ["c"]
        assert loom.replay(kept.execution_id).identical
        chat.rebuild()
        assert chat.read("u-42") == [] and [e.id for e in chat.read("u-7")] == ["c"]
        assert report.position is not None and loom.log.verify().problem is None
        chat.close()


def test_the_cli_retains_a_memory_and_erases_a_users_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom_runtime.tools.cli import app

    url = f"sqlite:///{tmp_path / 'loom.db'}"
    monkeypatch.setenv("LOOM_MASTER_KEY", MasterKey.generate())
    with Loom(url, encryption=MasterKey.from_env()) as loom:
        _history(loom)

        @loom.flow("greet")
        def greet(ctx: FlowContext, name: str) -> str:
            return f"hello {name}"

        loom.run("greet", name="Ann", labels=Labels(user="ann"))
    runner = CliRunner()
    with freeze_time("2026-04-15T12:00:00Z"):
        args = ["retain", "--older-than", "90d", "--memory", "chat", "--db", url]
        dry = runner.invoke(app, args)
        assert dry.exit_code == 0, dry.output
        assert "would erase 1 memory key(s) of memory=chat" in dry.output
        assert 'memory:["chat","old"]' in dry.output and "dry run" in dry.output
        applied = runner.invoke(app, [*args, "--apply", "--json"])
        assert applied.exit_code == 0, applied.output
        assert json.loads(applied.output)["subjects"][0]["subject"] == 'memory:["chat","old"]'
        unknown = runner.invoke(app, [*args[:3], "--memory", "chats", "--db", url])
        assert unknown.exit_code == 2 and "no memory named" in unknown.output
    erase = ["erase", "--reason", "r", "--db", url]
    both = runner.invoke(app, [*erase, "--memory-key", "chat:young", "--memory-key", "chat:x"])
    assert both.exit_code == 2 and "only with --user or --tenant" in both.output
    one = runner.invoke(app, [*erase, "--memory-key", "chat:young"])
    assert one.exit_code == 0 and "would erase 1 memory key(s)" in one.output
    person = [
        *erase,
        "--user",
        "ann",
        "--memory-key",
        "chat:young",
        "--memory-key",
        "chat:revisited",
    ]
    planned = runner.invoke(app, person)
    assert planned.exit_code == 0, planned.output
    assert "would erase 3 execution(s) and memory key(s) of user=ann and memory_key=" in (
        planned.output
    )
    done = json.loads(runner.invoke(app, [*person, "--apply", "--json"]).stdout)
    assert done["applied"] and len(done["subjects"]) == 3
    verify = runner.invoke(app, ["verify", "--db", url])
    assert verify.exit_code == 0, verify.output
