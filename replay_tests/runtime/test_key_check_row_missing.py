"""A key table holding data keys without its key-check row (ADR 0049, amended 2026-12-02
"erasurerev"), on SQLite and PostgreSQL.

The check row is what proves a master key; a table that holds data keys without it (the row
deleted or emptied, a partial restore) cannot prove any key. Without the check, every
execution read as erased (its key "not in the key table") while its wrapped key was still
there, an erasure reported it "already erased" and wrote nothing, and a wrong key's first
write made a check row of its own, after which the right key was refused.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import pytest
from sqlalchemy import create_engine, text

from loom_runtime import FlowContext, Labels, Loom, MasterKey, WrongMasterKeyError

KEY = MasterKey(b"k" * 32)
WRONG = MasterKey(b"w" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


def _recorded(db_url: str) -> UUID:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        return loom.run("note", text="alice's address", labels=Labels(user="alice")).execution_id


def _tamper(db_url: str, statement: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement))
    finally:
        engine.dispose()


def _live_keys(db_url: str) -> int:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text(
                        "SELECT count(*) FROM loom_subject_keys WHERE subject <> 'loom:key-check' "
                        "AND wrapped_key IS NOT NULL"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


TAMPERINGS = {
    "deleted": "DELETE FROM loom_subject_keys WHERE subject = 'loom:key-check'",
    "emptied": "UPDATE loom_subject_keys SET wrapped_key = NULL WHERE subject = 'loom:key-check'",
}


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
@pytest.mark.parametrize("master", [KEY, WRONG], ids=["right key", "wrong key"])
def test_data_keys_without_a_check_row_are_refused_never_read_as_erased(
    db_url: str, tampering: str, master: MasterKey
) -> None:
    """Any master key is refused on such a table: nothing reads as erased or already erased."""
    execution_id = _recorded(db_url)
    _tamper(db_url, TAMPERINGS[tampering])
    attempts: list[Callable[[Loom], object]] = [
        lambda loom: loom.execution(execution_id),
        lambda loom: loom.erase(user="alice", reason="r", by="dpo", dry_run=True),
        lambda loom: loom.run("note", text="a new execution"),
    ]
    for attempt in attempts:
        with Loom(db_url, encryption=master) as loom:
            _register(loom)
            with pytest.raises(WrongMasterKeyError, match="key-check row"):
                attempt(loom)
    assert _live_keys(db_url) == 1  # the data key is still there: nothing was erased


def test_a_wrong_key_cannot_make_its_own_check_row_on_a_table_with_data_keys(
    db_url: str,
) -> None:
    """A wrong key's write does not adopt the table, so the right key still opens it once the
    check row is restored."""
    execution_id = _recorded(db_url)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            saved = connection.execute(
                text("SELECT wrapped_key FROM loom_subject_keys WHERE subject = 'loom:key-check'")
            ).scalar_one()
    finally:
        engine.dispose()
    _tamper(db_url, TAMPERINGS["deleted"])
    with Loom(db_url, encryption=WRONG) as wrong:
        _register(wrong)
        with pytest.raises(WrongMasterKeyError):
            wrong.run("note", text="written under the wrong key")
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO loom_subject_keys (subject, wrapped_key, created_position) "
                    "VALUES ('loom:key-check', :wrapped, 0)"
                ),
                {"wrapped": saved},
            )
    finally:
        engine.dispose()
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        assert loom.replay(execution_id).identical
