"""On PostgreSQL the schema catalog sees what a query sees: the tables visible through the
search path, as SQLAlchemy's ``has_table`` did before an open read the catalog once (ADR 0054,
amended "pgopen"). A catalog of ``current_schema()`` alone missed loom's tables when the first
schema of the search path was another, and an open created a second, empty set there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, Table, create_engine

from loom_runtime import SchemaCatalog, create_missing, read_catalog

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


def _catalog_after(engine: Engine, *statements: str) -> SchemaCatalog:
    """The catalog as ``statements`` leave the database."""
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
        return read_catalog(conn)


def test_a_table_visible_through_the_search_path_is_found_and_not_created_again(
    engine: Engine,
) -> None:
    table = Table("loom_probe", MetaData(), Column("id", Integer, primary_key=True))
    with engine.begin() as conn:
        table.metadata.create_all(conn)  # in public
        conn.exec_driver_sql("CREATE SCHEMA other")
    with engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL search_path TO other, public")
        assert engine.dialect.has_table(conn, "loom_probe")  # the reference
        assert "loom_probe" in read_catalog(conn).tables
        assert read_catalog(conn).primary_keys["loom_probe"] == ("id",)
        assert create_missing(conn, [table]) == set()
        created = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'other'"
        ).scalar_one()
    assert created == 0


def test_a_composite_key_is_read_in_key_order_and_a_keyless_table_has_none(
    engine: Engine,
) -> None:
    """Key columns in the key's order (not the table's); a table without a key has none."""
    catalog = _catalog_after(
        engine,
        "CREATE TABLE loom_pair (a INT, b TEXT, c INT, PRIMARY KEY (c, a))",
        "CREATE TABLE loom_loose (a INT)",
    )
    assert catalog.primary_keys["loom_pair"] == ("c", "a")
    assert "loom_loose" in catalog.tables and "loom_loose" not in catalog.primary_keys


def test_columns_a_primary_key_includes_are_not_part_of_it(engine: Engine) -> None:
    """``PRIMARY KEY (a) INCLUDE (b)``: the index holds b, the key is a alone."""
    catalog = _catalog_after(
        engine, "CREATE TABLE loom_covered (a INT, b INT, PRIMARY KEY (a) INCLUDE (b))"
    )
    assert catalog.primary_keys["loom_covered"] == ("a",)
