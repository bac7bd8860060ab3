"""An erasure leaves none of a document's or a memory key's text in SQLite's files (ADR 0049,
amended "free pages").

Documents' passages and memory entries are read models in clear (the log holds them sealed):
an erasure deletes them from their tables. That text stayed in the files two ways: in the
``-wal`` file, which SQLite's own checkpoints (PASSIVE) copy from but never empty, and, where
SQLite runs with ``secure_delete`` OFF (upstream SQLite's compiled default; Debian's build,
which this suite runs on, defaults it ON, which hid it), in the main file's free space and
free pages. These tests open every connection as upstream SQLite would (OFF), and checkpoint
only as SQLite does or as an operator would (``TRUNCATE``), never ``VACUUM``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from sqlalchemy.engine import make_url

from loom_knowledge import Doc, open_knowledge_base
from loom_memory import EventSourcedMemory, MemoryEntry, SqliteMemoryStore
from loom_runtime import Loom, MasterKey
from loom_runtime.tools.erase_cli import _exit_if_unpurged

KEY = MasterKey(b"r" * 32)
ERASED = (b"Zyxwvu", b"Qwertyplace", b"Plughfrobnicate")
"""Planted in the erased document (the first two) and the erased memory key's entry."""
KEPT = (b"Nightlyrotation", b"Emailpreferred")
"""Planted in a document and a memory key that are not erased: the control."""


@pytest.fixture
def secure_delete_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SQLite connection opens with ``secure_delete`` OFF, as upstream SQLite's do; what
    loom then sets on its own connections is what counts."""
    opened = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = opened(*args, **kwargs)
        connection.execute("PRAGMA secure_delete=OFF")
        return connection

    # SQLAlchemy's driver connects through ``sqlite3.dbapi2``, eventsourcing's through ``sqlite3``
    for module in (sqlite3, sqlite3.dbapi2):
        monkeypatch.setattr(module, "connect", connect)
    for probe in (sqlite3.connect(":memory:"), sqlite3.dbapi2.connect(":memory:")):
        assert probe.execute("PRAGMA secure_delete").fetchone()[0] == 0
        probe.close()


def _files(url: str) -> dict[str, bytes]:
    path = Path(make_url(url).database or "")
    return {p.name: p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name)}


def _found(url: str, words: tuple[bytes, ...]) -> dict[str, list[str]]:
    """Which of ``words`` each of the database's files holds (its main file, -wal, -shm)."""
    pattern = re.compile(b"|".join(words))
    found = {
        name: sorted({m.decode() for m in pattern.findall(data)})
        for name, data in _files(url).items()
    }
    return {name: words for name, words in found.items() if words}


def _checkpoint(url: str) -> None:
    """A TRUNCATE checkpoint, on a connection of its own: what SQLite's automatic checkpoint
    does to the main file in a database of any size, and what the guide tells an operator to
    run. Never a VACUUM, which rewrites the file and so hid what its free pages held."""
    connection = sqlite3.connect(make_url(url).database or "")
    try:
        assert connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        connection.close()


def _recorded(url: str) -> tuple[Loom, EventSourcedMemory]:
    """A Loom with a handbook of two documents and a memory of two keys; one of each is erased
    by the tests, the other kept."""
    loom = Loom(url, encryption=KEY, lock_timeout=0.5)
    open_knowledge_base(loom, "handbook").sync(
        [
            Doc(id="people/carol", title="Carol", text="Carol Zyxwvu lives on Qwertyplace Road."),
            Doc(id="ops/backups", title="Backups", text="Backups: Nightlyrotation at two."),
        ]
    )
    memory = EventSourcedMemory(loom, store=SqliteMemoryStore(loom.log.engine))
    memory.append("dave", [MemoryEntry(content="Dave's card is Plughfrobnicate 4242")])
    memory.append("erin", [MemoryEntry(content="Erin: Emailpreferred")])
    return loom, memory


def _erase(loom: Loom) -> None:
    for named in ({"document": "handbook:people/carol"}, {"memory_key": "memory:dave"}):
        report = loom.erase(**named, reason="art. 17", by="dpo")
        assert report.applied and report.unpurged == (), report.unpurged


def test_no_page_of_the_file_keeps_the_erased_text_without_a_vacuum(
    sqlite_url: str, secure_delete_off: None
) -> None:
    """The text reached the main file (checkpointed, as in any database past a thousand WAL
    pages), then was erased and checkpointed again: no page of it, free or not, still holds
    it. It did with secure_delete OFF: the deleted rows' cells and the freed pages kept it."""
    loom, memory = _recorded(sqlite_url)
    try:
        _checkpoint(sqlite_url)
        before = _found(sqlite_url, ERASED + KEPT)
        assert set(before) == {"loom.db"} and len(before["loom.db"]) == 5, before
        _erase(loom)
    finally:
        memory.close()
        loom.close()
    _checkpoint(sqlite_url)
    assert _found(sqlite_url, ERASED) == {}
    assert _found(sqlite_url, KEPT) == {"loom.db": ["Emailpreferred", "Nightlyrotation"]}


def test_the_wal_holds_no_erased_text_when_erase_returns(
    sqlite_url: str, secure_delete_off: None
) -> None:
    """Right after ``erase`` returns, with no checkpoint of anyone's, the application going on:
    the text written since the last checkpoint was in the -wal file, and SQLite's own
    (PASSIVE) checkpoints copy pages out of it without emptying it, so it stayed there until
    an operator's TRUNCATE checkpoint or VACUUM."""
    loom, memory = _recorded(sqlite_url)
    try:
        assert "loom.db-wal" in _found(sqlite_url, ERASED)  # written, not yet checkpointed
        _erase(loom)
        assert _found(sqlite_url, ERASED) == {}
        assert _found(sqlite_url, KEPT) == {"loom.db": ["Emailpreferred", "Nightlyrotation"]}
        # And the application goes on: what it writes next is in the WAL again, as before.
        open_knowledge_base(loom, "handbook").put_doc(Doc(id="ops/later", text="Laterwrite"))
        assert "loom.db-wal" in _found(sqlite_url, (b"Laterwrite",))
        assert _found(sqlite_url, ERASED) == {}
    finally:
        memory.close()
        loom.close()


def test_a_reader_holding_the_wal_leaves_the_erasure_applied_and_reported(
    sqlite_url: str, secure_delete_off: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checkpoint waits (the lock timeout) for every reader of the WAL; one still reading
    then keeps the WAL as it is. The erasure stands (the keys are destroyed, the read models
    purged) and its report names the WAL in ``unpurged``, as ``loom erase`` prints it; the next
    erasure with no reader empties it."""
    loom, memory = _recorded(sqlite_url)
    reader = sqlite3.connect(make_url(sqlite_url).database or "", isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a snapshot held
        report = loom.erase(document="handbook:people/carol", reason="r", by="dpo")
        assert report.applied and len(report.unpurged) == 1, report.unpurged
        [entry] = report.unpurged
        assert entry.startswith(f"write-ahead log {make_url(sqlite_url).database}-wal: ")
        assert "wal_checkpoint(TRUNCATE)" in entry
        with pytest.raises(typer.Exit):  # as `loom erase` prints it: no read model, no doctor
            _exit_if_unpurged(report)
        printed = " ".join(capsys.readouterr().err.split())
        assert "write-ahead log" in printed and "wal_checkpoint(TRUNCATE)" in printed
        assert "read model" not in printed and "loom doctor" not in printed
        assert open_knowledge_base(loom, "handbook").search("Zyxwvu") == []
        reader.execute("COMMIT")
        again = loom.erase(memory_key="memory:dave", reason="r", by="dpo")
        assert again.unpurged == ()
        assert _found(sqlite_url, ERASED) == {}
    finally:
        reader.close()
        memory.close()
        loom.close()


def _secure_delete_of(connect: Callable[[], Any]) -> int:
    connection = connect()
    try:
        return int(connection.execute("PRAGMA secure_delete").fetchone()[0])
    finally:
        connection.close()


def test_every_connection_loom_opens_for_read_models_overwrites_deletes(
    sqlite_url: str, tmp_path: Path, secure_delete_off: None
) -> None:
    """The log's engine (read models, key table) and a memory store's own engine, opened from
    a URL, both run ``PRAGMA secure_delete=ON``; a plain connection stays as SQLite opens it."""
    with Loom(sqlite_url, encryption=KEY) as loom:
        assert _secure_delete_of(loom.log.engine.raw_connection) == 1
    store = SqliteMemoryStore(f"sqlite:///{tmp_path / 'memory.db'}")
    try:
        assert _secure_delete_of(store.engine.raw_connection) == 1
    finally:
        store.close()
    assert _secure_delete_of(lambda: sqlite3.connect(tmp_path / "plain.db")) == 0
