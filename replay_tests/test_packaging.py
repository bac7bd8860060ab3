"""What installing loom brings (ADR 0022): SQLite needs no optional driver, tools stay out of the
user-facing extras, and the wheel carries its licence."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0] for requirement in requirements}


def test_optional_backends_are_extras() -> None:
    """psycopg and eventsourcing-sqlalchemy are the postgres and sqlalchemy extras, not core."""
    core = _names(PROJECT["dependencies"])
    extras = PROJECT["optional-dependencies"]
    assert not {"psycopg", "psycopg-pool", "eventsourcing-sqlalchemy"} & core
    assert _names(extras["postgres"]) == {"psycopg", "psycopg-pool"}
    assert _names(extras["sqlalchemy"]) == {"eventsourcing-sqlalchemy"}


def test_the_http_client_is_an_extra() -> None:
    """httpx, which only the recording transport needs, is the http extra, not core."""
    extras = PROJECT["optional-dependencies"]
    assert "httpx" not in _names(PROJECT["dependencies"])
    assert _names(extras["http"]) == {"httpx"}


def test_dev_tools_are_not_in_the_test_extra() -> None:
    """ruff and mypy are the dev extra; ``test`` holds what the tests import."""
    extras = PROJECT["optional-dependencies"]
    assert not {"ruff", "mypy"} & _names(extras["test"])
    assert {"ruff", "mypy"} <= _names(extras["dev"])


def test_typer_and_rich_have_upper_bounds() -> None:
    """typer and rich, whose major releases change their APIs, are capped like eventsourcing."""
    capped = _names([r for r in PROJECT["dependencies"] if "<" in r])
    assert {"typer", "rich", "eventsourcing", "sqlalchemy"} <= capped


def test_the_licence_ships_in_the_wheel() -> None:
    """The Apache-2.0 text is in the repository and named in ``license-files``."""
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
