"""The ``slow`` tests are handed out first (``replay_tests/conftest.py``, ADR 0054).

pytest-xdist hands single tests out in collection order, and collection put the long ones of
``replay_tests/test_*.py`` (mypy, the import-cost subprocesses) last, where one worker ran
them alone at the end of the run. The suite's collection now starts with every ``slow`` test.
"""

from __future__ import annotations

import pytest

from replay_tests.conftest import pytest_collection_modifyitems

MIXED = """
import pytest

def test_a(): pass

@pytest.mark.slow
def test_b(): pass

def test_c(): pass

@pytest.mark.slow
class TestD:
    def test_d(self): pass
"""


def test_the_slow_tests_come_first_in_their_collected_order(pytester: pytest.Pytester) -> None:
    """Marked on the function or on its class, slow tests move ahead; each part keeps its order."""
    pytester.makeini("[pytest]\nmarkers =\n    slow: a long test\n")  # no unknown-mark warning
    items = pytester.getitems(MIXED)
    pytest_collection_modifyitems(items)
    assert [item.name for item in items] == ["test_b", "test_d", "test_a", "test_c"]


def test_this_session_hands_out_its_slow_tests_first(request: pytest.FixtureRequest) -> None:
    """The hook is the suite's: in the session running this test, no slow test follows one
    that is not."""
    slow = [item.get_closest_marker("slow") is not None for item in request.session.items]
    assert slow == sorted(slow, reverse=True)
