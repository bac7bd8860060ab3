"""In a sealed execution a personal field is sealed or ``null``, never clear (ADR 0049, amended
2026-12-04 "downgrade").

AES-GCM refuses a sealed field that was altered or moved (``LogCorruptError``). But the
opener read a field that was not sealed as clear, so an edit that replaced a sealed value with
a clear one (no key needed) was answered by a replay as if recorded: a forged answer, and with
the output replaced too, a forged "identical". The same held for a message, an output and a
decision's input, and for an execution input whose envelope no longer decoded (the whole
execution then read as clear, and an erasure skipped it as "recorded in clear").
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from loom_runtime import ErasedError, FlowContext, Labels, Loom, MasterKey
from loom_runtime import bundle as bundle_module
from loom_runtime.backoff import Backoff
from loom_runtime.errors import BundleFormatError, LogCorruptError

KEY = MasterKey(b"k" * 32)
NO_PAUSE = Backoff(attempts=2, first_pause=0.0, max_pause=0.0)
USER = Labels(user="u")


def _register(loom: Loom, *, broken: bool) -> None:
    @loom.flow("ask")
    def ask(ctx: FlowContext, question: str) -> str:
        attempts: list[int] = []

        def answer() -> str:
            attempts.append(1)
            if len(attempts) == 1:
                raise TimeoutError("slow")  # a retried attempt: the decision gets a meta
            return f"about {question}"

        def lookup() -> str:
            raise ConnectionError(f"cannot reach the records of {question}")

        found = ctx.decide("answer", answer, input={"q": question}, retry=NO_PAUSE)
        if broken:
            ctx.decide("lookup", lookup, input={"q": question})
        return found


def _record(path: Path) -> tuple[Any, Any]:
    """A completed and a failed sealed execution of ``ask`` in the log at ``path``."""
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom, broken=False)
        done = loom.run("ask", labels=USER, question="alice").execution_id
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom, broken=True)
        with pytest.raises(ConnectionError):
            loom.run("ask", labels=USER, question="bob")
        failed = next(s.execution_id for s in loom.executions() if s.execution_id != done)
    return done, failed


def _edit(path: Path, execution_id: Any, topic: str, field: str, stored: bytes) -> None:
    """Replace ``field`` of the execution's ``topic`` event with the JSON ``stored``, in place
    (the chain is not recomputed: a replay does not read it; ``loom verify`` would)."""
    with sqlite3.connect(path) as connection:
        [(rowid, state)] = connection.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_id = ? AND topic = ?",
            (execution_id.hex, topic),
        ).fetchall()
        fields = msgspec.json.decode(state, type=dict[str, msgspec.Raw])
        assert field in fields, f"{topic} has no {field}"
        fields[field] = msgspec.Raw(stored)
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?",
            (msgspec.json.encode(fields), rowid),
        )


EDITS = [
    ("done", "loom.execution.DecisionRecorded", "value", b'"forged"'),
    ("done", "loom.execution.DecisionRecorded", "input", b'{"q":"forged"}'),
    ("done", "loom.execution.DecisionRecorded", "input", b"1"),  # shorter than a sealed head
    ("done", "loom.execution.DecisionRecorded", "meta", b'{"attempts":[]}'),
    ("done", "loom.execution.Completed", "output", b'"forged"'),
    ("failed", "loom.execution.DecisionFailed", "message", b'"forged"'),
    ("failed", "loom.execution.Failed", "message", b'"forged"'),
    ("done", "loom.execution.DecisionRecorded", "value", b'{"loom.sealed":"forged"}'),
]


@pytest.mark.parametrize(
    ("which", "topic", "field", "stored"),
    EDITS,
    ids=[f"{t.rsplit('.', 1)[1]}.{f}={s.decode()}" for _, t, f, s in EDITS],
)
def test_a_clear_field_in_a_sealed_execution_is_refused_as_corrupt(
    tmp_path: Path, which: str, topic: str, field: str, stored: bytes
) -> None:
    path = tmp_path / "loom.db"
    done, failed = _record(path)
    execution_id = done if which == "done" else failed
    _edit(path, execution_id, topic, field, stored)
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom, broken=False)
        with pytest.raises(LogCorruptError, match=str(execution_id)):
            loom.execution(execution_id)
        with pytest.raises(LogCorruptError, match=str(execution_id)):
            loom.export(execution_id, tmp_path / "bundle.json")
        assert loom.replay(done if which == "failed" else failed) is not None  # the other reads


def test_a_sealed_null_field_still_reads(tmp_path: Path) -> None:
    """``null`` stays allowed in clear: a sealer leaves it so (it holds nothing personal), and
    an output of ``None`` is recorded that way."""
    path = tmp_path / "loom.db"
    done, _ = _record(path)
    _edit(path, done, "loom.execution.DecisionRecorded", "input", b"null")
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        value = loom.execution(done).decisions["answer"].input
        assert bytes(value) == b"null"


@pytest.mark.parametrize("flag", [b'"names":1', b'"names":"yes"', b'"subject":7'])
def test_an_execution_input_whose_envelope_does_not_decode_is_refused_as_corrupt(
    tmp_path: Path, flag: bytes
) -> None:
    """Read as clear, the execution's sealed fields were never opened and an erasure skipped
    it as "recorded in clear", leaving its key, and so its data, readable."""
    path = tmp_path / "loom.db"
    done, failed = _record(path)
    with sqlite3.connect(path) as connection:
        [(rowid, state)] = connection.execute(
            "SELECT rowid, state FROM stored_events WHERE originator_id = ? AND topic = ?",
            (done.hex, "loom.execution.Created"),
        ).fetchall()
        original = b'"names":true' if flag.startswith(b'"names"') else b'"subject":"execution:'
        assert original in state
        edited = state.replace(
            original, flag + (b',"x":"execution:' if b"subject" in flag else b"")
        )
        connection.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (edited, rowid))
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        with pytest.raises(LogCorruptError, match=str(done)):
            loom.execution(done)
        # Erased all the same, by its key (the key table says it was sealed), and one altered
        # execution does not stop the erasure of the others selected with it.
        report = loom.erase(user="u", reason="request", by="dpo")
        assert {s.execution_id for s in report.subjects} == {str(done), str(failed)}
        with pytest.raises(ErasedError):
            loom.execution(failed)
        with pytest.raises((ErasedError, LogCorruptError)):
            loom.export(done, tmp_path / "done.json")
        assert not loom.erase(user="u", reason="again", by="dpo", dry_run=True).subjects


@pytest.mark.parametrize("key", [None, KEY], ids=["clear log", "encrypted log"])
def test_a_bundle_whose_input_holds_the_sealed_mark_is_refused(
    tmp_path: Path, key: MasterKey | None
) -> None:
    """An export opens every sealed field, and no flow's input begins with the mark (it is
    keyed by parameter names), so a bundle whose input does was crafted. Imported, it read
    as a sealed execution that never opens (or, malformed, as a corrupt log)."""
    with Loom(f"sqlite:///{tmp_path / 'source.db'}") as loom:
        _register(loom, broken=False)
        run = loom.run("ask", question="alice")
        loom.export(run.execution_id, tmp_path / "run.json")
    original = bundle_module.read_bundle(tmp_path / "run.json")
    first, *rest = original.events
    state = msgspec.json.decode(first.state)
    state["input"] = {"loom.sealed": {"subject": f"execution:{run.execution_id}"}}
    edited = msgspec.structs.replace(first, state=msgspec.json.encode(state).decode())
    bundle_module.write_bundle(original.resealed([edited, *rest]), tmp_path / "crafted.json")
    with Loom(f"sqlite:///{tmp_path / 'target.db'}", encryption=key) as loom:
        with pytest.raises(BundleFormatError, match="sealed mark"):
            loom.import_bundle(tmp_path / "crafted.json")
        assert loom.executions() == []
        with pytest.raises(BundleFormatError, match="sealed mark"):
            loom.replay_bundle(tmp_path / "crafted.json")


def test_a_reopened_failures_clear_message_is_refused_as_corrupt(tmp_path: Path) -> None:
    """A reopened failure is shown by its message (``executions show``), though its ``Failed``
    event is no longer the execution's end: read as it was, a clear one showed as recorded."""
    path = tmp_path / "loom.db"
    _, failed = _record(path)
    with Loom(f"sqlite:///{path}", encryption=KEY) as loom:
        _register(loom, broken=False)
        loom.resume(failed, retry_failed=True)
        assert loom.execution(failed).reopenings[0].message == "(sealed)"
    _edit(path, failed, "loom.execution.Failed", "message", b'"forged"')
    with (
        Loom(f"sqlite:///{path}", encryption=KEY) as loom,
        pytest.raises(LogCorruptError, match="reopened failure"),
    ):
        loom.execution(failed)
