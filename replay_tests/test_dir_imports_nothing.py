"""``dir()`` of a loom package imports nothing (ADR 0022, amended).

freezegun's first ``freeze_time`` walks every loaded module with ``dir()`` and ``getattr``.
When a package's ``dir()`` listed its lazy names, that walk imported every one of them and
their dependencies (about a thousand modules, pydantic among them) while the clock was
frozen: a second of start-up in every test process, and pydantic, imported under a fake
``datetime``, then refused to build a model with a ``datetime`` field anywhere later in the
same process (a test of the LangChain guide after any frozen test failed that way).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

PACKAGES = ["loom_runtime", "loom_memory", "loom_knowledge"]

_WALK = """
import json, sys
import loom_runtime, loom_memory, loom_knowledge
before = set(sys.modules)
for package in (loom_runtime, loom_memory, loom_knowledge):
    for name in dir(package):
        getattr(package, name)
from freezegun import freeze_time
with freeze_time("2026-01-01"):
    pass
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_walking_dir_and_freezing_time_imports_no_lazy_name() -> None:
    """In a fresh interpreter: ``getattr`` of every name ``dir()`` lists, then a first
    ``freeze_time``, import no module of loom's and none of the dependencies behind its lazy
    names (freezegun itself may import a few of its own)."""
    done = subprocess.run([sys.executable, "-c", _WALK], capture_output=True, text=True, check=True)
    imported = json.loads(done.stdout)
    assert [name for name in imported if name.split(".")[0].startswith("loom")] == []
    assert "pydantic" not in imported and "sqlalchemy" not in imported


@pytest.mark.parametrize("package", PACKAGES)
def test_a_name_once_used_is_listed(package: str) -> None:
    """``dir()`` still lists every public name that has been resolved, and every name of a
    module already imported (so completion offers what is loaded)."""
    module = importlib.import_module(package)
    name = module.__all__[0]
    getattr(module, name)
    assert name in dir(module)
