"""Which tokenizer a SQL store's index holds the terms of, recorded beside its rows.

Why: the index stores terms, not text. A store indexed with stemmed terms ("run") searched by
a plain tokenizer ("running") would match less, silently, and one appended to under both would
hold a mix no query answers consistently. So a tokenizer is part of the index's identity, as
an embedding model is part of a vector index's (ADR 0038): the store records
:attr:`~loom_memory.text.Tokenizer.identity` in ``<prefix>settings`` and refuses to open under
another while it holds rows. An empty store (new, cleared, or its rows all removed) takes the
tokenizer it is opened with, so a rebuild into it may change tokenizers. A store written before
tokenizers were recorded holds plain terms (nothing else existed), and is recorded as such.
"""

from __future__ import annotations

from sqlalchemy import Column, Connection, Engine, MetaData, Table, Text, delete, insert, select
from sqlalchemy import inspect as inspect_schema

from loom_memory.errors import StoreConfigurationError
from loom_memory.text import PLAIN, PLAIN_IDENTITY, Tokenizer, tokenizer_named

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
