"""The optional stemmer of the shared tokenizer, on every backend (the ``stem`` extra).

Stemming is opt-in per store: the default tokenizer is unchanged, a stemming store finds
"runs" for "running" on SQLite, PostgreSQL and the in-memory reference alike (the kit's
stemming clauses, run here against stemmed stores), and a store refuses to be opened under a
tokenizer other than the one its index was built with.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine

from loom_memory import (
    InMemoryMemoryStore,
    MemoryEntry,
    PostgresMemoryStore,
    SqliteMemoryStore,
    SqliteTemporalStore,
    StoreConfigurationError,
    Tokenizer,
    tokenize,
)
from loom_memory.conformance import MemoryStoreContract
from replay_tests.conftest import PostgresKit, SqliteCopy

PG_URL = os.environ.get("LOOM_TEST_PG_URL", "")
ENGLISH = Tokenizer(stemmer="english")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'memory.db'}")
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def pg_engine() -> Iterator[Engine]:
    engine = create_engine(PG_URL)
    yield engine
    engine.dispose()


def _kit_schema(url: str) -> None:
    """The stemmed kit's tables, made once per worker; each kit test opens a copy (ADR 0054)."""
    engine = create_engine(url)
    SqliteMemoryStore(engine, table_prefix="kit_", tokenizer=ENGLISH).close()
    engine.dispose()


def _temporal_kit_schema(url: str) -> None:
    """:func:`_kit_schema` for the temporal store."""
    engine = create_engine(url)
    SqliteTemporalStore(engine, table_prefix="kit_", tokenizer=ENGLISH).close()
    engine.dispose()


def _postgres_kit_schema(url: str) -> None:
    """:func:`_kit_schema` on PostgreSQL (``postgres_kit``)."""
    engine = create_engine(url)
    PostgresMemoryStore(engine, table_prefix="kit_", tokenizer=ENGLISH).close()
    engine.dispose()


class TestStemmedSqliteStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, sqlite_copy: SqliteCopy) -> Iterator[SqliteMemoryStore]:
        engine = create_engine(sqlite_copy(_kit_schema, "memory.db"))
        store = SqliteMemoryStore(engine, table_prefix="kit_", tokenizer=ENGLISH)
        yield store
        store.close()
        engine.dispose()


class TestStemmedSqliteTemporalStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, sqlite_copy: SqliteCopy) -> Iterator[SqliteTemporalStore]:
        engine = create_engine(sqlite_copy(_temporal_kit_schema, "memory.db"))
        store = SqliteTemporalStore(engine, table_prefix="kit_", tokenizer=ENGLISH)
        yield store
        store.close()
        engine.dispose()


class TestStemmedInMemoryStore(MemoryStoreContract):
    @pytest.fixture
    def store(self) -> InMemoryMemoryStore:
        return InMemoryMemoryStore(tokenizer=ENGLISH)


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="LOOM_TEST_PG_URL is not set")
class TestStemmedPostgresStore(MemoryStoreContract):
    @pytest.fixture
    def store(self, postgres_kit: PostgresKit) -> Iterator[PostgresMemoryStore]:
        engine = create_engine(postgres_kit(_postgres_kit_schema))
        store = PostgresMemoryStore(engine, table_prefix="kit_", tokenizer=ENGLISH)
        yield store
        store.close()
        engine.dispose()


def test_the_default_tokenizer_does_not_stem() -> None:
    """The default is unchanged: every word keeps its own term."""
    assert tokenize("Running runs RAN") == ["running", "runs", "ran"]
    assert Tokenizer().tokenize("Running runs") == ["running", "runs"]


def test_a_stemming_tokenizer_stems_after_folding_and_stop_words() -> None:
    assert ENGLISH.tokenize("The Runner was RUNNING; runs!") == ["runner", "run", "run"]
    assert ENGLISH.query_terms("running runs ran") == ["run", "ran"]


def test_the_identity_names_the_stemmer() -> None:
    assert Tokenizer().identity != ENGLISH.identity
    assert "english" in ENGLISH.identity
    assert Tokenizer(stemmer="english") == ENGLISH


def test_an_unknown_language_is_a_configuration_error() -> None:
    with pytest.raises(StoreConfigurationError, match="no Snowball stemmer"):
        Tokenizer(stemmer="klingon")


def test_a_plain_store_does_not_find_another_inflection(engine: Engine) -> None:
    """Negative control: without the stemmer, 'running' and 'runs' are different terms."""
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(content="the runner runs daily", id="a")])
    assert store.search("k", "running") == []


def test_a_store_refuses_another_tokenizer_while_it_holds_rows(engine: Engine) -> None:
    """A stemmed index is never searched or appended to with plain terms, nor the reverse."""
    SqliteMemoryStore(engine, tokenizer=ENGLISH).append("k", [MemoryEntry(content="runs")])
    with pytest.raises(StoreConfigurationError, match="different tokenizer"):
        SqliteMemoryStore(engine)
    SqliteMemoryStore(engine, tokenizer=ENGLISH)  # the one it was built with still opens


def test_a_store_written_before_tokenizers_were_recorded_is_plain(engine: Engine) -> None:
    """Rows without a recorded tokenizer hold plain terms: a stemming open is refused."""
    store = SqliteMemoryStore(engine)
    store.append("k", [MemoryEntry(content="runs")])
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {store.settings.name}")
    with pytest.raises(StoreConfigurationError, match="loom-words-v1'"):
        SqliteMemoryStore(engine, tokenizer=ENGLISH)


def test_an_empty_store_takes_the_tokenizer_it_is_opened_with(engine: Engine) -> None:
    """A cleared store (a projection about to be rebuilt) may change tokenizers."""
    plain = SqliteMemoryStore(engine)
    plain.append("k", [MemoryEntry(content="runs")])
    plain.clear("k")
    stemmed = SqliteMemoryStore(engine, tokenizer=ENGLISH)
    stemmed.append("k", [MemoryEntry(content="runs", id="a")])
    assert [entry.id for entry in stemmed.search("k", "running")] == ["a"]
    with pytest.raises(StoreConfigurationError):
        SqliteMemoryStore(engine)


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="LOOM_TEST_PG_URL is not set")
def test_sqlite_postgresql_and_the_reference_match_the_same_entries(
    engine: Engine, pg_engine: Engine
) -> None:
    """A seeded workload of inflected manual text: every backend matches the same entries,
    and PostgreSQL's term index answers exactly its own scan (ADR 0017's statement)."""
    rng = random.Random(17)
    words = [
        "index",
        "indexes",
        "indexed",
        "indexing",
        "table",
        "tables",
        "tabled",
        "query",
        "queries",
        "queried",
        "querying",
        "connect",
        "connection",
        "connections",
        "connected",
        "run",
        "runs",
        "running",
        "runner",
        "search",
        "searches",
        "searched",
        "searching",
    ]
    entries = [
        MemoryEntry(content=" ".join(rng.choices(words, k=rng.randint(2, 12))), id=f"e{n}")
        for n in range(90)  # fewer than the limit: every match is returned
    ]
    postgres = PostgresMemoryStore(
        pg_engine, table_prefix=f"p{uuid.uuid4().hex[:12]}_", tokenizer=ENGLISH
    )
    try:
        stores = [
            SqliteMemoryStore(engine, tokenizer=ENGLISH),
            postgres,
            InMemoryMemoryStore(tokenizer=ENGLISH),
        ]
        for store in stores:
            store.append("k", entries)
        for _ in range(60):
            query = " ".join(rng.sample(words, rng.randint(1, 3)))
            found = [
                {entry.id for entry in store.search("k", query, limit=100)} for store in stores
            ]
            assert found[0] == found[1] == found[2], query
            ranked = [entry.id for entry in postgres.search("k", query, limit=10)]
            scanned = postgres.search("k", query, limit=10, where=postgres.entries.c.seq > 0)
            assert ranked == [entry.id for entry in scanned], query
    finally:
        postgres.drop()
