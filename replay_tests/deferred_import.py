"""A module imported when a test first uses it, not when pytest collects the test file.

Every pytest-xdist worker imports every test file to collect it, so a module-level
``import anthropic`` in a test file cost each worker the SDK's import (about 2 s of CPU for
anthropic, 2-3 s for LangGraph or LlamaIndex with loom's bridge), whether or not that worker
ran one of the file's tests: the SDK imports were about 60% of a worker's collection. A test
file binds the name to :func:`deferred` at run time and imports the real module for the type
checker only::

    if TYPE_CHECKING:
        import anthropic
    else:
        anthropic = deferred("anthropic")

and its tests carry ``pytest.mark.xdist_group`` named after the SDK, so that one worker pays
the import (ADR 0031). The first attribute read imports the module; a missing SDK fails that
test with the ordinary ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Deferred:
    """Stands for module ``name``; each attribute read is the module's own attribute."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            # pytest and its plugins probe every name of a test module at collection
            # (``__test__``, ``_pytestfixturefunction``...): answering would import the SDK.
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<deferred import of {self._name}>"


def deferred(name: str) -> Any:
    """Module ``name``, imported on its first attribute read (see the module docstring)."""
    return _Deferred(name)
