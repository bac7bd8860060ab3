"""On PostgreSQL the schema catalog sees what a query sees: the tables visible through the
search path, as SQLAlchemy's ``has_table`` did before an open read the catalog once (ADR 0054,
amended "pgopen"). A catalog of ``current_schema()`` alone missed loom's tables when the first
schema of the search path was another, and an open created a second, empty set there."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, create_engine

from loom_runtime import create_missing, read_catalog

pytestmark = pytest.mark.postgres


def test_a_table_visible_through_the_search_path_is_found_and_not_created_again(
    pg_url: str,
) -> None:
    engine = create_engine(pg_url)
    table = Table("loom_probe", MetaData(), Column("id", Integer, primary_key=True))
    try:
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
    finally:
        engine.dispose()


def test_a_composite_key_is_read_in_key_order_and_a_keyless_table_has_none(pg_url: str) -> None:
    """Key columns in the key's order (not the table's); a table without a key has none."""
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE loom_pair (a INT, b TEXT, c INT, PRIMARY KEY (c, a))"
            )
            conn.exec_driver_sql("CREATE TABLE loom_loose (a INT)")
            catalog = read_catalog(conn)
        assert catalog.primary_keys["loom_pair"] == ("c", "a")
        assert "loom_loose" in catalog.tables and "loom_loose" not in catalog.primary_keys
    finally:
        engine.dispose()


def test_columns_a_primary_key_includes_are_not_part_of_it(pg_url: str) -> None:
    """``PRIMARY KEY (a) INCLUDE (b)``: the index holds b, the key is a alone."""
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE TABLE loom_covered (a INT, b INT, PRIMARY KEY (a) INCLUDE (b))"
            )
            assert read_catalog(conn).primary_keys["loom_covered"] == ("a",)
    finally:
        engine.dispose()
