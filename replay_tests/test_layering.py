"""Dependencies go one way: loom_knowledge -> loom_memory -> loom_runtime, through seams.

* Only ``loom_runtime/storage`` imports eventsourcing and its drivers (the log port, ADR 0020).
* A package above the runtime imports only the runtime's public surface: the names in
  ``loom_runtime.__all__``, the value codec ``loom_runtime.codec``, and (from a ``tools``
  folder only) the runtime's tools; knowledge imports only ``loom_memory``'s ``__all__``.
* Knowledge never writes memory's tables: it goes through the store's verbs (ADR 0014).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

ORDER = ["loom_runtime", "loom_memory", "loom_knowledge"]


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once for every test here (the negative control's planted
    module is in a temporary folder, so it is never an earlier parse)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_package_imports_a_package_above_it() -> None:
    """A back edge (runtime importing memory, memory importing knowledge) fails here."""
    back_edges = []
    for rank, package in enumerate(ORDER):
        above = set(ORDER[rank + 1 :])
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in _imports(path) & above:
                back_edges.append(f"{path.relative_to(ROOT)} imports {name}")
    assert back_edges == []


def test_the_walk_sees_real_imports() -> None:
    """Guard against a vacuous pass: the walker does find runtime imports in memory code."""
    found = set().union(*(_imports(p) for p in (ROOT / "loom_runtime").rglob("*.py")))
    assert "eventsourcing" in found and "msgspec" in found


def _mypy_skipped() -> set[str]:
    """The packages pyproject's mypy overrides skip (``follow_imports = "skip"``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {
        pattern.removesuffix(".*")
        for override in config["tool"]["mypy"]["overrides"]
        if override.get("follow_imports") == "skip"
        for pattern in override["module"]
    }


def test_no_package_mypy_skips_is_imported_by_loom() -> None:
    """mypy skips some packages loom reaches only through others (ADR 0031): what they give
    is Any. One that loom imported itself would be checked against nothing, silently."""
    skipped = _mypy_skipped()
    assert {"openai", "urllib3"} <= skipped  # the control: both override groups are read
    imported = {
        name
        for package in ORDER
        for path in (ROOT / package).rglob("*.py")
        for name in _imports(path)
    }
    assert sorted(skipped & imported) == []


STORAGE = ROOT / "loom_runtime" / "storage"
STORAGE_LIBRARIES = {"eventsourcing", "eventsourcing_sqlalchemy", "psycopg", "psycopg_pool"}
"""What only the log's implementation may import: the rest of loom uses the port."""


def test_only_the_storage_package_imports_eventsourcing() -> None:
    """eventsourcing (and the drivers its backends need) are imported in loom_runtime/storage
    alone, so moving to another release or another store touches that folder only."""
    outside = [
        f"{path.relative_to(ROOT)} imports {name}"
        for package in ORDER
        for path in sorted((ROOT / package).rglob("*.py"))
        if STORAGE not in path.parents
        for name in sorted(_imports(path) & STORAGE_LIBRARIES)
    ]
    assert outside == []


PUBLIC_MODULES = {"loom_runtime.codec"}
"""Runtime modules a package above may import from besides the package itself."""


def _surface_violations(package: str, below: str, *, root: Path = ROOT) -> list[str]:
    """Every import in ``package`` (a folder under ``root``) of ``below`` that is not
    ``below``'s public surface."""
    public = set(importlib.import_module(below).__all__)
    found = []
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root)
        in_tools = "tools" in relative.parts
        for node in ast.walk(_parsed(path)):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            where = f"{relative}:{node.lineno}"
            if isinstance(node, ast.Import):
                found += [
                    f"{where} imports {alias.name}"
                    for alias in node.names
                    if alias.name.split(".")[0] == below
                ]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                module = node.module
                if module.split(".")[0] != below or module in PUBLIC_MODULES:
                    continue
                if in_tools and module.startswith(f"{below}.tools"):
                    continue
                if module != below:
                    found.append(f"{where} imports from {module}")
                    continue
                found += [
                    f"{where} imports {below}.{alias.name}, not in {below}.__all__"
                    for alias in node.names
                    if alias.name not in public and f"{below}.{alias.name}" not in PUBLIC_MODULES
                ]
    return found


@pytest.mark.parametrize(
    ("package", "below"),
    [
        ("loom_memory", "loom_runtime"),
        ("loom_knowledge", "loom_runtime"),
        ("loom_knowledge", "loom_memory"),
    ],
)
def test_upper_packages_use_only_the_public_surface_below(package: str, below: str) -> None:
    """A package imports the one below through its ``__all__`` (plus its public modules)."""
    assert _surface_violations(package, below) == []


def test_the_surface_rule_fires_on_a_private_import(tmp_path: Path) -> None:
    """Negative control: an import of a runtime module's internals is reported. The module is
    planted in a copy of the package, never in the source tree, which every other test (on
    every xdist worker) reads at the same time."""
    copy = tmp_path / "loom_memory"
    shutil.copytree(ROOT / "loom_memory", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _surface_violations("loom_memory", "loom_runtime", root=tmp_path) == []
    (copy / "planted.py").write_text(
        "from loom_runtime.context import FlowContext\n", encoding="utf-8"
    )
    assert _surface_violations("loom_memory", "loom_runtime", root=tmp_path) == [
        "loom_memory/planted.py:1 imports from loom_runtime.context"
    ]


def test_knowledge_never_writes_memory_tables(tmp_path: Path) -> None:
    """Every write to the passage store's tables during ingest, edit, removal, rebuild and
    as-of reads is issued from ``loom_memory`` code: knowledge uses the store's verbs only."""
    from sqlalchemy import event

    from loom_knowledge import Doc, open_knowledge_base
    from loom_knowledge.corpus.knowledge_base import corpus_index
    from loom_runtime import Loom

    writers: dict[str, set[str]] = {}
    with Loom(f"sqlite:///{tmp_path / 'loom.db'}") as loom:
        kb = open_knowledge_base(loom, "docs")
        store = corpus_index(loom).store
        memory_tables = {store.entries.name}
        if store.postings is not None:
            memory_tables.add(store.postings.name)

        def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            words = statement.split()
            verb = words[0].upper() if words else ""
            if verb not in {"INSERT", "UPDATE", "DELETE"}:
                return
            if not any(table in statement for table in memory_tables):
                return
            # The frames themselves, not inspect.stack(): that reads every frame's source
            # file, ~0.3 s per statement here.
            frame = inspect.currentframe()
            while frame is not None:
                module = frame.f_globals.get("__name__", "")
                if module.startswith(("loom_memory", "loom_knowledge")):
                    writers.setdefault(verb, set()).add(module.split(".")[0])
                    break
                frame = frame.f_back

        event.listen(loom.log.engine, "before_cursor_execute", record)
        kb.sync([Doc(id="a", text="Restart the pool."), Doc(id="b", text="Drain the queue.")])
        middle = loom.log.position
        kb.put_doc(Doc(id="a", text="Restart the pool, then page the owner."))
        kb.remove_doc("b")
        kb.as_of(middle).retrieve("pool")
        kb.rebuild()
    assert writers.get("UPDATE") and writers.get("INSERT") and writers.get("DELETE"), (
        f"the workload must write the memory tables every way, saw {writers}"
    )
    assert set().union(*writers.values()) == {"loom_memory"}


def test_every_error_loom_raises_is_importable_from_the_package() -> None:
    """The guides name ``BundleTamperedError`` and its family for ``except`` clauses, but
    ``from loom_runtime import BundleTamperedError`` was an ImportError: only ``errors``, not the
    public surface (ADR 0023), held them. Every public exception class of the one hierarchy is
    exported; a new one that is not fails here."""
    import inspect

    import loom_runtime
    from loom_runtime import errors

    missing = [
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
        and not name.startswith("_")
        and name not in loom_runtime.__all__
    ]
    assert missing == []
    assert loom_runtime.BundleTamperedError is errors.BundleTamperedError  # the lazy map too
