"""Lazy public names for a package ``__init__`` (PEP 562), so importing a package is cheap.

A package lists where each public name lives; the name's module is imported the first time the
name is used (``from loom_runtime import Loom``, ``loom_runtime.Loom``), not when the package
is. Scripts and the pytest plugin that never touch a name never pay for its dependencies.
The ``__init__`` keeps an explicit ``__all__`` and imports every name under
``if TYPE_CHECKING:`` so type checkers and IDEs see them exactly as eager imports.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` for ``package``, whose ``exports`` map each public
    name to the module defining it.

    A resolved name is stored on the package, so each is imported once and later lookups are
    plain attribute reads.

    ``__dir__`` lists the names already bound and those whose module is already imported, never
    one that would import something: tools walk ``dir()`` and ``getattr`` every name listed
    (freezegun's first ``freeze_time`` does, for every loaded module), and a listed lazy name
    made that walk import all of them and their dependencies, pydantic's under a frozen clock.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        loaded = (name for name, module in exports.items() if module in sys.modules)
        return sorted({*vars(sys.modules[package]), *loaded})

    return __getattr__, __dir__
