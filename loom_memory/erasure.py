"""Erasing a memory key: its subject, its sealed entries, and what an erasure covers (ADR 0060).

A memory key (one key of one event-sourced memory: a user's conversation, a scope of a tier)
is one erasure subject. When the log is encrypted, every entry a ``MemoryAppended`` or
``MemoryReplaced`` stores is sealed under that key's data key (:func:`seal_entries`), whole:
its content, id, role, timestamp and taint. What orders and routes the memory stays in clear:
the memory's name, the key, the event's kind, and the ids a ``MemoryRemoved`` names (refused
if they look like a secret, ADR 0012).

Erasing it (``loom erase --memory-key NAME:KEY``, :meth:`loom_runtime.Loom.erase` with
``memory_key=``) destroys the key and appends the forget event; a memory projection clears the
key when it applies that event (:mod:`loom_memory.projection`), and a rebuild, finding the key
gone (its entries are skipped) and the same event, ends in the same state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final
from uuid import UUID

import msgspec

from loom_memory.entry import MemoryEntry, decode_entry
from loom_memory.events import (
    MEMORY_TOPICS,
    MemoryAppended,
    MemoryEvent,
    MemoryReplaced,
    memory_stream,
)
from loom_memory.keys import tier_key
from loom_runtime import (
    ErasedError,
    ErasedSubject,
    ErasureSubjectError,
    LogCorruptError,
    Precondition,
    executions_holding,
    keyring_for,
    open_subject_text,
    pair_subject,
    seal_subject_text,
    sealed_text_subject,
    subject_pair,
    write_keyring,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from loom_runtime import EventLog, Keyring, Loom

MEMORY: Final = "memory:"
"""The prefix of a memory key's subject: ``memory:["<memory>","<key>"]``."""
_SEALED_PREFIX: Final = b'"'
"""A stored entry is a JSON object; a sealed one is a JSON string (``"loom.sealed:{...}"``)."""


def memory_subject(memory: str, key: str) -> str:
    """The subject a memory key's entries are sealed under: memory name and key as a pair
    (:func:`~loom_runtime.pair_subject`); a pair too long for the key table is named by its
    digest, and a projection finds the key among those it holds (:func:`keys_named`)."""
    return pair_subject(MEMORY, memory, key)


def keys_named(subjects: Iterable[str], memory: str, held: Iterable[str]) -> list[str]:
    """The keys of ``memory`` that ``subjects`` (a forget event's) name: readable subjects
    directly, digests by matching the keys ``held`` (iterated only if a digest is named)."""
    keys: list[str] = []
    digests: set[str] = set()
    for subject in subjects:
        if subject.startswith(MEMORY + "sha256:"):
            digests.add(subject)
        elif (pair := subject_pair(MEMORY, subject)) is not None and pair[0] == memory:
            keys.append(pair[1])
    if digests:
        keys.extend(key for key in held if memory_subject(memory, key) in digests)
    return list(dict.fromkeys(keys))


def _place(subject: str, version: int, index: int) -> str:
    """Where a sealed entry is stored (its associated data): the key, the event, the slot."""
    return f"{subject}:{version}:entries.{index}"


def write_key(log: EventLog, memory: str, key: str) -> tuple[AESGCM | None, Precondition | None]:
    """The data key a write to ``key`` seals under, when the log is encrypted (else None), and
    the precondition the write's appends must be given.

    Made on the key's first sealed write, read again from the key table on every later one, so
    a write after the key was erased is :class:`~loom_runtime.SubjectErasedError` before
    anything is appended; the precondition reads the key row again in the append's own
    transaction, so a write racing an erasure made elsewhere is refused the same way rather
    than stored under the destroyed key (a log that cannot read one relies on the first read).
    Without the master key the precondition refuses the append with
    :class:`~loom_runtime.EncryptionOffError` if the log is encrypted by then (it would be
    stored in clear; :func:`~loom_runtime.write_keyring`)."""
    keyring, guard = write_keyring(log, f"an entry of key {key!r} in memory {memory!r}")
    if keyring is None:
        return None, guard
    subject = memory_subject(memory, key)
    aead = keyring.ensure(subject, position=log.position)
    return aead, keyring.live_precondition(subject) if log.checks_preconditions else None


def text_key(keyring: Keyring | None, memory: str, key: str) -> AESGCM | None:
    """The data key the texts of ``key`` are embedded under (their vectors' digests keyed and
    vectors sealed with it, ADR 0061): None without a keyring, for a key never sealed, or
    for an erased one (the forget event deleted its vectors; its clear entries, written
    before encryption was switched on, keep plain ones)."""
    if keyring is None:
        return None
    try:
        return keyring.key(memory_subject(memory, key))
    except ErasedError:
        return None


def seal_entries(
    aead: AESGCM, memory: str, key: str, version: int, entries: Sequence[msgspec.Raw]
) -> list[msgspec.Raw]:
    """``entries`` (validated JSON) sealed for the event at ``version`` of the key's stream."""
    subject = memory_subject(memory, key)
    return [
        msgspec.Raw(
            msgspec.json.encode(
                seal_subject_text(aead, subject, bytes(raw).decode(), _place(subject, version, i))
            )
        )
        for i, raw in enumerate(entries)
    ]


def _is_sealed(raw: msgspec.Raw) -> bool:
    return bytes(memoryview(raw)[:1]) == _SEALED_PREFIX


def forget_destroyed(keyring: Keyring | None, events: Iterable[object]) -> None:
    """Drop the cached data keys of the memory keys ``events`` write that another process
    has destroyed: the keyring caches a key once opened, and
    without this a write that raced an erasure elsewhere (sealed under the key just before it
    was destroyed) would still open here, as would an as-of rebuild of the erased key.

    One read of a key's row per distinct cached key of the page, on the connection the keyring
    keeps for write checks (:meth:`~loom_runtime.Keyring.forget_destroyed`): a page of one
    write reads one row, where a batched ``IN`` query cost a quarter of a sealed write."""
    if keyring is None:
        return
    keyring.forget_destroyed(
        memory_subject(event.memory, event.key)
        for event in events
        if isinstance(event, MemoryAppended | MemoryReplaced) and event.entries
    )


def open_entries(
    keyring: Keyring | None, event: MemoryAppended | MemoryReplaced, *, damaged: bool = True
) -> list[MemoryEntry] | None:
    """An event's entries in clear; None once its key was erased (its data key destroyed).

    Clear entries (written before encryption was switched on) are decoded as they are. A
    sealed entry read without a keyring is :class:`~loom_runtime.EncryptionOffError`: never
    projected as if the key were empty. An entry that is not a sealed text (:func:`_damaged`)
    is :class:`~loom_runtime.LogCorruptError` naming the key, or left out with ``damaged``
    false (what looks for recalls of the key's entries: nobody can have read it)."""
    subject = memory_subject(event.memory, event.key)
    version = event.originator_version
    entries = []
    try:
        for index, raw in enumerate(event.entries):
            if not _is_sealed(raw):
                entries.append(decode_entry(bytes(raw)))
                continue
            text = msgspec.json.decode(bytes(raw), type=str)
            if sealed_text_subject(text) is None:
                if keyring is not None:
                    keyring.key(subject)  # erased: the entry is gone with the rest
                if damaged:
                    raise _damaged(event, index)
                continue
            opened = open_subject_text(keyring, text, _place(subject, version, index))
            entries.append(decode_entry(opened))
    except ErasedError:
        return None
    return entries


def _damaged(event: MemoryAppended | MemoryReplaced, index: int) -> LogCorruptError:
    """The refusal of an entry stored as a string that is not a sealed text: a loom before
    5093c4b let its redactor write a marker into a ciphertext now and then, before the chain
    hashed it (so ``loom verify`` passes), or the row was altered. It cannot be read; erasing
    its key drops it (ADR 0061, amended "sealed only")."""
    return LogCorruptError(
        f"memory {event.memory!r}, key {event.key!r}: entry {index} of version "
        f"{event.originator_version} is not a sealed text (damaged when it was stored, by a "
        "loom before 5093c4b, or altered since) and cannot be read; erasing the key drops "
        "it: loom erase --memory-key NAME:KEY --apply"
    )


def _stored_sealed(event: object) -> bool | None:
    """Whether a memory event's entries are stored sealed (True) or in clear (False); None for
    a write that stores no entry (a remove, a clear, an empty replace): nothing to erase."""
    if not isinstance(event, MemoryAppended | MemoryReplaced) or not event.entries:
        return None
    return all(_is_sealed(raw) for raw in event.entries)


def memory_key_subjects(loom: Loom, value: str) -> tuple[list[ErasedSubject], list[str]]:
    """The ``loom.erasure`` entry point for ``memory_key``: ``NAME:KEY`` (split at the first
    colon; a memory's name holds none) as its subject and how many of its writes are sealed,
    and the writes stored in clear before encryption was switched on (``<subject>@<version>``:
    not erasable).

    Reads the key's stream from the log, not a store: the log is what holds the entries. A
    key never written is :class:`~loom_runtime.ErasureSubjectError`."""
    memory, colon, key = value.partition(":")
    if not colon or not memory.strip() or not key:
        raise ErasureSubjectError(
            f"name a memory key as NAME:KEY (the memory's name, 'memory' by default, then the "
            f"key), not {value!r}; nothing was written"
        )
    subject = memory_subject(memory, key)
    sealed = 0
    clear: list[str] = []
    for event in loom.log.events(memory_stream(memory, key)):
        stored = _stored_sealed(event)
        if stored:
            sealed += 1
        elif stored is not None:
            clear.append(f"{subject}@{event.originator_version}")
    if not sealed and not clear:
        raise ErasureSubjectError(
            f"memory {memory!r} holds no entries written at key {key!r} in the log at "
            f"{loom.settings.url!r}; nothing was written (keys are matched exactly)"
        )
    held_by = tuple(str(e) for e in recalled_by(loom, memory, [key]).get(key, ()))
    found = (
        [ErasedSubject(subject=subject, execution_id=None, events=sealed, held_by=held_by)]
        if sealed
        else []
    )
    return found, clear


def recalled_by(loom: Loom, memory: str, keys: Iterable[str]) -> dict[str, list[UUID]]:
    """For each of ``memory``'s ``keys``, the live executions whose recorded recalls returned
    one of its entries: their records keep a copy under their own keys, which erasing the
    memory key does not reach, so an erasure's report names them (``held_by``, as for a
    document's recorded retrievals: ADR 0055).

    A recall is a decision of kind ``"memory"`` (a tier's ``recall`` and ``recall_relevant``,
    or the application's own) whose value is a list of entries, one of which was written at
    the key (the same entry, compared encoded: content, id, role, time and taint), among
    :func:`~loom_runtime.executions_holding` those recalls."""
    keyring = keyring_for(loom.log.engine)
    written: dict[bytes, set[str]] = {}
    for key in keys:
        for event in loom.log.events(memory_stream(memory, key)):
            if isinstance(event, MemoryAppended | MemoryReplaced):
                for entry in open_entries(keyring, event, damaged=False) or ():
                    written.setdefault(msgspec.json.encode(entry), set()).add(key)
    found: dict[str, list[UUID]] = {}
    if not written:
        return found
    for execution in executions_holding(loom, "memory"):
        recalled: set[str] = set()
        for decision in execution.decisions.values():
            if decision.kind != "memory" or decision.value is None:
                continue
            try:
                entries = msgspec.json.decode(decision.value, type=list[MemoryEntry])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # a recall of another shape (the application's own)
            asked = _recalled_key(decision.input)
            for entry in entries:
                holding = written.get(msgspec.json.encode(entry), set())
                recalled |= holding if asked is None else holding & {asked}
        for key in sorted(recalled):
            found.setdefault(key, []).append(execution.id)
    return found


class _Recall(msgspec.Struct):
    tier: str
    scope: str


def _recalled_key(recorded_input: msgspec.Raw) -> str | None:
    """The key a tier's recall read (its input names the tier and scope), or None for a
    recall of another shape: the same entry written at two keys (a seeded welcome message) is
    then told apart by the key the recall asked."""
    try:
        asked = msgspec.json.decode(recorded_input, type=_Recall)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return tier_key(asked.tier, asked.scope)


def memory_keys_written_before(
    loom: Loom, memory: str, cutoff: datetime
) -> tuple[list[ErasedSubject], list[str]]:
    """The ``loom.retention`` entry point for ``memory``: every key of ``memory`` whose last
    write of any kind (append, replace, remove, clear) is older than ``cutoff``, as erasure
    subjects, and the writes of those keys stored in clear (not erasable).

    The last write, so every byte the erasure removes from the log is older than the cutoff
    and a key still in use is left alone (ADR 0060, amended). What this does not do: a key
    written continuously keeps its old entries in the log, whatever their age (entries are not
    subjects: ADR 0060 says why); a tier's TTL evicts them from the live store. One pass over
    the log's memory events, decoding each (their entries stay sealed: only the memory's name,
    key, kind and time are read). A memory the log never held is
    :class:`~loom_runtime.ErasureSubjectError`: a typo in a crontab must fail loudly, not
    erase nothing every night."""
    last: dict[str, datetime] = {}
    sealed: dict[str, int] = {}
    clear: dict[str, list[str]] = {}
    for record in loom.log.notifications(topics=MEMORY_TOPICS):
        event: MemoryEvent = loom.log.decode(record)
        if event.memory != memory:
            continue
        key = event.key
        last[key] = event.timestamp
        stored = _stored_sealed(event)
        if stored:
            sealed[key] = sealed.get(key, 0) + 1
        elif stored is not None:
            named = f"{memory_subject(memory, key)}@{event.originator_version}"
            clear.setdefault(key, []).append(named)
    if not last:
        raise ErasureSubjectError(
            f"the log at {loom.settings.url!r} holds no memory named {memory!r}; nothing was "
            "written (memory names are matched exactly; the default is 'memory')"
        )
    old = [key for key, written in last.items() if written < cutoff]
    held = recalled_by(loom, memory, [key for key in old if key in sealed])
    subjects = [
        ErasedSubject(
            subject=memory_subject(memory, key),
            execution_id=None,
            events=sealed[key],
            held_by=tuple(str(e) for e in held.get(key, ())),
        )
        for key in old
        if key in sealed
    ]
    return subjects, [named for key in old for named in clear.get(key, ())]


__all__ = [
    "forget_destroyed",
    "keys_named",
    "memory_key_subjects",
    "memory_keys_written_before",
    "memory_subject",
    "open_entries",
    "seal_entries",
    "text_key",
    "write_key",
]
