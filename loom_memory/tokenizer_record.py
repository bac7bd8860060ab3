"""Which tokenizer a SQL store's index holds the terms of, recorded beside its rows.

Why: the index stores terms, not text. A store indexed with stemmed terms ("run") searched by
a plain tokenizer ("running") would match less, silently, and one appended to under both would
hold a mix no query answers consistently. So a tokenizer is part of the index's identity, as
an embedding model is part of a vector index's (ADR 0038): the store records
:attr:`~loom_memory.text.Tokenizer.identity` in ``<prefix>settings`` and refuses to open under
another while it holds rows. An empty store (new, cleared, or its rows all removed) takes the
tokenizer it is opened with, so a rebuild into it may change tokenizers. A store written before
tokenizers were recorded holds plain terms (nothing else existed), and is recorded as such.

That record is a read model's row, though, and a store rebuilt by code that was not told how
it is built (``loom rebuild``, ``loom doctor``) cannot trust it: its tables may be gone, or the
row deleted. So an event-sourced memory also records its store's build, the tokenizer and
postings, in the log (:class:`~loom_memory.events.MemoryStoreBuilt`, :func:`record_build`),
and such a rebuild reads it from there (:func:`recorded_build`); the settings row only decides
for a store the log records nothing of.
"""

from __future__ import annotations

from sqlalchemy import Column, Connection, Engine, MetaData, Table, Text, delete, insert, select
from sqlalchemy import inspect as inspect_schema

from loom_memory.errors import StoreConfigurationError
from loom_memory.events import MemoryStoreBuilt, store_stream
from loom_memory.text import PLAIN, PLAIN_IDENTITY, Tokenizer, tokenizer_named
from loom_runtime import Change, EventLog

SETTING = "tokenizer"
"""The settings row naming the tokenizer."""


def settings_table(prefix: str, metadata: MetaData) -> Table:
    """The store's settings: one ``(name, value)`` row per setting, created and dropped with
    the entries table."""
    return Table(
        f"{prefix}settings",
        metadata,
        Column("name", Text, primary_key=True),
        Column("value", Text, nullable=False),
    )


def check_tokenizer(
    conn: Connection, settings: Table, entries: Table, tokenizer: Tokenizer
) -> None:
    """Record ``tokenizer`` for the store, or refuse it if the store's rows have other terms.

    Runs in the open's transaction, under its DDL lock, so two openers do not race.
    """
    named = settings.c.name == SETTING
    recorded = conn.execute(select(settings.c.value).where(named)).scalar()
    empty = conn.execute(select(entries.c.seq).limit(1)).first() is None
    if recorded is None and not empty:
        recorded = PLAIN_IDENTITY
    if recorded == tokenizer.identity:
        return
    if not empty:
        raise StoreConfigurationError(
            f"the store {entries.name!r} is indexed with the tokenizer {recorded!r}, not "
            f"{tokenizer.identity!r}: a different tokenizer is a different index. Open it with "
            "the tokenizer it was built with, or rebuild it under a new table_prefix"
        )
    conn.execute(delete(settings).where(named))
    conn.execute(insert(settings).values(name=SETTING, value=tokenizer.identity))


def recorded_tokenizer(engine: Engine, prefix: str) -> Tokenizer:
    """The tokenizer the store at ``prefix`` records (plain when it records none: a store
    written before tokenizers were recorded, or one never opened)."""
    settings = settings_table(prefix, MetaData())
    if not inspect_schema(engine).has_table(settings.name):
        return PLAIN
    with engine.connect() as conn:
        recorded = conn.execute(select(settings.c.value).where(settings.c.name == SETTING))
        identity = recorded.scalar()
    return PLAIN if identity is None else tokenizer_named(identity)


def recorded_build(log: EventLog, memory: str, prefix: str) -> MemoryStoreBuilt | None:
    """How ``log`` last recorded memory ``memory``'s store at ``prefix`` to be built (one
    indexed read); None when it records nothing: a plain store without postings, or one last
    written before builds were recorded, which only its own tables describe."""
    latest = next(iter(log.events(store_stream(memory, prefix), desc=True, limit=1)), None)
    return latest if isinstance(latest, MemoryStoreBuilt) else None


def record_build(
    log: EventLog, memory: str, prefix: str, *, tokenizer: Tokenizer, postings: bool
) -> None:
    """Record in ``log`` that memory ``memory``'s store at ``prefix`` is built with
    ``tokenizer`` and ``postings``, unless that is what the log records already (nothing
    recorded reads as plain without postings). Decided on the stream's version, so two
    writers recording the same build at once append it once."""
    built = {
        "memory": memory,
        "table_prefix": prefix,
        "tokenizer": tokenizer.identity,
        "postings": postings,
    }

    def plan(version: int) -> tuple[list[Change], None]:
        last = recorded_build(log, memory, prefix) if version else None
        recorded = (PLAIN_IDENTITY, False) if last is None else (last.tokenizer, last.postings)
        if recorded == (tokenizer.identity, postings):
            return [], None
        return [(MemoryStoreBuilt, built)], None

    log.append_replanned(
        store_stream(memory, prefix), plan, what=f"the build of memory {memory!r}'s store"
    )
