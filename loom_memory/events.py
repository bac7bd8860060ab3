"""The memory events: every write to an event-sourced memory is one of these in the log.

One stream per key, ``memory:<name>:<key>``, so writers of one key are ordered by the stream's
version; keys of one memory never contend with each other. Each event names its memory and key
in the payload as well, because a projection selects by topic and must skip other memories'
events without resolving stream ids.

Entries travel as :class:`msgspec.Raw`: the exact JSON :func:`~loom_memory.entry.encode_entries`
validated and produced, stored inline (readable with SQL) and handed back as the same bytes.
Their timestamps were fixed when the entries were built, so every rebuild writes the store
byte for byte as the first projection did. Topics are stored names and never change. Memory
names, keys and removed ids are ``IDENTIFIERS``: never redacted (a redacted key files entries
under another key), refused if they hold a secret (ADR 0012).
"""

from __future__ import annotations

from typing import TypeAlias
from uuid import UUID

import msgspec

from loom_runtime import LogEvent, stream_id

_TOPIC = "loom.memory"


class MemoryAppended(LogEvent):
    """Entries were added to the end of a key's list."""

    TOPIC = f"{_TOPIC}.Appended"
    IDENTIFIERS = ("memory", "key")
    SEALED = ("entries",)  # under the key's own key (ADR 0060)
    memory: str
    key: str
    entries: list[msgspec.Raw]


class MemoryReplaced(LogEvent):
    """A key's whole list was replaced (eviction rewrites, ``remove`` on a rewritten list)."""

    TOPIC = f"{_TOPIC}.Replaced"
    IDENTIFIERS = ("memory", "key")
    SEALED = ("entries",)
    memory: str
    key: str
    entries: list[msgspec.Raw]


class MemoryRemoved(LogEvent):
    """Every entry of a key whose id is in ``ids`` was deleted (ids sorted, for stable bytes)."""

    TOPIC = f"{_TOPIC}.Removed"
    IDENTIFIERS = ("memory", "key", "ids")
    memory: str
    key: str
    ids: list[str]


class MemoryCleared(LogEvent):
    """Every entry of a key was deleted."""

    TOPIC = f"{_TOPIC}.Cleared"
    IDENTIFIERS = ("memory", "key")
    memory: str
    key: str


class MemoryStoreBuilt(LogEvent):
    """Memory ``memory``'s SQL store at ``table_prefix`` indexes with the tokenizer
    ``tokenizer`` (its identity) and keeps postings or not.

    Why in the log: the store's own settings table is a read model too, and a rebuild of a
    store whose tables were dropped read them from tables that were gone, so a stemmed store
    came back plain and its application could not open it. Appended on the store's stream
    (:func:`store_stream`) with the first write through a store built otherwise than the log
    last recorded; a plain store without postings records nothing while nothing else was
    recorded (what a store with no record is read as), so logs of such stores do not change.
    Not a write to a key: not among :data:`MEMORY_TOPICS`.
    """

    TOPIC = f"{_TOPIC}.StoreBuilt"
    IDENTIFIERS = ("memory", "table_prefix", "tokenizer")
    memory: str
    table_prefix: str
    tokenizer: str
    postings: bool


MemoryEvent: TypeAlias = MemoryAppended | MemoryReplaced | MemoryRemoved | MemoryCleared
"""Any memory event (LogEvent subclasses cannot share a base without registering its topic)."""

MEMORY_TOPICS = (
    MemoryAppended.TOPIC,
    MemoryReplaced.TOPIC,
    MemoryRemoved.TOPIC,
    MemoryCleared.TOPIC,
)


def memory_stream(memory: str, key: str) -> UUID:
    """The stream of one key of one memory: the same id in every process."""
    return stream_id(f"memory:{memory}:{key}")


def store_stream(memory: str, table_prefix: str) -> UUID:
    """The stream recording how one memory's store at ``table_prefix`` is built (a memory's
    name holds no ``:``, and no key stream's name starts ``memory-store:``)."""
    return stream_id(f"memory-store:{memory}:{table_prefix}")
