"""Loom used for the first time under ``freeze_time`` keeps working once the clock thaws.

loom imports its modules lazily, and msgspec resolves a Struct's field types on first use.
Both read the name ``datetime`` at that moment: inside ``freeze_time`` it is freezegun's
``FakeDatetime``, which msgspec then expects for every later timestamp. So a user's first
test that happened to freeze the clock broke every memory search, execution listing and
bundle read of the tests after it with ``Expected FakeDatetime, got str``. Each case runs in
a fresh interpreter, because the state is process-wide and the suite has warmed it already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from freezegun import freeze_time

    folder = Path(sys.argv[1])


    def use(name):
        from loom_memory import EventSourcedMemory, MemoryEntry
        from loom_runtime import Loom

        with Loom(f"sqlite:///{folder / name}.db") as loom:

            @loom.flow("f")
            def f(ctx, x: int) -> int:
                assert ctx.now().tzinfo is not None  # the recorded clock decodes too
                return ctx.decide("k", lambda: x + 1)

            run = loom.run("f", x=1)
            assert loom.replay(run.execution_id).identical
            assert [e.execution_id for e in loom.executions()] == [run.execution_id]
            path = folder / f"{name}.json"
            loom.export(run.execution_id, path)
            assert loom.replay_bundle(path).identical
            memory = EventSourcedMemory(loom, name="notes")
            memory.append("alice", [MemoryEntry(content="the harbour office", id="a")])
            assert [e.id for e in memory.search("alice", "harbour")] == ["a"]


    with freeze_time("2026-01-01 12:00:00"):
        use("frozen")
    use("thawed")
    print("ok")
    """
)


@pytest.mark.slow
def test_loom_first_used_under_a_frozen_clock_works_after_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
