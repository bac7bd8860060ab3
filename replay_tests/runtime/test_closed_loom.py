"""A closed Loom refuses every use with one typed error, and writes nothing.

Used after ``close()`` (or after its ``with`` block), a Loom raised whatever eventsourcing's
closed pool raised: ``ConnectionPoolClosedError`` with no message on SQLite, an
``OperationalError`` about a pool "opened/closed" on PostgreSQL. Each is now
:class:`LoomClosedError`, naming the log and what to do; a Loom closed before it ever opened
its log does not open (or create) one on its next use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom, LoomClosedError


def _used_then_closed(db_url: str) -> tuple[Loom, dict[str, Callable[[], Any]]]:
    loom = Loom(db_url)

    @loom.flow("shout")
    def shout(ctx: Any, text: str) -> str:
        return str(ctx.decide("upper", lambda: text.upper()))

    run = loom.run("shout", text="hi")
    kb = open_knowledge_base(loom, scope="docs")
    kb.put_doc(Doc(id="a", text="hello world"), source="src")
    loom.close()
    uses: dict[str, Callable[[], Any]] = {
        "run": lambda: loom.run("shout", text="again"),
        "replay": lambda: loom.replay(run.execution_id),
        "executions": loom.executions,
        "execution": lambda: loom.execution(run.execution_id),
        "position": lambda: loom.log.position,
        "search": lambda: kb.search("hello"),
        "put_doc": lambda: kb.put_doc(Doc(id="b", text="more"), source="src"),
    }
    return loom, uses


@pytest.mark.parametrize(
    "use", ["run", "replay", "executions", "execution", "position", "search", "put_doc"]
)
def test_every_use_of_a_closed_loom_is_loom_closed_error(db_url: str, use: str) -> None:
    loom, uses = _used_then_closed(db_url)
    with pytest.raises(LoomClosedError, match="closed") as refused:
        uses[use]()
    assert "Loom(" in str(refused.value)  # says what to do
    loom.close()  # closing again is harmless
    with Loom(db_url) as fresh:
        assert fresh.log.position == 4  # start, decision, end, document: nothing more


def test_a_loom_closed_before_use_opens_nothing(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    loom = Loom(f"sqlite:///{path}")
    loom.close()
    with pytest.raises(LoomClosedError):
        loom.executions()
    assert not path.exists()
