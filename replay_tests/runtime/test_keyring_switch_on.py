"""How an encrypted log's keyring switches encryption on and reads its key rows (ADR 0049),
on SQLite and PostgreSQL: the first sealed write makes the key table, its check row and the
execution's key together; a keyring opened before another process did that still proves the
master key before it writes; a key row is read on the keyring's kept connection, and the
ordinary way when that connection fails."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from loom_runtime import FlowContext, Loom, MasterKey, WrongMasterKeyError
from loom_runtime.sealing import KEY_CHECK, TABLE, subject_of

KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


def _key_rows(loom: Loom) -> list[str]:
    with loom.log.engine.connect() as connection:
        found = connection.execute(text(f"SELECT subject FROM {TABLE} ORDER BY subject"))
        return [row[0] for row in found]


def _events(loom: Loom) -> int:
    return loom.log.position


def test_the_first_sealed_run_makes_the_table_its_check_row_and_its_key(db_url: str) -> None:
    """After the first sealed run the key table holds exactly the check row and that
    execution's key, and the run replays."""
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        run = loom.run("note", text="first")
        assert _key_rows(loom) == sorted([KEY_CHECK, subject_of(run.execution_id)])
        assert loom.replay(run.execution_id).identical


def test_a_keyring_opened_before_the_switch_proves_the_key_before_it_writes(
    db_url: str,
) -> None:
    """Two keyrings open a log without a key table; another process then switches encryption
    on. The one with the right key seals its run; the one with a wrong key is refused and
    writes nothing."""
    with Loom(db_url) as clear:
        _register(clear)
        clear.run("note", text="clear")
    right = Loom(db_url, encryption=KEY)
    wrong = Loom(db_url, encryption=MasterKey(b"w" * 32))
    try:
        _register(right)
        _register(wrong)
        _ = right.log, wrong.log  # both keyrings open while there is no key table
        with Loom(db_url, encryption=KEY) as first:
            _register(first)
            first.run("note", text="switches encryption on")
        before = _events(right)

        with pytest.raises(WrongMasterKeyError):
            wrong.run("note", text="refused")
        assert _events(right) == before

        sealed = right.run("note", text="sealed")
        assert subject_of(sealed.execution_id) in _key_rows(right)
        assert right.replay(sealed.execution_id).identical
    finally:
        right.close()
        wrong.close()


class _Broken:
    """A kept connection that fails, as one dropped by the server would."""

    def cursor(self) -> Any:
        raise OSError("connection lost")

    def close(self) -> None:
        pass


def test_a_key_row_is_read_the_ordinary_way_when_the_kept_connection_fails(
    db_url: str,
) -> None:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        run = loom.run("note", text="kept")
    with Loom(db_url, encryption=KEY) as reader:
        _register(reader)
        _ = reader.log  # opens the keyring, which reads the check row on its kept connection
        keyring = reader._keyring
        assert keyring is not None
        keyring._raw = _Broken()
        assert reader.replay(run.execution_id).identical
        assert not isinstance(keyring._raw, _Broken)  # the failed connection was let go


def test_a_new_key_is_stored_the_ordinary_way_when_the_kept_connection_fails(
    db_url: str,
) -> None:
    """A key is stored on the kept connection, or through the engine if that fails; either
    way a subject keeps its one key (a second one for it is refused)."""
    from sqlalchemy.exc import IntegrityError

    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        first = loom.run("note", text="switches encryption on")
        keyring = loom._keyring
        assert keyring is not None
        kept = loom.run("note", text="key stored on the kept connection")
        keyring._raw = _Broken()
        ordinary = loom.run("note", text="key stored through the engine")
        assert not isinstance(keyring._raw, _Broken)
        with pytest.raises(IntegrityError):
            keyring.create(subject_of(kept.execution_id), position=loom.log.position)
        subjects = [subject_of(r.execution_id) for r in (first, kept, ordinary)]
        assert _key_rows(loom) == sorted([KEY_CHECK, *subjects])
    with Loom(db_url, encryption=KEY) as reader:
        _register(reader)
        assert all(reader.replay(r.execution_id).identical for r in (first, kept, ordinary))
