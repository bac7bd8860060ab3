"""Progress on long operations (ADR 0008): the library reports it through a ``progress``
callback, and the CLI draws it as a bar on stderr only when stderr is a terminal.

The callbacks are checked where a bar depends on them: called at all, rising, one total
throughout, and ending at that total (a bar left at 80% on success is a lie). The CLI is
checked both ways: in the runner (a pipe) no bar character appears anywhere; with stderr a
terminal, one does, on stderr only; and ``--json`` never draws one.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

import loom_runtime.integrity
from loom_knowledge import Doc, open_knowledge_base
from loom_runtime import Loom, verify_log
from loom_runtime.tools import cli

BAR = "━"
"""What Rich draws a bar with; no command prints it otherwise."""


def _rising_to_the_end(calls: list[tuple[int, int]]) -> int:
    """The one total of ``calls``, after checking they rise strictly and end at it."""
    assert calls, "progress was never reported"
    [total] = {total for _, total in calls}
    done = [count for count, _ in calls]
    assert done == sorted(set(done)), calls
    assert done[-1] == total, calls
    return total


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite log with a scope ``ops`` of three documents."""
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    with Loom(url) as loom:
        open_knowledge_base(loom, "ops").sync(
            [Doc(id=f"{n}.md", text=f"Runbook {n}: restart the service.") for n in range(3)],
            source="repo",
        )
    return url


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(4):
        (folder / f"{n}.md").write_text(f"Runbook {n}: rotate the logs, then page someone.")
    return folder


def test_verify_reports_positions_up_to_the_head(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of one event less than the log holds makes the walk report on its way, and
    then (head, head) because it checked them all, not because a step fell on the head."""
    calls: list[tuple[int, int]] = []
    with Loom(db) as loom:
        head = loom.log.position
        monkeypatch.setattr(loom_runtime.integrity, "PROGRESS_STEP", head - 1)
        report = verify_log(loom.log, progress=lambda done, total: calls.append((done, total)))
    assert report.ok
    assert calls == [(head - 1, head), (head, head)]
    assert _rising_to_the_end(calls) == head


def test_a_tampered_log_never_reports_done(db: str) -> None:
    """The bar stops where the walk did: reaching the total would say the log checked out."""
    import sqlite3

    with Loom(db) as loom:
        head = loom.log.position
    path = db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE stored_events SET topic = topic || 'x' WHERE rowid = 2")
    calls: list[tuple[int, int]] = []
    with Loom(db) as loom:
        report = verify_log(loom.log, progress=lambda done, total: calls.append((done, total)))
    assert not report.ok
    assert (head, head) not in calls


def test_sync_reports_each_appended_event_indexed(db: str) -> None:
    """A sync writing 2 documents and removing 1 appends 4 events (the reconcile's too); an
    unchanged re-sync appends its reconcile event alone."""
    folder = [
        Doc(id="0.md", text="Runbook 0: restart the service."),  # unchanged
        Doc(id="1.md", text="Runbook 1: restart it, then check the disk."),  # edited
        Doc(id="9.md", text="Runbook 9: new."),  # written; 2.md is removed
    ]
    calls: list[tuple[int, int]] = []
    with Loom(db) as loom:
        kb = open_knowledge_base(loom, "ops")
        result = kb.sync(
            folder, source="repo", progress=lambda done, total: calls.append((done, total))
        )
        assert (len(result.written), len(result.removed)) == (2, 1)
        assert _rising_to_the_end(calls) == 4
        calls.clear()
        kb.sync(folder, source="repo", progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 1)]


def test_sync_reports_done_when_another_reader_indexed_its_events(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the append and the sync's own catch-up another reader may index the events:
    the catch-up then applies nothing and reports nothing, and the sync still ends at done."""
    from loom_knowledge.corpus.knowledge_base import KnowledgeBase

    refresh = KnowledgeBase.refresh

    def indexed_by_another_reader_first(
        self: KnowledgeBase, *, progress: Callable[[int, int], None] | None = None
    ) -> int:
        refresh(self)
        return refresh(self, progress=progress)

    calls: list[tuple[int, int]] = []
    with Loom(db) as loom:
        kb = open_knowledge_base(loom, "ops")
        monkeypatch.setattr(KnowledgeBase, "refresh", indexed_by_another_reader_first)
        kb.sync(
            [Doc(id="0.md", text="Runbook 0: rewritten.")],
            source="repo",
            allow_mass_delete=True,
            progress=lambda done, total: calls.append((done, total)),
        )
    assert calls == [(4, 4)]  # 0.md written, 1.md and 2.md removed, the reconcile


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args))


def _long_operations(db: str, docs: Path) -> list[list[str]]:
    db_opt = ["--db", db]
    return [
        ["verify", "--db", db],
        ["rebuild", "--db", db],
        ["knowledge", "sync", str(docs), "--scope", "ops", "--source", "repo", "--apply", *db_opt],
    ]


def test_no_bar_in_a_pipe(db: str, docs: Path) -> None:
    """The runner's streams are not terminals, like a pipe: the result, and no bar."""
    for args in _long_operations(db, docs):
        result = _invoke(*args)
        assert result.exit_code == 0, result.output
        assert result.stdout
        assert BAR not in result.stdout and BAR not in result.stderr, args


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Stderr as a terminal: what the bars draw on, captured."""
    screen = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=screen, force_terminal=True, width=100))
    return screen


def test_a_bar_on_a_terminal_on_stderr_only(db: str, docs: Path, terminal: io.StringIO) -> None:
    for args in _long_operations(db, docs):
        terminal.truncate(0)
        result = _invoke(*args)
        assert result.exit_code == 0, result.output
        assert BAR in terminal.getvalue(), args
        assert "100%" in terminal.getvalue(), args
        assert BAR not in result.stdout, args


def test_json_and_a_dry_run_draw_nothing(db: str, docs: Path, terminal: io.StringIO) -> None:
    """Not a bar, not even the cursor codes of an empty one, on the terminal."""
    quiet = [[*args, "--json"] for args in _long_operations(db, docs) if "rebuild" not in args]
    quiet.append(["knowledge", "sync", str(docs), "--scope", "ops", "--source", "repo", "--db", db])
    for args in quiet:
        result = _invoke(*args)
        assert result.exit_code == 0, result.output
        assert terminal.getvalue() == "", args
