"""Dependencies go one way: loom_knowledge -> loom_memory -> loom_runtime."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["loom_runtime", "loom_memory", "loom_knowledge"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
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
