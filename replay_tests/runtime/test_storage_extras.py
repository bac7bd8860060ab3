"""Optional backends are imported only when selected, and a missing one names its extra.

Each check runs in a fresh interpreter: what a module imports is decided once per process.
``sys.modules[name] = None`` makes ``import name`` fail as if the package were not installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_loom_imports_no_optional_backend() -> None:
    """``import loom_runtime`` loads neither psycopg nor eventsourcing-sqlalchemy."""
    result = _run(
        """
        import sys
        import loom_runtime
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in
                        ("psycopg", "psycopg_pool", "eventsourcing_sqlalchemy"))
        print(loaded)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
def test_a_sqlite_log_opens_without_the_optional_backends(tmp_path: object) -> None:
    """A SQLite log opens, writes and reads with psycopg and eventsourcing-sqlalchemy absent."""
    result = _run(
        f"""
        import sys
        for name in ("psycopg", "psycopg_pool", "eventsourcing_sqlalchemy"):
            sys.modules[name] = None
        from loom_runtime import Loom
        with Loom("sqlite:///{tmp_path}/loom.db") as loom:
            print(loom.log.position)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
@pytest.mark.parametrize(
    ("missing", "options", "extra"),
    [
        ("psycopg", "'postgresql://u:p@127.0.0.1:1/db'", "postgres"),
        (
            "eventsourcing_sqlalchemy",
            "'sqlite:///{tmp}/loom.db', persistence='sqlalchemy'",
            "sqlalchemy",
        ),
    ],
)
def test_a_missing_backend_names_its_extra(
    tmp_path: object, missing: str, options: str, extra: str
) -> None:
    """Opening a log whose backend package is missing raises MissingExtraError naming the extra."""
    result = _run(
        f"""
        import sys
        sys.modules[{missing!r}] = None
        from loom_runtime import Loom, MissingExtraError
        try:
            Loom({options.format(tmp=tmp_path)}).log
        except MissingExtraError as exc:
            print(exc.extra, "|", exc)
        """
    )
    assert result.returncode == 0, result.stderr
    found_extra, _, message = result.stdout.partition(" | ")
    assert found_extra == extra
    assert f"pip install 'loom-replay[{extra}]'" in message


def test_encryption_without_its_extra_is_refused_when_the_loom_is_made(tmp_path: object) -> None:
    """``MasterKey.generate()`` needs no extra, so without ``cryptography`` the mistake used to
    show only at the first sealed write, deep in a run. ``Loom(..., encryption=)`` names the
    extra at once, before a database is opened or created."""
    result = _run(
        f"""
        import sys, pathlib
        sys.modules["cryptography"] = None
        from loom_runtime import Loom, MasterKey, MissingExtraError
        key = MasterKey(bytes(32))
        try:
            Loom('sqlite:///{tmp_path}/loom.db', encryption=key)
        except MissingExtraError as exc:
            print(exc.extra, "|", exc, "|", pathlib.Path('{tmp_path}/loom.db').exists())
        """
    )
    assert result.returncode == 0, result.stderr
    found_extra, message, created = result.stdout.strip().split(" | ")
    assert found_extra == "encryption"
    assert "pip install 'loom-replay[encryption]'" in message
    assert created == "False"


@pytest.mark.slow  # a fresh interpreter: slow runs real subprocesses
@pytest.mark.parametrize(
    ("module", "missing", "extra"),
    [
        ("loom_knowledge.bridges.langchain", "langchain_core", "langchain"),
        ("loom_knowledge.bridges.llamaindex", "llama_index", "llamaindex"),
    ],
)
def test_a_framework_bridge_without_its_extra_names_it(
    module: str, missing: str, extra: str
) -> None:
    """Importing a bridge without its framework raised a bare ``ModuleNotFoundError``, where
    every other extra says which to install (a newcomer's walk): ``MissingExtraError``, an
    ``ImportError`` as well, so ``pytest.importorskip`` and ``except ImportError`` still
    catch it (a regression review)."""
    result = _run(
        f"""
        import sys
        sys.modules[{missing!r}] = None
        import pytest
        from loom_runtime import MissingExtraError
        try:
            import {module}
        except MissingExtraError as exc:
            print(exc.extra, isinstance(exc, ImportError))
        try:
            pytest.importorskip({module!r})
        except pytest.skip.Exception:
            print("skipped")
        """
    )
    assert result.returncode == 0, result.stderr
    # `except ImportError` and pytest.importorskip still catch it
    assert result.stdout.split() == [extra, "True", "skipped"]
