"""Listings come back in code-point order on a PostgreSQL database whose collation is not C
(ADR 0015, amended 2026-12-05 "collation").

Documents are listed "by id" and scopes "sorted": SQLite orders text by code point, and so
does PostgreSQL under the C collation the test server uses, but a database made with a
language's collation (what most managed servers default to) ordered ``_x`` before ``9z`` and
``B-doc`` after ``Ä-doc``: ``loom knowledge list``, an as-of listing and the "known: ..." of an
unknown scope came back in another order than on SQLite.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from loom_knowledge import Doc, open_knowledge_base
from loom_knowledge.corpus.knowledge_base import known_scopes
from loom_runtime import Loom

pytestmark = pytest.mark.postgres

IDS = ["B-doc", "a-doc", "_x", "9z", "Ä-doc"]
SCOPES = ["Ops", "api", "_misc"]


@pytest.fixture
def icu_url(pg_url: str) -> Iterator[str]:
    """A database collated by ICU's English rules, dropped afterwards."""
    name = f"icu_{uuid.uuid4().hex[:12]}"
    admin = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        try:
            conn.execute(
                f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu "
                "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            )
        except psycopg.Error as exc:  # a server built without ICU
            pytest.skip(f"SKIPPED: this PostgreSQL cannot make an ICU database ({exc})")
    try:
        yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_listings_are_in_code_point_order_whatever_the_collation(icu_url: str) -> None:
    with Loom(icu_url) as loom:
        for scope in SCOPES:
            kb = open_knowledge_base(loom, scope)
            for doc_id in IDS:
                kb.put_doc(Doc(id=doc_id, text=f"text of {doc_id}"))
        kb = open_knowledge_base(loom, "api")
        assert [d.id for d in kb.list_docs()] == sorted(IDS)
        assert [d.id for d in kb.as_of(loom.log.position).list_docs()] == sorted(IDS)
        assert known_scopes(loom) == sorted(SCOPES)
