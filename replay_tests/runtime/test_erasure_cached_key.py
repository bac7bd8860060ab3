"""A data key cached by a reader never outlives its erasure (ADR 0049), on SQLite and
PostgreSQL.

A Loom keeps the keys it unwrapped, so a replay does not unwrap per field. The claim: once
the subject is erased, by this Loom or by another one (another process, here another Loom in
the same process), reading the execution through the Loom that still caches its key raises
``ErasedError`` naming the forget event, as a fresh Loom would. A cache that ignored erasure
would keep returning the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loom_runtime import ErasedError, FlowContext, Loom, MasterKey
from loom_runtime.sealing import subject_of

KEY = MasterKey(b"c" * 32)


def _register(loom: Loom) -> None:
    @loom.flow("greet")
    def greet(ctx: FlowContext, name: str) -> str:
        return ctx.decide("greeting", lambda: f"hello {name}")


@pytest.fixture
def reader(db_url: str) -> Iterator[Loom]:
    with Loom(db_url, encryption=KEY) as loom:
        _register(loom)
        yield loom


def _warm(reader: Loom, name: str) -> object:
    """Record an execution and replay it, so ``reader`` holds its key."""
    run = reader.run("greet", name=name)
    assert reader.replay(run.execution_id).identical
    keyring = reader._keyring
    assert keyring is not None and subject_of(run.execution_id) in keyring._cache
    return run.execution_id


def test_erased_by_the_same_loom_its_cached_key_reads_nothing(reader: Loom) -> None:
    """Erasing through the Loom that caches the key: its next read is refused."""
    execution_id = _warm(reader, "alice")
    position = reader.erase(execution=execution_id, reason="request", by="dpo").position
    with pytest.raises(ErasedError) as refused:
        reader.replay(execution_id)
    assert refused.value.position == position


def test_erased_by_another_loom_the_cached_key_reads_nothing(db_url: str, reader: Loom) -> None:
    """Erasing through another Loom (another process): the reader that caches the key is
    refused at its next read of the execution, its replay and its export alike."""
    execution_id = _warm(reader, "bob")
    with Loom(db_url, encryption=KEY) as other:
        position = other.erase(execution=execution_id, reason="request", by="dpo").position
    with pytest.raises(ErasedError) as refused:
        reader.execution(execution_id)
    assert refused.value.position == position
    with pytest.raises(ErasedError):
        reader.replay(execution_id)


def test_the_export_of_a_reader_that_cached_the_key_is_refused(
    db_url: str, reader: Loom, tmp_path: Path
) -> None:
    """An export after another Loom erased the execution writes no bundle."""
    execution_id = _warm(reader, "carol")
    with Loom(db_url, encryption=KEY) as other:
        other.erase(execution=execution_id, reason="request", by="dpo")
    bundle = tmp_path / "carol.loom"
    with pytest.raises(ErasedError):
        reader.export(execution_id, bundle)
    assert not bundle.exists()


def test_a_live_execution_read_again_opens_with_the_cached_key(reader: Loom) -> None:
    """Reading a live execution again still opens it (the check reads; it destroys nothing)."""
    execution_id = _warm(reader, "dave")
    assert reader.execution(execution_id).output is not None
    assert reader.replay(execution_id).identical
