"""The key table made by a log's first sealed write is the one ``key_table()`` defines, on
SQLite and PostgreSQL (ADR 0049, "Subjects"): switching encryption on now runs the
table's DDL as driver SQL compiled once per dialect, so nothing else says it matches. And on
SQLite the table is looked for without a write lock, and sealed values are untracked."""

from __future__ import annotations

import gc
import sqlite3
from pathlib import Path
from uuid import UUID

import msgspec
from sqlalchemy import inspect

from loom_runtime import FlowContext, Loom, MasterKey
from loom_runtime.sealing import TABLE, Sealed, key_table, seal_raw, subject_of

KEY = MasterKey(b"e" * 32)


def test_the_first_sealed_write_makes_the_defined_key_table(db_url: str) -> None:
    """Columns, nullability and primary key are ``key_table()``'s, and a second Loom on
    the log reads the first one's key through it."""
    with Loom(db_url, encryption=KEY) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("shout", lambda: text.upper())

        run = loom.run("note", text="first")
        inspector = inspect(loom.log.engine)
        columns = {c["name"]: c for c in inspector.get_columns(TABLE)}
        primary = inspector.get_pk_constraint(TABLE)["constrained_columns"]
    defined = key_table()
    assert list(columns) == [c.name for c in defined.columns]
    for column in defined.columns:
        assert columns[column.name]["nullable"] is column.nullable, column.name
        assert columns[column.name]["type"]._type_affinity is column.type._type_affinity
    assert primary == ["subject"]
    with Loom(db_url, encryption=KEY) as again:
        opened = again.execution(run.execution_id)
        assert bytes(opened.decisions["shout"].value) == b'"FIRST"'


def test_a_sealed_value_is_not_tracked_by_the_garbage_collector() -> None:
    """Every sealed decision makes a ``Sealed`` and its envelope on record and on replay;
    they hold only text and bytes, so they are left out of the collector's work."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    envelope = seal_raw(AESGCM(b"k" * 32), subject_of(UUID(int=1)), msgspec.Raw(b"1"), b"ad")
    assert isinstance(envelope.sealed, Sealed)
    assert not gc.is_tracked(envelope)
    assert not gc.is_tracked(envelope.sealed)


def test_a_keyed_loom_opens_a_clear_sqlite_log_while_another_process_writes(
    tmp_path: Path,
) -> None:
    """Looking for the key table takes no write lock: a keyed Loom opened on a clear log
    whose write lock another connection holds reads its executions (it waited for the lock
    and failed with "database is locked" before)."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as clear:

        @clear.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("shout", lambda: text.upper())

        run = clear.run("note", text="clear")
    writer = sqlite3.connect(tmp_path / "loom.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process mid-append
        with Loom(url, encryption=KEY, lock_timeout=0.2) as keyed:
            assert keyed.execution(run.execution_id).output is not None
    finally:
        writer.execute("ROLLBACK")
        writer.close()
