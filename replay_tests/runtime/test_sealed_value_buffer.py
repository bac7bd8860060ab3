"""The sealer hands AES-GCM a value's buffer as it is, not a copy (ADR 0049, amended "enc").

A ``msgspec.Raw`` decoded from a larger document is a view into that document's bytes; the
sealed ciphertext must hold exactly the value's own bytes, never its neighbours, and open
to them where it is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import msgspec
import pytest
from sqlalchemy import create_engine

from loom_runtime import MasterKey
from loom_runtime.execution import Execution
from loom_runtime.sealing import ExecutionSealer, Keyring, Opener, subject_of

pytest.importorskip("cryptography")

DOCUMENT = b'{"head":"neighbour before","value":{"note":"the value"},"tail":"neighbour after"}'


def test_a_value_viewing_a_larger_document_is_sealed_as_its_own_bytes(tmp_path: Path) -> None:
    """Sealed from a view, the stored envelope opens to the view's bytes and nothing more."""
    view = msgspec.json.decode(DOCUMENT, type=dict[str, msgspec.Raw])["value"]
    engine = create_engine(f"sqlite:///{tmp_path / 'keys.db'}")
    keyring = Keyring(engine, MasterKey(b"b" * 32))
    execution_id = uuid4()
    keyring.create(subject_of(execution_id), position=1)
    event = Execution.DecisionRecorded(
        originator_id=execution_id,
        originator_version=2,
        timestamp=datetime.now(UTC),
        key="k",
        kind=None,
        value=view,
        input=msgspec.Raw(b"null"),
    )
    try:
        [sealed] = ExecutionSealer(keyring, execution_id, names=True, nulls=True).seal_events(
            [event], checked=True
        )
        stored = msgspec.Raw(msgspec.json.encode(sealed.value))
        assert b"the value" not in bytes(stored)
        opened = Opener(keyring).raw(stored, str(execution_id), 2, "value")
    finally:
        keyring.close()
        engine.dispose()
    assert bytes(opened) == b'{"note":"the value"}'
    assert bytes(sealed.input) == b"null"  # left clear
    assert bytes(event.value) == b'{"note":"the value"}'  # the event itself untouched
