"""`MemoryEntry`: one item of the ordered list a memory key names, and its one wire format.

An entry is stored whole, as the JSON msgspec writes for it, by every backend. That is what
makes the two fields a decomposing backend gets wrong round-trip by construction:

* ``id`` is optional for a caller and must come back exactly, because the ``remove`` fallback
  (read, filter by id, replace) silently deletes nothing on a store that drops it.
* ``role`` is optional and an absent role reads back ABSENT (``msgspec.UNSET``), never ``None``:
  ``{content}`` and ``{role: null, content}`` are different prompts. UNSET fields are omitted
  from the JSON, so there is no null to read back.

``origin`` is the taint: when present the content is third-party (for example a corpus
passage anyone with wiki access could have written) and the value is its provenance label. The
label travels with the entry but is never searchable text (see :mod:`loom_memory.text`).

:func:`encode_entries` validates a whole batch before a backend writes anything, so a bad entry
in position 5 cannot leave entries 0-4 half-written. Every backend refuses the same entries:
text holding NUL (PostgreSQL cannot store it in text, so an event-sourced memory would log an
entry it can never project) or a lone surrogate (not encodable), and content nested more than
:data:`~loom_runtime.codec.MAX_DATA_DEPTH` levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NoReturn, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from loom_memory.errors import (
    EntryNotSerialisableError,
    InvalidKeyError,
    MemoryIdentifierSecretError,
)
from loom_runtime import (
    MAX_DATA_DEPTH,
    Redactor,
    UtcTimestamp,
    json_problem,
    plain_datetime_hook,
    text_problem,
    too_deep,
)

Content: TypeAlias = str | int | float | bool | list[Any] | dict[str, Any] | None
"""JSON-like content: str, int, finite float, bool, None, and lists / str-keyed dicts of them."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class MemoryEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One remembered item: content plus the optional id, role and taint it is recalled with."""

    content: Content
    id: str | UnsetType = UNSET
    role: str | UnsetType = UNSET
    timestamp: UtcTimestamp = msgspec.field(default_factory=_utc_now)
    origin: str | UnsetType = UNSET

    @property
    def tainted(self) -> bool:
        """True when the content is third-party and must stay out of instruction positions."""
        return self.origin is not UNSET


_encoder = msgspec.json.Encoder(enc_hook=plain_datetime_hook)
_decoder = msgspec.json.Decoder(MemoryEntry)


def encode_entries(entries: Sequence[MemoryEntry]) -> list[bytes]:
    """Validate every entry, then encode each; raise before returning anything if one is bad.

    A value that msgspec would encode but not read back equal (a tuple, a NaN, a naive
    timestamp) is refused too, because a store must return what it was given.
    """
    if isinstance(entries, MemoryEntry) or not isinstance(entries, Sequence):
        raise EntryNotSerialisableError(
            f"entries must be a list of MemoryEntry, got {type(entries).__name__}",
            path="entries",
        )
    for index, entry in enumerate(entries):
        _check_entry(entry, f"entries[{index}]")
    return [_encode(entry, f"entries[{index}]") for index, entry in enumerate(entries)]


def _encode(entry: MemoryEntry, path: str) -> bytes:
    """``entry`` as JSON; what msgspec cannot write (a float subclass, an int past Python's
    4,300-digit string limit) is the typed refusal every other bad value gets, not a bare
    ``TypeError`` or ``ValueError``."""
    try:
        return _encoder.encode(entry)
    except (TypeError, ValueError) as exc:
        raise EntryNotSerialisableError(
            f"{path} cannot be encoded as JSON ({exc}); use plain str, int, float, bool, "
            "None, list and dict values; nothing was written",
            path=path,
        ) from exc


def decode_entry(data: bytes | str) -> MemoryEntry:
    """Decode one stored entry (the inverse of :func:`encode_entries`)."""
    return _decoder.decode(data)


def check_identifiers(
    redactor: Redactor | None,
    *,
    key: str,
    entries: Sequence[MemoryEntry] = (),
    ids: Sequence[str] = (),
) -> None:
    """Refuse a key or entry id that ``redactor`` (the log's) takes for a secret (ADR 0012).

    Identifiers are stored as given, never redacted: a redacted key files the entries under
    another key, so ``read`` of the key given finds nothing. Checked on validated entries,
    before anything reaches the log; a store without a log (no redactor) stores them as is.
    """
    if redactor is None:
        return
    error = MemoryIdentifierSecretError
    redactor.check_identifier(key, path="key", error=error)
    for index, entry in enumerate(entries):
        redactor.check_identifier(entry.id, path=f"entries[{index}].id", error=error)
    redactor.check_identifier(list(ids), path="ids", error=error)


def _check_entry(entry: object, path: str) -> None:
    if not isinstance(entry, MemoryEntry):
        raise EntryNotSerialisableError(
            f"{path} is a {type(entry).__name__}, not a MemoryEntry: wrap it in MemoryEntry(...)",
            path=path,
        )
    for name in ("id", "role", "origin"):
        value = getattr(entry, name)
        if value is not UNSET and not isinstance(value, str):
            _refuse(f"{path}.{name}", value, "a str or absent")
        if isinstance(value, str):
            _check_text(value, f"{path}.{name}")
    _check_timestamp(entry.timestamp, f"{path}.timestamp")
    deep = too_deep(entry.content, limit=MAX_DATA_DEPTH)
    if deep is not None:
        raise EntryNotSerialisableError(
            f"{path}.content{deep} nests more than {MAX_DATA_DEPTH} levels deep "
            "(loom_runtime.codec.MAX_DATA_DEPTH); flatten the content; nothing was written",
            path=f"{path}.content{deep}",
        )
    _check_content(entry.content, f"{path}.content")


MAX_KEY_BYTES: Final = 1024
"""The longest key or entry id, in bytes of UTF-8, on every backend. PostgreSQL's index rows
(key and sequence, key and entry id) hold at most 2,704 bytes: a longer key the log took
could not be projected there, and the event, in the append-only log, blocked the memory for
good. Refused before anything is written, on every backend alike."""


def too_long(text: str) -> str | None:
    """What is wrong with ``text`` as an event-sourced memory's key or entry id past
    :data:`MAX_KEY_BYTES`, or None (its text was checked already, :func:`text_problem`)."""
    if len(text) * 4 <= MAX_KEY_BYTES:  # at most 4 bytes a letter: no need to encode it
        return None
    size = len(text.encode("utf-8"))
    return (
        f"is {size:,} bytes of UTF-8, over {MAX_KEY_BYTES:,} bytes"
        if size > MAX_KEY_BYTES
        else None
    )


MAX_ENTRY_BYTES: Final = 256 * 1024
"""The largest entry, encoded, on every backend. PostgreSQL's search vector holds at most 1 MB:
1.3 MB of distinct words could not be projected there, with the same permanent block as an
over-long key. An entry of this size in distinct short words (the densest vector) fits."""


def _check_text(text: str, path: str) -> None:
    problem = text_problem(text)
    if problem is not None:
        raise EntryNotSerialisableError(
            f"{path} {problem}; remove it from the text; nothing was written", path=path
        )


def check_bounds(
    *, key: str, entries: Sequence[MemoryEntry] = (), encoded: Sequence[bytes] = ()
) -> None:
    """Refuse a key, entry id or entry past :data:`MAX_KEY_BYTES` / :data:`MAX_ENTRY_BYTES`,
    before an event-sourced write reaches the log (ADR 0004, "bounds"): the log would take
    it, a PostgreSQL store could not, and the event would block the memory for good. Only
    there: a store written directly fails the one write, and the corpus index (a projection
    of documents, whose ids and sizes the knowledge layer bounds) must take what it is given."""
    problem = too_long(key)
    if problem is not None:
        raise InvalidKeyError(key, problem=problem)
    for index, entry in enumerate(entries):
        if isinstance(entry.id, str) and (problem := too_long(entry.id)) is not None:
            path = f"entries[{index}].id"
            raise EntryNotSerialisableError(
                f"{path} {problem}; shorten it; nothing was written", path=path
            )
    for index, data in enumerate(encoded):
        if len(data) > MAX_ENTRY_BYTES:
            raise EntryNotSerialisableError(
                f"entries[{index}] is {len(data):,} bytes encoded, over {MAX_ENTRY_BYTES:,} "
                "bytes (loom_memory.entry.MAX_ENTRY_BYTES); split it; nothing was written",
                path=f"entries[{index}]",
            )


def _check_timestamp(timestamp: object, path: str) -> None:
    """Refuse a timestamp the log would not give back equal: a naive one or one whose zone
    has no offset (msgspec writes both without one, and they are refused when read back, so
    the event would block the memory for good), and an offset that is not a whole number of
    minutes (RFC 3339 has none finer: msgspec dropped the seconds, moving the instant)."""
    if not isinstance(timestamp, datetime):
        _refuse(path, timestamp, "a timezone-aware datetime")
    try:
        offset = timestamp.utcoffset()
    except (TypeError, ValueError) as exc:  # a tzinfo answering what datetime refuses
        raise EntryNotSerialisableError(
            f"{path}'s timezone has no valid UTC offset ({exc}); nothing was written", path=path
        ) from exc
    if offset is None:
        _refuse(path, timestamp, "a timezone-aware datetime (its tzinfo gives no UTC offset)")
    if offset % _MINUTE:
        _refuse(path, timestamp, "a UTC offset of whole minutes (convert it to UTC)")


_MINUTE: Final = timedelta(minutes=1)


def _check_content(value: object, path: str) -> None:
    """Refuse content the log would not give back equal (the runtime's one JSON check)."""
    found = json_problem(value, path)
    if found is not None:
        where, problem = found
        raise EntryNotSerialisableError(f"{where} {problem}; nothing was written", path=where)


def _refuse(path: str, value: object, expected: str) -> NoReturn:
    raise EntryNotSerialisableError(
        f"{path} is {type(value).__name__} {value!r}, expected {expected}; nothing was written",
        path=path,
    )
