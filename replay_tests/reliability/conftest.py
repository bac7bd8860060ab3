"""Make this folder's helper modules importable by its tests, as they are by its workers.

The worker scripts are run by file path, so Python puts this folder first on their
``sys.path`` and they import ``reliability_workload`` and friends by name. The tests must
import the very same modules (the parent replays executions with the flows the workers
recorded, and runs the same invariant checker as the restarted processes), but pytest's
``--import-mode=importlib`` never adds a test folder to ``sys.path``. Adding it here, once,
keeps one copy of every helper instead of a test-side twin. The module names carry a
``reliability_`` prefix so they cannot shadow another folder's helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def postgres_database(pytestconfig: pytest.Config) -> Callable[[], AbstractContextManager[str]]:
    """A factory of fresh PostgreSQL databases, each dropped when its ``with`` block ends.

    Borrowed from the suite's own conftest (not copied): the crash harness needs one database
    per kill point, created inside its worker threads rather than by the function-scoped
    ``db_url`` fixture. Skips, with the suite's one loud reason, when there is no server.
    """
    suite = pytestconfig.pluginmanager.get_plugin(str(Path(__file__).parents[1] / "conftest.py"))
    assert suite is not None, "the suite's conftest.py is not loaded"
    if not suite.PG_URL:
        pytest.skip(suite.NO_PG)
    factory: Callable[[], AbstractContextManager[str]] = suite.postgres_databases()
    return factory
