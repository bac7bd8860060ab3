"""A synced folder that changes under the sync, or holds a file too large to read.

The walk checks each entry (a regular file, a link inside the root) and the read came later,
by path: a file deleted in between crashed the sync with a traceback, one swapped for a FIFO
blocked it for ever, and one swapped for a link to a file outside the root put that file in
the append-only log. A sparse file of any size was read whole into memory before anything
refused it. Each is now a refusal naming the document (``InvalidDocumentError``, exit 2).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loom_knowledge import InvalidDocumentError, load_docs, scan_docs
from loom_knowledge.corpus.corpus_files import DocScan
from loom_runtime.tools.cli import app

SECRET = "root:x:0:0:the secret outside the folder"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kept.md").write_text("# Kept\n\nStays as it is.")
    (docs / "victim.md").write_text("Changes under the sync.")
    (tmp_path / "secret.txt").write_text(SECRET)
    return docs


def _after_the_walk_checks(
    monkeypatch: pytest.MonkeyPatch, name: str, change: Callable[[Path], None]
) -> None:
    """Run ``change`` on the entry ``name`` right after the walk found it a regular file."""
    checked = Path.is_file

    def is_file_then_change(self: Path) -> bool:
        found = checked(self)
        if found and self.name == name:
            change(self)
        return found

    monkeypatch.setattr(Path, "is_file", is_file_then_change)


def test_a_file_deleted_after_the_walk_is_a_refusal_naming_it(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a FileNotFoundError traceback: a typed refusal that says to sync again."""
    _after_the_walk_checks(monkeypatch, "victim.md", Path.unlink)
    with pytest.raises(InvalidDocumentError, match=r"victim\.md.*sync again"):
        scan_docs(folder)


def test_a_file_swapped_for_a_link_out_of_the_root_is_not_read(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link the walk never saw is refused, and the file outside stays out of the log."""

    def swap(path: Path) -> None:
        path.unlink()
        path.symlink_to(folder.parent / "secret.txt")

    _after_the_walk_checks(monkeypatch, "victim.md", swap)
    with pytest.raises(InvalidDocumentError, match=r"victim\.md") as refused:
        scan_docs(folder)
    assert SECRET not in str(refused.value)


@pytest.fixture
def fifo_swap(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``victim.md`` becomes a FIFO after the walk; released afterwards if a read hangs on it."""
    victim = folder / "victim.md"

    def swap(path: Path) -> None:
        path.unlink()
        os.mkfifo(path)

    _after_the_walk_checks(monkeypatch, "victim.md", swap)
    yield victim
    if victim.exists():
        # A reader still blocked in open() gets a writer and EOF, and its thread ends.
        with contextlib.suppress(OSError):
            os.close(os.open(victim, os.O_WRONLY | os.O_NONBLOCK))


def test_a_file_swapped_for_a_fifo_after_the_walk_does_not_block_the_sync(
    folder: Path, fifo_swap: Path
) -> None:
    """The read refuses what is no longer a regular file instead of waiting for a writer."""
    outcome: list[BaseException | DocScan] = []

    def scan() -> None:
        try:
            outcome.append(scan_docs(folder))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=scan, daemon=True)
    reader.start()
    reader.join(timeout=30)  # a hang detector: the fixed read returns at once
    assert outcome, "the sync blocked opening a FIFO swapped in after the walk"
    [result] = outcome
    assert isinstance(result, InvalidDocumentError), result
    assert "victim.md" in str(result)


def test_a_file_over_the_size_cap_is_refused_before_it_is_read(folder: Path) -> None:
    """A sparse 100 MiB file costs no memory: refused by its size, naming the cap."""
    with (folder / "huge.md").open("wb") as huge:
        huge.truncate(100 * 1024 * 1024)
    with pytest.raises(InvalidDocumentError, match=r"huge\.md.*max_file_bytes"):
        scan_docs(folder)
    (folder / "huge.md").unlink()
    assert [doc.id for doc in scan_docs(folder, max_file_bytes=30).docs] == [
        "kept.md",
        "victim.md",
    ]
    with pytest.raises(InvalidDocumentError, match=r"kept\.md.*over the 10 bytes"):
        scan_docs(folder, max_file_bytes=10)


def test_the_cli_refuses_a_changed_or_huge_file_in_one_line(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loom knowledge sync` exits 2 with one error line, and --max-file-bytes raises the cap."""
    (folder / "big.md").write_text("x" * 200)
    db = f"sqlite:///{tmp_path / 'loom.db'}"
    sync = ["knowledge", "sync", str(folder), "--scope", "ops", "--db", db, "--apply"]
    refused = CliRunner().invoke(app, [*sync, "--max-file-bytes", "100"])
    assert refused.exit_code == 2, refused.output
    assert "big.md" in refused.output and "--max-file-bytes" in refused.output
    assert "Traceback" not in refused.output
    assert CliRunner().invoke(app, [*sync, "--max-file-bytes", "200"]).exit_code == 0
    _after_the_walk_checks(monkeypatch, "victim.md", Path.unlink)
    vanished = CliRunner().invoke(app, sync)
    assert vanished.exit_code == 2, vanished.output
    assert vanished.output.startswith("error: ") and "sync again" in vanished.output


def test_load_docs_takes_the_same_cap(folder: Path) -> None:
    """load_docs, scan_docs' documents, refuses and raises the cap the same way."""
    with pytest.raises(InvalidDocumentError, match=r"kept\.md.*over the 10 bytes"):
        load_docs(folder, max_file_bytes=10)
    assert len(load_docs(folder, max_file_bytes=30)) == 2


def test_a_directory_swapped_for_a_link_out_of_the_root_is_not_read(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file was opened without following a link only in its last component: a directory
    on its path swapped for a link after the walk carried the read out of the root (to a
    same-named file anywhere). Every component is now opened without following a link."""
    inner = folder / "team"
    inner.mkdir()
    (inner / "notes.md").write_text("The team's own notes.")
    outside = folder.parent / "elsewhere"
    outside.mkdir()
    (outside / "notes.md").write_text(SECRET)

    def swap(path: Path) -> None:
        path.parent.rename(folder / "team.orig")
        (folder / "team").symlink_to(outside, target_is_directory=True)

    _after_the_walk_checks(monkeypatch, "notes.md", swap)
    with pytest.raises(InvalidDocumentError, match=r"team/notes\.md.*sync again") as refused:
        scan_docs(folder)
    assert SECRET not in str(refused.value)


def test_links_the_rules_follow_are_still_read(tmp_path: Path) -> None:
    """A file link inside the root, an external directory link with follow_external_links,
    and a root given through a link: read as before (their checked targets, link-free)."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "a.md").write_text("A")
    (real / "b.md").symlink_to(real / "sub" / "a.md")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "c.md").write_text("C")
    (real / "ext").symlink_to(shared, target_is_directory=True)
    (tmp_path / "root-link").symlink_to(real, target_is_directory=True)
    scan = scan_docs(tmp_path / "root-link", follow_external_links=True)
    assert [(d.id, d.text) for d in scan.docs] == [
        ("b.md", "A"),
        ("ext/c.md", "C"),
        ("sub/a.md", "A"),
    ]
