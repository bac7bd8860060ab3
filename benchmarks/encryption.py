"""Section "encryption" (ADR 0049): what sealing costs per recorded and per replayed decision.

An encrypted log seals every decision's value and input (AES-GCM under the execution's key)
and its key (AES-SIV) before it is stored, and a replay opens them again. The same flow of
~1 KB values is recorded into a fresh SQLite file and replayed from a second ``Loom``, once
with a master key and once without, in interleaved rounds; the figures are CPU time per
decision (``process_time``), so another process's load on the shared machine does not enter
them. The targets: recording costs at most 10% more with encryption, and replay keeps at
least 90% of its throughput.

The floors, shown beside them: the work the sealed arm cannot avoid, measured on the same
recording in the same sample. For replay, ``AESGCM.decrypt`` of exactly the ciphertexts the log
holds (nonce, ciphertext and associated data taken out of the rows before the clock starts) and
``AESSIV.decrypt`` of its sealed decision keys, one after another, nothing else: a replay reads
the rows and then opens them in one loop. For recording, where each decision is sealed and then
committed before the flow goes on, each arm's own stored rows are written again by bare
``sqlite3`` (``group_commit.same_rows_seconds``: one commit per event, as loom made them), the
sealed arm's with each row's ciphers called just before its transaction (``AESGCM.encrypt`` of
the same plaintexts under fresh nonces, ``AESSIV.encrypt`` of the same keys). A cipher called
between commits costs several times what the same call costs in a loop of its own, so a floor
timed in such a loop (still shown) understated what sealing must add to a recording. Clear plus
floor is the least a sealed decision can cost, so the floor says how close loom is to what the
cryptography must cost, and whether a target is within reach at all.

Ingest, side by side in the same rounds: ``kb.put_doc`` of the corpus section's documents
(~2,000 characters of real manuals each) one by one into an empty knowledge base, with and
without the master key, CPU time per document. Sealed per document: its text and title (ADR
0055), under the document's own key; the passage index stays in clear, as a search needs it.
The target is the recording's: at most 10% more per document.

Negative controls: the encrypted recording read by a ``Loom`` without the key must be refused,
and its stored rows must hold none of the values' text. A sealer that silently stopped
sealing would make the encrypted arm as cheap as the clear one for the wrong reason. Each
ingest sample checks the same of its own log: every document's unique marker word is in the
clear arm's stored events and in none of the sealed arm's (a check that could not see the
text would pass the sealed arm for nothing).
"""

from __future__ import annotations

import binascii
import gc
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

import msgspec

from benchmarks.corpus import SCOPE, SOURCE, base_docs, marker
from benchmarks.group_commit import StoredRows, counted, last_event_id, same_rows_seconds
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
from benchmarks.stores import fresh_sqlite, synchronous_in_effect
from benchmarks.workload import FLOW, Value, make_values, recording_flow
from loom_knowledge import Doc, open_knowledge_base
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

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV

DECISIONS = 1_000
DOCUMENTS = 150
"""Documents each ingest sample puts (``--quick``: a fifth)."""
KEY = MasterKey(bytes(range(32)))
_CREATED = "loom.execution.Created"
RECORD_TARGET = 1.10
"""Recording CPU per decision with encryption, at most this times the clear recording's."""
REPLAY_TARGET = 0.90
"""Replay throughput with decryption, at least this share of the clear replay's."""


def run(settings: Settings, progress: Progress) -> SectionResult:
    """Record and replay with and without a master key, side by side in each round."""
    values = make_values(DECISIONS // 5 if settings.quick else DECISIONS)
    docs = base_docs(DOCUMENTS // 5 if settings.quick else DOCUMENTS)
    arms = [
        _arm("clear", values, None),
        _arm("encrypted", values, KEY),
        _ingest_arm("ingest, clear", docs, None),
        _ingest_arm("ingest, encrypted", docs, KEY),
    ]
    results = interleave(arms, rounds=settings.rounds, progress=progress)
    clear, sealed = results["clear"], results["encrypted"]
    ingest_ratio = (
        results["ingest, encrypted"]["put_doc_cpu_us"].median
        / results["ingest, clear"]["put_doc_cpu_us"].median
    )
    clear_record = clear["record_cpu_us"].median
    record_ratio = sealed["record_cpu_us"].median / clear_record
    replay_share = clear["replay_cpu_us"].median / sealed["replay_cpu_us"].median
    hot = {"record_cpu_us": sealed["seal_floor_us"], "replay_cpu_us": sealed["open_floor_us"]}
    rows = (
        *(
            (name, stats["record_cpu_us"].cell(" µs"), stats["replay_cpu_us"].cell(" µs"))
            for name, stats in (
                ("no master key", clear),
                ("master key (sealed)", sealed),
                ("floor: AES-GCM and AES-SIV alone, one call after another, same ciphertexts", hot),
            )
        ),
        (
            "floor: the clear arm's stored rows, bare sqlite3, one commit each",
            clear["rows_floor_us"].cell(" µs"),
            "n/a",
        ),
        (
            "floor: the sealed arm's stored rows, bare sqlite3, one commit each, "
            "each row's ciphers before it",
            sealed["rows_floor_us"].cell(" µs"),
            "n/a",
        ),
    )
    # What sealing must add to a recording: the sealed rows' floor (bigger rows, and the
    # ciphers where a recording calls them, between commits) over the clear rows' floor.
    record_floor = sealed["rows_floor_us"].median - clear["rows_floor_us"].median
    best_record = 1 + record_floor / clear_record
    best_replay = clear["replay_cpu_us"].median / (
        clear["replay_cpu_us"].median + hot["replay_cpu_us"].median
    )
    loom_record = sealed["record_cpu_us"].median - clear_record
    loom_replay = sealed["replay_cpu_us"].median - clear["replay_cpu_us"].median
    # The shared rule (ADR 0048): floor-bound only with loom at its floor, not merely a floor
    # above the target.
    record_verdict = floor_verdict(record_ratio, RECORD_TARGET, best_record, at_most=True)
    progress("negative control: the encrypted recording read without the key")
    return SectionResult(
        notes=(
            "Sealed per decision: its value, and its input unless it is null (here one "
            "AES-GCM seal on record and one open on replay), and its key (one AES-SIV seal "
            "and one open, ADR 0049 'names'); the append's own transaction "
            "checks that the key is still live (SQLite), so nothing is stored under a key "
            "another process destroyed.",
            "Replay's floor: the AES-GCM and AES-SIV calls alone, decrypting the stored "
            "ciphertexts one after another, as a replay opens them after reading the rows. "
            "A sealed replay cannot cost less than the clear one plus that floor.",
            "Recording's floor: each arm's stored rows written again by bare sqlite3, one "
            "commit per event as loom made, at loom's synchronous level; in the sealed one "
            "each row's ciphers (AES-GCM of its fields under fresh nonces, AES-SIV of its key) "
            "run just before its transaction, where a recording calls them. What sealing must "
            "add to a recording is the sealed floor over the clear one. Called between "
            "commits, a cipher costs several times what it costs in a loop of its own (its "
            "code and tables are no longer in the CPU's caches), which the loop row shows.",
        ),
        tables=(
            Table(
                title=f"CPU per decision ({len(values):,} decisions of ~1 KB, SQLite file)",
                columns=("arm", "record", "replay"),
                rows=rows,
                note=f"median of {settings.rounds} interleaved rounds (low-high)",
            ),
            Table(
                title=f"CPU per ingested document (kb.put_doc of {len(docs):,} documents of "
                "~2,000 characters into an empty knowledge base, SQLite file)",
                columns=("arm", "per document", "vs clear"),
                rows=(
                    ("no master key", results["ingest, clear"]["put_doc_cpu_us"].cell(" µs"), "1x"),
                    (
                        "master key (sealed)",
                        results["ingest, encrypted"]["put_doc_cpu_us"].cell(" µs"),
                        f"{ingest_ratio:.2f}x",
                    ),
                ),
                note=f"median of {settings.rounds} interleaved rounds (low-high); the event "
                "append and the index catching up included, as kb.put_doc returns after both",
            ),
            Table(
                title="Against the targets",
                columns=("measure", "value", "target", "verdict"),
                rows=(
                    (
                        "recording cost with encryption",
                        f"{record_ratio:.2f}x",
                        f"<= {RECORD_TARGET:.2f}x",
                        record_verdict,
                    ),
                    (
                        "replay throughput with decryption",
                        f"{replay_share:.2f}x",
                        f">= {REPLAY_TARGET:.2f}x",
                        floor_verdict(replay_share, REPLAY_TARGET, best_replay),
                    ),
                    (
                        "ingest cost with encryption (per document)",
                        f"{ingest_ratio:.2f}x",
                        f"<= {RECORD_TARGET:.2f}x",
                        "met" if ingest_ratio <= RECORD_TARGET else "MISSED",
                    ),
                ),
            ),
            Table(
                title=(
                    "Against the floors (clear + what sealing must add: "
                    "the best a sealed arm can do)"
                ),
                columns=("measure", "loom", "best the floor allows", "loom's own cost beyond it"),
                rows=(
                    (
                        "recording cost with encryption",
                        f"{record_ratio:.2f}x",
                        f"{best_record:.2f}x",
                        f"{loom_record - record_floor:.1f} µs per decision",
                    ),
                    (
                        "replay throughput with decryption",
                        f"{replay_share:.2f}x",
                        f"{best_replay:.2f}x",
                        f"{loom_replay - hot['replay_cpu_us'].median:.1f} µs per decision",
                    ),
                ),
            ),
        ),
        controls=(_control(values),),
    )


def _arm(name: str, values: list[Value], key: MasterKey | None) -> Arm:
    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            with Loom(url, encryption=key) as loom:
                loom.flow(FLOW)(recording_flow(values))
                synchronous = synchronous_in_effect(loom)
                before = last_event_id(path)
                with counted(loom) as counts:
                    started = time.process_time()
                    execution_id = loom.run(FLOW, n=len(values)).execution_id
                    recorded = time.process_time() - started
            gc.collect()
            with Loom(url, encryption=key) as loom:
                loom.flow(FLOW)(recording_flow(values))
                started = time.process_time()
                result = loom.replay(execution_id)
                replayed = time.process_time() - started
                ciphers = None if key is None else _Ciphers.of(loom, execution_id, len(values))
            if not result.identical:
                raise InstrumentError(f"the {name} replay diverged: {result.divergences}")
            stored = StoredRows.read(path, before)
        if ciphers is not None and ciphers.places != [
            (UUID(str(event[1])).hex, event[2]) for event in stored.events
        ]:
            raise InstrumentError("the sealed rows and the cipher work do not line up")
        rows_floor, matched = same_rows_seconds(
            stored,
            counts["commits"],
            synchronous=synchronous,
            clock=time.process_time,
            before_each=None if ciphers is None else ciphers.seal_row,
        )
        if not matched:
            raise InstrumentError(
                f"the {name} arm's rows floor did not write loom's rows in loom's commits"
            )
        figures = {
            "record_cpu_us": recorded / len(values) * 1e6,
            "replay_cpu_us": replayed / len(values) * 1e6,
            "rows_floor_us": rows_floor / len(values) * 1e6,
        }
        if ciphers is not None:
            figures |= ciphers.floors()
        return figures

    return Arm(name, measure)


def _ingest_arm(name: str, docs: list[Doc], key: MasterKey | None) -> Arm:
    """``kb.put_doc`` of ``docs`` into a fresh knowledge base, CPU per document; then the
    log's stored events grepped for each document's marker word (see the module docstring)."""

    def measure() -> Sample:
        with fresh_sqlite() as (url, path):
            with Loom(url, encryption=key) as loom:
                kb = open_knowledge_base(loom, SCOPE)
                kb.refresh()  # its tables made outside the clock, as the corpus section does
                gc.collect()
                started = time.process_time()
                for doc in docs:
                    kb.put_doc(doc, source=SOURCE)
                elapsed = time.process_time() - started
            with closing(sqlite3.connect(path)) as connection:
                stored = b"".join(
                    state for (state,) in connection.execute("SELECT state FROM stored_events")
                )
        found = sum(marker(0, index).encode() in stored for index in range(len(docs)))
        if found != (0 if key is not None else len(docs)):
            raise InstrumentError(
                f"{name}: {found} of {len(docs)} documents' marker words are in the stored "
                "events (the sealed arm must hold none, the clear arm all)"
            )
        return {"put_doc_cpu_us": elapsed / len(docs) * 1e6}

    return Arm(name, measure)


_RowWork = tuple[list[tuple[Sealed, bytes, bytes]], list[tuple[bytes, bytes]]]
"""One stored row's cipher work: its sealed fields ``(sealed, ad, plaintext)`` and its sealed
keys ``(stored ciphertext, clear key)``."""


@dataclass
class _Ciphers:
    """The cipher work of one sealed recording, row by row: each sealed field as stored
    (nonce, ciphertext, associated data) with its plaintext, and each sealed decision key
    with its clear text, all taken out of the rows before any clock starts."""

    aead: AESGCM
    names: AESSIV | None
    name_ad: list[bytes]
    decisions: int
    rows: list[_RowWork]
    """Per stored row, in the rows' order."""
    places: list[tuple[str, int]]
    """Per stored row: its stream (hex) and version, to line the work up with the rows."""

    @classmethod
    def of(cls, loom: Loom, execution_id: UUID, decisions: int) -> _Ciphers:
        """Every sealed field and decision key the execution's rows hold, opened where it is
        stored (an input's place says the flags it carries)."""
        keyring = loom._keyring
        if keyring is None:
            raise InstrumentError("the encrypted arm's Loom has no keyring")
        rows = loom.log.rows(execution_id)
        stream = str(execution_id)
        aead = keyring.key(subject_of(execution_id))
        created_raw = msgspec.json.encode(msgspec.json.decode(rows[0].state).get("input"))
        names = names_cipher(aead) if sealed_names(created_raw) else None
        name_ad = [stream.encode()]
        work: list[_RowWork] = []
        for row in rows:
            fields = msgspec.json.decode(row.state)
            opens: list[tuple[Sealed, bytes, bytes]] = []
            keys: list[tuple[bytes, bytes]] = []
            for name in SEALED_FIELDS.get(row.topic, ()):
                value: Any = fields.get(name)
                if isinstance(value, dict):
                    sealed = sealed_of_raw(msgspec.json.encode(value))
                    if sealed is not None:
                        place = input_place(created_raw) if row.topic == _CREATED else name
                        ad = _aad(row.stream, row.version, place)
                        plaintext = aead.decrypt(sealed.nonce, sealed.ciphertext, ad)
                        opens.append((sealed, ad, plaintext))
                elif names is not None and name == "key" and isinstance(value, str):
                    stored = binascii.a2b_base64(value.removeprefix(NAME_PREFIX))
                    keys.append((stored, names.decrypt(stored, name_ad)))
            work.append((opens, keys))
        sealed_fields = sum(len(opens) for opens, _ in work)
        sealed_keys = sum(len(keys) for _, keys in work)
        if sealed_fields < decisions or (names is not None and sealed_keys < decisions):
            raise InstrumentError(
                f"{sealed_fields} sealed fields, {sealed_keys} keys, {decisions} decisions"
            )
        places = [(UUID(str(row.stream)).hex, row.version) for row in rows]
        return cls(aead, names, name_ad, decisions, work, places)

    def seal_row(self, index: int) -> None:
        """What sealing stored row ``index`` costs: AES-GCM of each field's plaintext under a
        fresh nonce, AES-SIV of each key (``same_rows_seconds`` calls it before the row's
        transaction, where a recording seals)."""
        opens, keys = self.rows[index]
        encrypt = self.aead.encrypt
        for _, ad, plaintext in opens:
            encrypt(os.urandom(12), plaintext, ad)
        if self.names is not None:
            for _, key in keys:
                self.names.encrypt(key, self.name_ad)

    def floors(self) -> dict[str, float]:
        """CPU per decision of the cipher calls alone, one after another: opening every
        sealed field and key as stored (the replay's floor: a replay reads the rows, then
        opens them in one loop), and sealing every row again (beside the recording's floor,
        where the same calls sit between commits)."""
        opens = [(sealed, ad) for row_opens, _ in self.rows for sealed, ad, _ in row_opens]
        keys = [stored for _, row_keys in self.rows for stored, _ in row_keys]
        decrypt = self.aead.decrypt
        started = time.process_time()
        for sealed, ad in opens:
            decrypt(sealed.nonce, sealed.ciphertext, ad)
        if self.names is not None:
            for stored in keys:
                self.names.decrypt(stored, self.name_ad)
        opened = time.process_time() - started
        started = time.process_time()
        for index in range(len(self.rows)):
            self.seal_row(index)
        sealed_time = time.process_time() - started
        return {
            "open_floor_us": opened / self.decisions * 1e6,
            "seal_floor_us": sealed_time / self.decisions * 1e6,
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
