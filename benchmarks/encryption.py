"""Section "encryption" (ADR 0049): what sealing costs per recorded and per replayed decision.

An encrypted log seals every decision's value and input (AES-GCM under the execution's key)
and its key (AES-SIV) before it is stored, and a replay opens them again. The same flow of
~1 KB values is recorded into a fresh SQLite file and replayed from a second ``Loom``, once
with a master key and once without, in interleaved rounds; the figures are CPU time per
decision (``process_time``), so another process's load on the shared machine does not enter
them. The targets: recording costs at most 10% more with encryption, and replay keeps at
least 90% of its throughput.

The floor, shown beside them: the cipher work the sealed arm cannot avoid, measured on the
same recording in the same sample. For replay, ``AESGCM.decrypt`` of exactly the ciphertexts
the log holds (nonce, ciphertext and associated data taken out of the rows before the clock
starts) and ``AESSIV.decrypt`` of its sealed decision keys, nothing else; for recording,
``AESGCM.encrypt`` of the same plaintexts under fresh nonces and ``AESSIV.encrypt`` of the
same keys. Clear plus floor is the least a sealed decision can cost, so the floor says how close
loom is to what the cryptography must cost, and whether a target is within reach at all.

Negative control: the encrypted recording read by a ``Loom`` without the key must be refused,
and its stored rows must hold none of the values' text. A sealer that silently stopped
sealing would make the encrypted arm as cheap as the clear one for the wrong reason.
"""

from __future__ import annotations

import binascii
import gc
import os
import time
from typing import Any
from uuid import UUID

import msgspec

from benchmarks.harness import (
    Arm,
    Control,
    InstrumentError,
    Progress,
    Sample,
    SectionResult,
    Settings,
    Table,
    floor_verdict,
    interleave,
)
from benchmarks.stores import fresh_sqlite
from benchmarks.workload import FLOW, Value, make_values, recording_flow
from loom_runtime import EncryptionOffError, Loom, MasterKey
from loom_runtime.sealing import (
    NAME_PREFIX,
    SEALED_FIELDS,
    Sealed,
    _aad,
    input_place,
    names_cipher,
    sealed_names,
    sealed_of_raw,
    subject_of,
)

DECISIONS = 1_000
KEY = MasterKey(bytes(range(32)))
_CREATED = "loom.execution.Created"
RECORD_TARGET = 1.10
"""Recording CPU per decision with encryption, at most this times the clear recording's."""
REPLAY_TARGET = 0.90
"""Replay throughput with decryption, at least this share of the clear replay's."""


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Record and replay with and without a master key, side by side in each round."""
    values = make_values(DECISIONS // 5 if settings.quick else DECISIONS)
    arms = [_arm("clear", values, None), _arm("encrypted", values, KEY)]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    clear, sealed = results["clear"], results["encrypted"]
    record_ratio = sealed["record_cpu_us"].median / clear["record_cpu_us"].median
    replay_share = clear["replay_cpu_us"].median / sealed["replay_cpu_us"].median
    floor = {"record_cpu_us": sealed["seal_floor_us"], "replay_cpu_us": sealed["open_floor_us"]}
    rows = tuple(
        (name, stats["record_cpu_us"].cell(" µs"), stats["replay_cpu_us"].cell(" µs"))
        for name, stats in (
            ("no master key", clear),
            ("master key (sealed)", sealed),
            ("floor: AES-GCM and AES-SIV alone, same ciphertexts", floor),
        )
    )
    best_record = 1 + floor["record_cpu_us"].median / clear["record_cpu_us"].median
    best_replay = clear["replay_cpu_us"].median / (
        clear["replay_cpu_us"].median + floor["replay_cpu_us"].median
    )
    loom_record = sealed["record_cpu_us"].median - clear["record_cpu_us"].median
    loom_replay = sealed["replay_cpu_us"].median - clear["replay_cpu_us"].median
    progress("negative control: the encrypted recording read without the key")
    return SectionResult(
        notes=(
            "Sealed per decision: its value, and its input unless it is null (here one "
            "AES-GCM seal on record and one open on replay), and its key (one AES-SIV seal "
            "and one open, ADR 0049 'names'); the append's own transaction "
            "checks that the key is still live (SQLite), so nothing is stored under a key "
            "another process destroyed.",
            "Floor: the AES-GCM and AES-SIV calls alone on the same recording (replay: "
            "decrypt of the stored ciphertexts; record: encrypt of the same plaintexts), "
            "nothing else. A sealed arm cannot cost less than the clear arm plus the floor.",
        ),
        tables=(
            Table(
                title=f"CPU per decision ({len(values):,} decisions of ~1 KB, SQLite file)",
                columns=("arm", "record", "replay"),
                rows=rows,
                note=f"median of {settings.rounds} interleaved rounds (low-high)",
            ),
            Table(
                title="Against the targets",
                columns=("measure", "value", "target", "verdict"),
                rows=(
                    (
                        "recording cost with encryption",
                        f"{record_ratio:.2f}x",
                        f"<= {RECORD_TARGET:.2f}x",
                        "met" if record_ratio <= RECORD_TARGET else "MISSED",
                    ),
                    (
                        "replay throughput with decryption",
                        f"{replay_share:.2f}x",
                        f">= {REPLAY_TARGET:.2f}x",
                        floor_verdict(replay_share, REPLAY_TARGET, best_replay),
                    ),
                ),
            ),
            Table(
                title="Against the floor (clear + the ciphers alone: the best a sealed arm can do)",
                columns=("measure", "loom", "best the floor allows", "loom's own cost beyond it"),
                rows=(
                    (
                        "recording cost with encryption",
                        f"{record_ratio:.2f}x",
                        f"{best_record:.2f}x",
                        f"{loom_record - floor['record_cpu_us'].median:.1f} µs per decision",
                    ),
                    (
                        "replay throughput with decryption",
                        f"{replay_share:.2f}x",
                        f"{best_replay:.2f}x",
                        f"{loom_replay - floor['replay_cpu_us'].median:.1f} µs per decision",
                    ),
                ),
            ),
        ),
        controls=(_control(values),),
    )


def _arm(name: str, values: list[Value], key: MasterKey | None) -> Arm:
    def measure() -> Sample:
        with fresh_sqlite() as (url, _):
            with Loom(url, encryption=key) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.process_time()
                execution_id = loom.run(FLOW, n=len(values)).execution_id
                recorded = time.process_time() - started
            gc.collect()
            with Loom(url, encryption=key) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.process_time()
                result = loom.replay(execution_id)
                replayed = time.process_time() - started
                floors = {} if key is None else _floors(loom, execution_id, len(values))
            if not result.identical:
                raise InstrumentError(f"the {name} replay diverged: {result.divergences}")
        return {
            "record_cpu_us": recorded / len(values) * 1e6,
            "replay_cpu_us": replayed / len(values) * 1e6,
            **floors,
        }

    return Arm(name, measure)


def _floors(loom: Loom, execution_id: UUID, decisions: int) -> dict[str, float]:
    """CPU per decision of the cipher calls alone: opening every sealed field and decision
    key the execution's rows hold (AES-GCM, AES-SIV), and sealing the same plaintexts again
    (AES-GCM under fresh nonces, AES-SIV as stored)."""
    keyring = loom._keyring
    if keyring is None:
        raise InstrumentError("the encrypted arm's Loom has no keyring")
    rows = loom.log.rows(execution_id)
    stream = str(execution_id)
    aead = keyring.key(subject_of(execution_id))
    created_raw = msgspec.json.encode(msgspec.json.decode(rows[0].state).get("input"))
    names = names_cipher(aead) if sealed_names(created_raw) else None
    opens: list[tuple[Sealed, bytes]] = []
    keys: list[bytes] = []
    for row in rows:
        fields = msgspec.json.decode(row.state)
        for name in SEALED_FIELDS.get(row.topic, ()):
            value: Any = fields.get(name)
            if isinstance(value, dict):
                sealed = sealed_of_raw(msgspec.json.encode(value))
                if sealed is not None:
                    # Where it is stored; an input's place says the flags it carries.
                    place = input_place(created_raw) if row.topic == _CREATED else name
                    ad = _aad(row.stream, row.version, place)
                    opens.append((sealed, ad))
            elif names is not None and name == "key" and isinstance(value, str):
                keys.append(binascii.a2b_base64(value.removeprefix(NAME_PREFIX)))
    if len(opens) < decisions or (names is not None and len(keys) < decisions):
        raise InstrumentError(
            f"{len(opens)} sealed fields, {len(keys)} keys, {decisions} decisions"
        )
    name_ad = [stream.encode()]
    started = time.process_time()
    plaintexts = [aead.decrypt(sealed.nonce, sealed.ciphertext, ad) for sealed, ad in opens]
    names_opened = [] if names is None else [names.decrypt(key, name_ad) for key in keys]
    opened = time.process_time() - started
    started = time.process_time()
    for (_, ad), plaintext in zip(opens, plaintexts, strict=True):
        aead.encrypt(os.urandom(12), plaintext, ad)
    if names is not None:
        for key in names_opened:
            names.encrypt(key, name_ad)
    sealed_time = time.process_time() - started
    return {
        "open_floor_us": opened / decisions * 1e6,
        "seal_floor_us": sealed_time / decisions * 1e6,
    }


def _control(values: list[Value]) -> Control:
    with fresh_sqlite() as (url, _):
        with Loom(url, encryption=KEY) as loom:
            loom.flow(FLOW)(recording_flow(values))
            execution_id: UUID = loom.run(FLOW, n=len(values)).execution_id
            stored = b"".join(row.state for row in loom.log.rows(execution_id))
        with Loom(url) as keyless:
            try:
                keyless.execution(execution_id)
            except EncryptionOffError:
                refused = True
            else:
                refused = False
    planted = str(values[0]["text"])[:64].encode()
    held = refused and planted not in stored and b"loom.sealed" in stored
    return Control(
        name="the encrypted recording, read without the key and grepped for a value's text",
        expected="refused, and no value's text stored",
        observed="refused, sealed" if held else "READ WITHOUT THE KEY or text stored in clear",
        held=held,
    )
