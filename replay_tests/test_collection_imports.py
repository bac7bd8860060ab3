"""Collecting the SDK tests imports no SDK: each xdist worker collects every test file (ADR 0031).

A module-level ``import anthropic`` (or LangGraph, LlamaIndex) in a test file is paid by
every worker at collection, about 2 s of CPU each, whether or not the worker runs the file's
tests; those files bind the SDKs with ``replay_tests.deferred_import.deferred`` instead, and
their tests are grouped on one worker. A new module-level import fails this test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SDKS = ("anthropic", "openai", "llama_index", "langgraph", "mcp")
# The whole suite, not a list of the files known to use an SDK: a new test file importing one
# at module level (a bridge test importing LlamaIndex's) went unseen by such a list.
FILES = ["replay_tests"]
COLLECT = f"""
import sys
import pytest
code = pytest.main(["--co", "-q", "-p", "no:randomly", *{FILES!r}])
assert code == 0, code
print("IMPORTED", sorted({{name.split(".")[0] for name in sys.modules}} & set({SDKS!r})))
"""


def test_collecting_the_sdk_tests_imports_no_sdk(
    imported_at_collection: frozenset[str] | None,
) -> None:
    """Read from this session's own collection when it collected the whole suite (as every
    worker of a full or quick run does): a collection of its own in a subprocess cost 5-10 s
    of CPU. A session that collected only some files collects the suite in a subprocess."""
    if imported_at_collection is not None:
        assert sorted(imported_at_collection & set(SDKS)) == []
        return
    done = subprocess.run(
        [sys.executable, "-c", COLLECT], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "IMPORTED []", done.stdout[-2000:]


def test_a_deferred_module_is_imported_on_first_use() -> None:
    """The stand-in gives the module's own attributes, and a missing module fails on use."""
    from replay_tests.deferred_import import deferred

    assert deferred("json").dumps is __import__("json").dumps
    missing = deferred("no_such_module_anywhere")
    with pytest.raises(ModuleNotFoundError):
        _ = missing.anything
    with pytest.raises(AttributeError):  # what pytest probes at collection imports nothing
        _ = missing.__test__
