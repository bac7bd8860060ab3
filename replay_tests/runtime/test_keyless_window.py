"""A keyless Loom whose log is encrypted by another process while it runs (ADR 0049,
"Writes").

The claims: a Loom opened without the master key records in clear while its log has no key
table; once another Loom, holding the key, switches encryption on (its first sealed write),
the keyless Loom's next write of each kind (a new execution, an import, a memory entry, a
``put_doc``, a ``sync``) is refused with ``EncryptionOffError`` and the log's position does
not move. The look for the key table is read inside the append's own transaction (SQLite and
PostgreSQL), so encryption switched on between the writer's preparing a batch and its append
still refuses that batch: no window lets it land in clear.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from loom_knowledge import Doc, KnowledgeBase, open_knowledge_base
from loom_memory import EventSourcedMemory, InMemoryMemoryStore, MemoryEntry
from loom_runtime import EncryptionOffError, Loom
from replay_tests.runtime.test_keyless_writes import FIX, KEY, _register


class _Keyless:
    """A keyless Loom and the memory and knowledge base it writes through, kept open: the
    refusals must reach objects already used on the clear log, not only fresh ones."""

    def __init__(self, loom: Loom, tmp_path: Path) -> None:
        _register(loom)
        self.loom = loom
        self.tmp_path = tmp_path
        self.memory = EventSourcedMemory(loom, store=InMemoryMemoryStore())
        self.kb: KnowledgeBase = open_knowledge_base(loom, "people")
        self.writes = 0

    def _fresh(self) -> str:
        self.writes += 1
        return f"w{self.writes}"

    def start(self) -> None:
        self.loom.run("note", text="written without a key")

    def imported(self) -> None:
        name = self._fresh()
        with Loom(f"sqlite:///{self.tmp_path / f'{name}.db'}") as elsewhere:
            _register(elsewhere)
            run = elsewhere.run("note", text=f"{name}'s secret")
            bundle = elsewhere.export(run.execution_id, self.tmp_path / f"{name}.json")
        self.loom.import_bundle(bundle)

    def remember(self) -> None:
        name = self._fresh()
        self.memory.append("alice", [MemoryEntry(content=f"my address, {name}", id=name)])

    def put_doc(self) -> None:
        name = self._fresh()
        self.kb.put_doc(Doc(id=name, title=name, text=f"lives at {name}"))

    def sync(self) -> None:
        name = self._fresh()
        self.kb.sync([Doc(id=name, title=name, text=f"lives at {name}")], source=f"feed-{name}")

    def kinds(self) -> dict[str, Callable[[], None]]:
        return {
            "start": self.start,
            "import": self.imported,
            "memory": self.remember,
            "put_doc": self.put_doc,
            "sync": self.sync,
        }


KINDS: Sequence[str] = ("start", "import", "memory", "put_doc", "sync")


def _switch_on(db_url: str) -> int:
    """Another Loom, holding the master key, makes the log's first sealed write; the log's
    position after it."""
    with Loom(db_url, encryption=KEY) as sealed:
        _register(sealed)
        sealed.run("note", text="alice's secret")
        return sealed.log.position


def test_a_keyless_loom_is_refused_once_another_loom_switches_encryption_on(
    db_url: str, tmp_path: Path
) -> None:
    with Loom(db_url) as loom:
        keyless = _Keyless(loom, tmp_path)
        for write in keyless.kinds().values():  # the log is clear: each kind is recorded
            before = loom.log.position
            write()
            assert loom.log.position > before
        _switch_on(db_url)
        for kind, write in keyless.kinds().items():
            before = loom.log.position
            with pytest.raises(EncryptionOffError, match=FIX):
                write()
            assert loom.log.position == before, kind
    with Loom(db_url) as reopened:  # nothing committed behind the refusals either
        assert reopened.log.position == before
        assert reopened.log.verify().problem is None


@pytest.mark.parametrize("kind", KINDS)
def test_encryption_switched_on_just_before_a_keyless_append_refuses_that_append(
    db_url: str, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window: the keyless Loom has prepared its batch when another process switches
    encryption on; the append itself must refuse it (on PostgreSQL, the server-side append
    function reads the precondition in the statement's own transaction)."""
    with Loom(db_url) as loom:
        keyless = _Keyless(loom, tmp_path)
        keyless.remember()  # the log exists and is clear; the keyless Loom has written to it
        recorder: Any = loom.log.application.recorder  # type: ignore[attr-defined]
        insert_events = recorder.insert_events

        switched: list[int] = []

        def switched_on_first(*args: Any, **kwargs: Any) -> Any:
            monkeypatch.setattr(recorder, "insert_events", insert_events)
            switched.append(_switch_on(db_url))
            return insert_events(*args, **kwargs)

        monkeypatch.setattr(recorder, "insert_events", switched_on_first)
        with pytest.raises(EncryptionOffError, match=FIX):
            keyless.kinds()[kind]()
        assert switched  # the append was reached: the refusal is the append's own
        assert loom.log.position == switched[0]  # nothing after the sealed execution
    with Loom(db_url) as reopened:
        assert reopened.log.position == switched[0]
        assert reopened.log.verify().problem is None
