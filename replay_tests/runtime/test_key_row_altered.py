"""A data-key row altered by hand, after the key-check row proved the master key (ADR 0049,
amended 2026-12-05 "key rows"), on SQLite and PostgreSQL.

The master key is proved when the log opens; a data-key row that then does not unwrap (cut
short, or copied from another log) was reported as the wrong master key, sending the operator
after a key that does not exist. One that unwraps to another execution's key (two rows
swapped) was reported as a sealed field "altered or moved; run `loom verify`", and verify,
which walks the events' chain and not the key table, then said ok.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from sqlalchemy import create_engine, text

from loom_runtime import FlowContext, Loom, MasterKey, WrongMasterKeyError
from loom_runtime.errors import LogCorruptError

KEY = MasterKey(b"k" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("note")
    def note(ctx: FlowContext, text: str) -> str:
        return ctx.decide("shout", lambda: text.upper())


def _two_executions(db_url: str) -> tuple[UUID, UUID]:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        first = loom.run("note", text="alice's address").execution_id
        second = loom.run("note", text="bob's address").execution_id
    return first, second


def _set_key(db_url: str, execution_id: UUID, wrapped: bytes) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE loom_subject_keys SET wrapped_key = :w WHERE subject = :s"),
                {"w": wrapped, "s": f"execution:{execution_id}"},
            )
    finally:
        engine.dispose()


def _wrapped(db_url: str, execution_id: UUID) -> bytes:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return bytes(
                connection.execute(
                    text("SELECT wrapped_key FROM loom_subject_keys WHERE subject = :s"),
                    {"s": f"execution:{execution_id}"},
                ).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("alteration", ["cut short", "from another log"])
def test_a_data_key_row_that_does_not_unwrap_is_corrupt_not_the_wrong_master_key(
    db_url: str, alteration: str
) -> None:
    first, _ = _two_executions(db_url)
    altered = (
        _wrapped(db_url, first)[:16]
        if alteration == "cut short"
        else MasterKey(b"o" * 32).wrap(b"d" * 32)  # a data key wrapped by another log's key
    )
    _set_key(db_url, first, altered)
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        with pytest.raises(LogCorruptError, match=f"data key row of execution:{first}") as raised:
            loom.replay(first)
    assert not isinstance(raised.value, WrongMasterKeyError)
    assert "loom_subject_keys" in str(raised.value)


def test_swapped_key_rows_are_named_as_the_likely_cause(db_url: str) -> None:
    first, second = _two_executions(db_url)
    _set_key(db_url, first, _wrapped(db_url, second))
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        assert loom.log.verify().ok  # the events are intact: the chain cannot see a key row
        with pytest.raises(LogCorruptError, match="loom_subject_keys") as raised:
            loom.replay(first)
        assert loom.replay(second).identical  # the control: the other row is still its own
    assert f"execution:{first}" in str(raised.value)
