"""The encryption benchmark's floors open what the log holds where it is stored: every sealed
field with its associated data (an execution's input says whether its keys are sealed) and
every sealed decision key. A floor that cannot open one stops the benchmark run
(``InvalidTag``), as it did once the input's associated data changed.

The recording's floor seals each stored row again just before writing it (ADR 0049, amended
"floor"): the calls must be the row's own, one AES-GCM per sealed field and one AES-SIV per
sealed key, or the floor would charge a recording for less (or more) than it seals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import encryption
from benchmarks.harness import InstrumentError
from benchmarks.workload import FLOW, make_values, recording_flow
from loom_runtime import Loom


def _ciphers(tmp_path: Path, decisions: int, *, asked: int | None = None) -> encryption._Ciphers:
    values = make_values(decisions)
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}", encryption=encryption.KEY) as loom:
        loom.flow(FLOW)(recording_flow(values))
        execution_id = loom.run(FLOW, n=len(values)).execution_id
        return encryption._Ciphers.of(loom, execution_id, decisions if asked is None else asked)


def test_the_floor_opens_every_sealed_field_and_key_of_a_recording(tmp_path: Path) -> None:
    ciphers = _ciphers(tmp_path, 5)
    floors = ciphers.floors()
    assert floors["open_floor_us"] > 0
    assert floors["seal_floor_us"] > 0
    (tmp_path / "more").mkdir()
    with pytest.raises(InstrumentError):  # more decisions than the rows hold keys for
        _ciphers(tmp_path / "more", 5, asked=8)


class _Counting:
    """A cipher that counts its calls and hands them on."""

    def __init__(self, cipher: Any) -> None:
        self.cipher = cipher
        self.calls = 0

    def encrypt(self, *args: Any) -> bytes:
        self.calls += 1
        return bytes(self.cipher.encrypt(*args))


def test_sealing_a_row_again_makes_that_rows_cipher_calls(tmp_path: Path) -> None:
    """A start (its input), five decisions (a value and a key each), an end (its output)."""
    ciphers = _ciphers(tmp_path, 5)
    aead, names = _Counting(ciphers.aead), _Counting(ciphers.names)
    ciphers.aead, ciphers.names = aead, names  # type: ignore[assignment]
    made = []
    for index in range(len(ciphers.rows)):
        before = (aead.calls, names.calls)
        ciphers.seal_row(index)
        made.append((aead.calls - before[0], names.calls - before[1]))
    assert made == [(1, 0), *[(1, 1)] * 5, (1, 0)]


def test_the_ingest_arms_check_their_own_log_for_each_document_s_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ingest arms (issue: encryption's cost per ingested document) grep their log for
    each document's marker word: all in the clear arm's, none in the sealed arm's. A Loom
    that silently stopped sealing (the master key dropped) must stop the run, not pass as
    a cheap sealed arm."""
    docs = encryption.base_docs(3)
    assert encryption._ingest_arm("clear", docs, None).measure()["put_doc_cpu_us"] > 0
    assert encryption._ingest_arm("sealed", docs, encryption.KEY).measure()["put_doc_cpu_us"] > 0

    def keyless(url: str, *, encryption: Any = None) -> Loom:
        return Loom(url)

    monkeypatch.setattr(encryption, "Loom", keyless)
    with pytest.raises(InstrumentError, match="marker words"):
        encryption._ingest_arm("not sealed", docs, encryption.KEY).measure()
