"""Switching encryption on runs on the keyring's kept connection, in one transaction (ADR 0049,
amended "sealrec"): the key table, its check row and the first key commit together or not at
all, and a fresh log's first sealed run opens no connection beyond the one the keyring keeps.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from loom_runtime import FlowContext, Loom, MasterKey
from loom_runtime.sealing import Keyring

KEY = MasterKey(b"k" * 32)


def _keyring(loom: Loom) -> Keyring:
    _ = loom.log  # opens the keyring with the log
    keyring = loom._keyring
    assert keyring is not None
    return keyring


def test_a_switch_on_whose_key_insert_fails_leaves_no_key_table(db_url: str) -> None:
    """The first key's row is refused (no subject): the table made in the same transaction is
    rolled back with it, nothing is kept, and the caller is told to take the ordinary path."""
    with Loom(db_url, encryption=KEY) as loom:
        keyring = _keyring(loom)
        assert not keyring._has_table()
        refused = {"subject": None, "wrapped_key": KEY.wrap(b"d" * 32)}
        assert keyring._switch_on_with(refused, position=0) is False
        assert not keyring._has_table()
        assert not keyring._active


def test_a_fresh_logs_first_sealed_run_opens_no_connection_of_its_own(sqlite_url: str) -> None:
    """The first sealed run on a fresh log switches encryption on without opening a database
    connection: the keyring's kept one, opened with the log, does it (a transaction through
    the engine checked out a second one, most of what switching on cost)."""
    with Loom(sqlite_url, encryption=KEY) as loom:

        @loom.flow("note")
        def note(ctx: FlowContext, text: str) -> str:
            return ctx.decide("shout", lambda: text.upper())

        keyring = _keyring(loom)
        assert not keyring._active  # a fresh log: no key table yet
        opened: list[Any] = []
        event.listen(loom.log.engine, "connect", lambda connection, record: opened.append(1))
        run = loom.run("note", text="first")
        assert keyring._active
        assert opened == []
        assert loom.replay(run.execution_id).identical
