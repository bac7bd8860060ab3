"""A Loom opened without the master key on an encrypted log (ADR 0049, "Writes").

The claims, on SQLite and PostgreSQL: once a log holds one sealed execution, a keyless Loom's
writes of personal data (a new execution, an imported bundle, a memory entry, a document's
text) are refused with ``EncryptionOffError`` naming the fix, and the log's position does not
move; the same Loom still verifies, lists, reads clear executions and replays bundles; and on
a log never encrypted it records exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_memory import EventSourcedMemory, InMemoryMemoryStore, MemoryEntry
from loom_runtime import EncryptionOffError, FlowContext, Loom, MasterKey

KEY = MasterKey(b"k" * 32)
FIX = r"encryption=MasterKey\.from_env\(\)"


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return str(ctx.decide("shout", lambda: text.upper()))


def _encrypted_log(db_url: str, tmp_path: Path) -> tuple[str, Path]:
    """A log with one clear execution (exported as a bundle), then one sealed execution."""
    with Loom(db_url) as clear:
        _register(clear)
        early = clear.run("note", text="before encryption")
        bundle = clear.export(early.execution_id, tmp_path / "early.json")
    with Loom(db_url, encryption=KEY) as sealed:
        _register(sealed)
        sealed.run("note", text="alice's secret")
    return str(early.execution_id), bundle


def _other_bundle(tmp_path: Path) -> Path:
    """A bundle of an execution the encrypted log does not hold."""
    with Loom(f"sqlite:///{tmp_path / 'elsewhere.db'}") as elsewhere:
        _register(elsewhere)
        run = elsewhere.run("note", text="bob's secret")
        return elsewhere.export(run.execution_id, tmp_path / "other.json")


def _start(loom: Loom, tmp_path: Path) -> None:
    loom.run("note", text="written without a key")


def _import(loom: Loom, tmp_path: Path) -> None:
    loom.import_bundle(_other_bundle(tmp_path))


def _remember(loom: Loom, tmp_path: Path) -> None:
    memory = EventSourcedMemory(loom, store=InMemoryMemoryStore())
    memory.append("alice", [MemoryEntry(content="my address is 1 Main St", id="a1")])


def _put_doc(loom: Loom, tmp_path: Path) -> None:
    open_knowledge_base(loom, "people").put_doc(Doc(id="alice", title="Alice", text="lives here"))


def _sync(loom: Loom, tmp_path: Path) -> None:
    open_knowledge_base(loom, "people").sync(
        [Doc(id="bob", title="Bob", text="lives there")], source="feed"
    )


WRITES: dict[str, Callable[[Loom, Path], None]] = {
    "start": _start,
    "import": _import,
    "memory": _remember,
    "put_doc": _put_doc,
    "sync": _sync,
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_keyless_write_to_an_encrypted_log_is_refused_and_writes_nothing(
    db_url: str, tmp_path: Path, write: str
) -> None:
    _encrypted_log(db_url, tmp_path)
    with Loom(db_url) as keyless:
        _register(keyless)
        before = keyless.log.position
        with pytest.raises(EncryptionOffError, match=FIX):
            WRITES[write](keyless, tmp_path)
        assert keyless.log.position == before
    with Loom(db_url) as reopened:  # nothing committed behind the refusal either
        assert reopened.log.position == before


def test_a_keyless_loom_still_reads_an_encrypted_log(db_url: str, tmp_path: Path) -> None:
    early, bundle = _encrypted_log(db_url, tmp_path)
    with Loom(db_url) as keyless:
        _register(keyless)
        with pytest.raises(EncryptionOffError):  # the refusal is cached, reads go on after it
            _start(keyless, tmp_path)
        assert keyless.log.verify().problem is None
        assert len(keyless.executions()) == 2
        assert keyless.execution(early).output is not None
        assert keyless.replay(early).identical
        assert keyless.replay_bundle(bundle).identical
        assert keyless.import_bundle(bundle) == keyless.execution(early).id  # held: no write


def test_a_keyless_loom_records_as_before_on_a_log_never_encrypted(
    db_url: str, tmp_path: Path
) -> None:
    with Loom(db_url) as keyless:
        _register(keyless)
        before = keyless.log.position
        for write in WRITES.values():
            write(keyless, tmp_path)
        assert keyless.log.position > before
        assert len(keyless.executions()) == 2  # started and imported
        assert keyless.log.verify().problem is None
