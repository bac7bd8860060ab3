"""Importing loom is cheap (ADR 0022): lazy public names, a plugin that imports nothing, a quick
``loom --help``.

What a statement imports is read as the benchmark's "imports" section reads it
(:func:`benchmarks.imports.import_cost`: ``python -X importtime`` in a fresh interpreter).
These tests check WHICH modules are imported, never how long they took: the time budgets live
in the benchmark (``python -m benchmarks --only imports``), where timing belongs; as unit
tests they failed on a loaded machine without anything having changed.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.imports import (
    ImportCost,
    import_cost,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["loom_runtime", "loom_memory", "loom_knowledge"]

# The optional backends' drivers: once the log imports them only when selected, opening a
# SQLite log must not pay for them.
OPTIONAL_BACKENDS = ("psycopg", "eventsourcing_sqlalchemy")
DATABASE_LAYERS = {"sqlalchemy", "eventsourcing", *OPTIONAL_BACKENDS}
HTTP_CLIENT = "httpx"
"""Imported only when ``loom_runtime.transport`` or ``async_transport`` is first used."""


def measure(statement: str, *, after: str = "") -> ImportCost:
    """What ``statement`` imports (see ``import_cost``)."""
    return import_cost(statement, after=after)


def _init_source(package: str) -> ast.Module:
    return ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves(package: str) -> None:
    """Each name in ``__all__`` resolves to the object, never to a module of the same name."""
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, ModuleType), f"{package}.{name} is the module, not the name"
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = module.NoSuchName


@pytest.mark.parametrize("package", PACKAGES)
def test_lazy_table_matches_the_type_checking_imports(package: str) -> None:
    """``__all__``, the imports type checkers see, and the lazy table name the same things."""
    module = importlib.import_module(package)
    imported: dict[str, str] = {}
    for node in ast.walk(_init_source(package)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{package}."):
            imported.update({alias.asname or alias.name: str(node.module) for alias in node.names})
    assert sorted(imported) == sorted(module.__all__)
    lazy = module._EXPORTS
    assert {name: imported[name] for name in lazy} == lazy
    eager = set(imported) - set(lazy)
    assert all(name in vars(module) for name in eager), "a name neither lazy nor bound"


@pytest.mark.slow
@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_package_is_cheap(package: str) -> None:
    """``import <package>`` imports no backend, log, database driver or HTTP client."""
    cost = measure(f"import {package}")
    assert not DATABASE_LAYERS & set(cost.modules)
    assert HTTP_CLIENT not in cost.modules


@pytest.mark.slow
def test_opening_a_sqlite_log_imports_no_optional_backend() -> None:
    """``from loom_runtime import Loom`` (all a SQLite user needs) imports neither an optional
    backend (psycopg, eventsourcing-sqlalchemy) nor an HTTP client."""
    cost = measure("from loom_runtime import Loom")
    assert HTTP_CLIENT not in cost.modules
    optional = [name for name in OPTIONAL_BACKENDS if name in cost.modules]
    assert optional == [], f"a SQLite user's import pulled in the optional backends {optional}"


@pytest.mark.slow
def test_the_pytest_plugin_costs_a_session_nothing() -> None:
    """The plugin, loaded into every pytest session, imports nothing of loom but its names."""
    cost = measure("import loom_runtime.tools.pytest_plugin", after="import pytest")
    assert set(cost.modules) <= {
        "loom_runtime",
        "loom_runtime.lazy",
        "loom_runtime.tools",
        "loom_runtime.tools.pytest_plugin",
    }


@pytest.mark.slow
def test_the_cli_imports_no_log() -> None:
    """Building the ``loom`` app, every command registered, imports Typer and Rich, no log."""
    cost = measure("import loom_runtime.tools.cli")
    assert not DATABASE_LAYERS & set(cost.modules)


def _help(*command: str) -> str:
    """What ``command --help`` prints."""
    done = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["loom_runtime", "loom_runtime.tools.cli"])
def test_python_dash_m_runs_the_same_cli(module: str) -> None:
    """``python -m loom_runtime`` and ``python -m loom_runtime.tools.cli`` print loom's own help."""
    expected = _help(sys.executable, "-c", "from loom_runtime.tools.cli import main; main()")
    output = _help(sys.executable, "-m", module)
    assert f"Usage: python -m {module} " in output

    def without_usage(text: str) -> list[str]:
        return [line for line in text.splitlines() if "Usage:" not in line]

    assert without_usage(output) == without_usage(expected)
    assert "knowledge" in output


@pytest.mark.slow
def test_every_event_decodes_in_a_process_that_imported_no_package_above(
    sqlite_url: str,
) -> None:
    """Lazy packages have not registered their events when ``loom doctor`` reads the log; the
    ``loom.events`` entry points they declare are imported on the first unknown topic."""
    from loom_knowledge import Doc, open_knowledge_base
    from loom_memory import EventSourcedMemory, MemoryEntry
    from loom_runtime import Loom

    with Loom(sqlite_url) as loom:
        open_knowledge_base(loom, "docs").sync([Doc(id="a", text="Restart the pool.")])
        EventSourcedMemory(loom).append("chat", [MemoryEntry(content="hello")])
    done = subprocess.run(
        [sys.executable, "-m", "loom_runtime", "doctor", "--db", sqlite_url],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok log readable: 3 events decode" in " ".join(done.stdout.split())
