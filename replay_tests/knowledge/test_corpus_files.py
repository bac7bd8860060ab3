"""A directory of text files becomes documents with stable ids; the demo runbooks ship with it."""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

from loom_knowledge import (
    Doc,
    InvalidDocumentError,
    InvalidOptionError,
    load_docs,
    load_runbooks,
    scan_docs,
)

RUNBOOK_IDS = [
    "cache-stampede.md",
    "database-slow-queries.md",
    "deploy-rollback.md",
    "disk-full.md",
    "dns-failure.md",
    "on-call-escalation-policy.md",
    "queue-backlog.md",
    "tls-certificate-expiry.md",
]


def test_the_shipped_runbooks_load_as_titled_documents_sorted_by_id() -> None:
    runbooks = load_runbooks()
    assert [doc.id for doc in runbooks] == RUNBOOK_IDS
    assert all(doc.title and not doc.text.startswith("#") for doc in runbooks)
    assert all(1500 <= len(doc.text.encode()) <= 4000 for doc in runbooks)
    assert all(doc.text.count("\n\n") >= 3 for doc in runbooks)


def test_ids_are_relative_posix_paths_and_the_leading_heading_is_the_title(tmp_path: Path) -> None:
    (tmp_path / "ops" / "db").mkdir(parents=True)
    (tmp_path / "ops" / "db" / "restart.md").write_text("\n## Restart the DB ##\n\nDrain first.\n")
    (tmp_path / "notes.txt").write_text("No heading here.\n")
    assert load_docs(tmp_path) == [
        Doc(id="notes.txt", text="No heading here."),
        Doc(id="ops/db/restart.md", text="Drain first.", title="Restart the DB"),
    ]


@pytest.mark.parametrize(
    ("heading", "title"),
    [("# Using C#", "Using C#"), ("### Closed ###", "Closed"), ("#NoSpace", None)],
)
def test_a_closing_hash_run_is_dropped_only_after_a_space(
    tmp_path: Path, heading: str, title: str | None
) -> None:
    (tmp_path / "a.md").write_text(f"{heading}\n\nBody.")
    (doc,) = load_docs(tmp_path)
    assert doc.title == title


def test_a_heading_later_in_the_file_is_text_not_a_title(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Intro.\n\n# Later heading\n")
    assert load_docs(tmp_path) == [Doc(id="a.md", text="Intro.\n\n# Later heading")]


def test_hidden_entries_and_other_file_types_are_skipped(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD.md").write_text("x")
    (tmp_path / ".draft.md").write_text("x")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / "kept.md").write_text("kept")
    assert [doc.id for doc in load_docs(tmp_path)] == ["kept.md"]


def test_a_file_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(InvalidDocumentError) as caught:
        load_docs(tmp_path)
    assert (caught.value.doc_id, caught.value.field) == ("latin1.txt", "text")


def test_a_byte_order_mark_is_not_text(tmp_path: Path) -> None:
    """A file saved with a UTF-8 byte order mark (Windows editors) reads as the same file
    without one: its heading is still the title, and no U+FEFF starts the text."""
    (tmp_path / "bom.md").write_bytes("\ufeff# Disk full\n\nDelete old logs.".encode())
    (tmp_path / "plain.md").write_bytes(b"# Disk full\n\nDelete old logs.")
    bom, plain = load_docs(tmp_path)
    assert (bom.title, bom.text) == (plain.title, plain.text) == ("Disk full", "Delete old logs.")


def test_a_folder_nested_deeper_than_the_recursion_limit_is_walked(tmp_path: Path) -> None:
    """Git holds a tree of any depth: the walk is a loop, not a recursion, so 400 levels
    (deeper than the recursion limit the walk runs under here) are read instead of a
    RecursionError. Not 1,000 under Python's own limit: that document's id would be past
    MAX_ID_BYTES, which a file's path may not be."""
    deep = tmp_path
    for _ in range(400):  # one level at a time: mkdir(parents=True) itself recurses
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.md").write_text("found")
    (tmp_path / "top.md").write_text("top")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 300)
    try:
        docs = load_docs(tmp_path)
    finally:  # removed here, level by level: shutil.rmtree (pytest's clean-up) recurses too
        sys.setrecursionlimit(limit)
        (deep / "bottom.md").unlink()
        while deep != tmp_path:
            deep.rmdir()
            deep = deep.parent
    assert [doc.id for doc in docs] == ["d/" * 400 + "bottom.md", "top.md"]


def test_a_file_the_document_rules_refuse_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "nul.md").write_text("a\x00b")
    with pytest.raises(InvalidDocumentError) as caught:
        load_docs(tmp_path)
    assert caught.value.doc_id == "nul.md"


@pytest.fixture
def linked_folder(tmp_path: Path) -> Path:
    """A docs folder with links out of it (a file, a folder), a link inside it, a link to
    itself and a dangling link."""
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "passwd.txt").write_text("root:x:0:0")
    (outside / "shadow.md").write_text("root:$6$secret")
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "a.md").write_text("alpha")
    (root / "leak.md").symlink_to(outside / "shadow.md")
    (root / "etc").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to(root / "guides" / "a.md")
    (root / "again").symlink_to(root / "guides", target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "gone.md").symlink_to(tmp_path / "nowhere.md")
    return root


def test_links_out_of_the_folder_are_not_followed(linked_folder: Path) -> None:
    """Nothing outside the root enters the append-only log: the links are listed as skipped.

    A file link inside the root is a document; a directory link inside it is not followed
    (its target is read under its own path, so ids stay unique and a loop ends)."""
    scan = scan_docs(linked_folder)
    assert [doc.id for doc in scan.docs] == ["alias.md", "guides/a.md"]
    assert "root" not in "".join(doc.text for doc in scan.docs)
    assert sorted(scan.skipped) == ["etc", "gone.md", "leak.md"]
    assert [doc.id for doc in load_docs(linked_folder)] == ["alias.md", "guides/a.md"]


def test_load_docs_warns_of_each_link_it_skips(
    linked_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``kb.sync(load_docs(folder))`` is what the README teaches; a link it skipped silently
    (a runbook moved to a shared checkout and linked back) was removed from the corpus by
    the next sync with no word, where ``loom knowledge sync`` warned (newcomer review). Each
    one is a warning on the ``loom.knowledge`` logger now, worded as the CLI's."""
    (linked_folder / "odd\x1b[2Jname.md").symlink_to(linked_folder.parent / "outside" / "x.md")
    with caplog.at_level("WARNING", logger="loom.knowledge"):
        load_docs(linked_folder)
    warned = [record.getMessage() for record in caplog.records]
    assert len(warned) == 4, warned
    assert warned[0].startswith("skipped link 'etc': it points outside ")
    assert "--follow-external-links" not in warned[0]
    assert "follow_external_links=True" in warned[0]
    assert "\x1b" not in "".join(warned)  # a file name cannot drive the terminal


def test_links_out_of_the_folder_are_followed_only_when_asked(linked_folder: Path) -> None:
    """follow_external_links=True reads them (a docs folder linking a shared checkout)."""
    ids = [doc.id for doc in scan_docs(linked_folder, follow_external_links=True).docs]
    assert ids == ["alias.md", "etc/passwd.txt", "etc/shadow.md", "guides/a.md", "leak.md"]


def test_the_sync_command_says_what_it_did_not_follow(linked_folder: Path, db_url: str) -> None:
    """`loom knowledge sync` lists the skipped links and how to include them."""
    from typer.testing import CliRunner

    from loom_runtime.tools.cli import app

    args = ["knowledge", "sync", str(linked_folder), "--scope", "s", "--apply", "--db", db_url]
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 0, out
    assert "2 written" in out and "leak.md" in out and "--follow-external-links" in out
    result = CliRunner().invoke(app, [*args, "--follow-external-links"])
    assert result.exit_code == 0 and "3 written" in " ".join(result.output.split())


@pytest.mark.parametrize("follow_external_links", [False, True])
def test_a_link_to_a_hidden_file_is_skipped_as_the_file_is(
    tmp_path: Path, follow_external_links: bool
) -> None:
    """Links named like documents to ``.git/config`` and ``.env`` in a cloned repository put
    its credentials in the append-only log, though the files themselves are skipped as
    hidden: the rule was checked on the link's name only. Each is listed as skipped, and so
    is a link out of the folder to a hidden file when external links are followed."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("url = https://deploy:s3cret@git.example.com/x")
    (root / ".env").write_text("DB_PASSWORD=correct-horse")
    (tmp_path / ".netrc").write_text("password hunter2")
    (root / "guide.md").write_text("hello")
    (root / "notes.md").symlink_to(".git/config")
    (root / "setup.txt").symlink_to(".env")
    (root / "login.md").symlink_to(tmp_path / ".netrc")
    scan = scan_docs(root, follow_external_links=follow_external_links)
    assert [doc.id for doc in scan.docs] == ["guide.md"]
    assert sorted(scan.skipped) == ["login.md", "notes.md", "setup.txt"]


def test_a_folder_is_named_by_a_string_or_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_docs("runbooks")`` is what a newcomer writes first; it reads the same folder."""
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "disk.md").write_text("# Disk\nRotate the logs.")
    monkeypatch.chdir(tmp_path)
    assert load_docs("runbooks") == load_docs(Path("runbooks")) == load_docs(tmp_path / "runbooks")
    assert [doc.id for doc in load_docs("runbooks")] == ["disk.md"]


def test_a_missing_folder_is_an_error_not_an_empty_corpus(tmp_path: Path) -> None:
    """An empty result would tell a sync to delete every document; a typo must fail."""
    with pytest.raises(InvalidOptionError, match="no directory of documents"):
        load_docs(tmp_path / "runbok")


def test_a_followed_link_into_a_hidden_folder_outside_is_skipped(tmp_path: Path) -> None:
    """With external links followed, a link to ``.env`` outside was skipped but one to
    ``../shared/.git/config`` was read into the log: only the target's own name was checked
    for a leading dot. Every part below where the target leaves the tree it shares with the
    root is checked now; a root that itself lies under a hidden folder still reads its
    sibling's plain files (the control)."""
    base = tmp_path / ".work"  # a hidden ancestor of both: not the target's business
    shared, root = base / "shared", base / "docs"
    (shared / ".git").mkdir(parents=True)
    (shared / ".git" / "config").write_text("url = https://deploy:s3cret@git.example.com/x")
    (shared / "guide.md").write_text("shared guide")
    root.mkdir()
    (root / "cfg.md").symlink_to(shared / ".git" / "config")
    (root / "guide.md").symlink_to(shared / "guide.md")
    scan = scan_docs(root, follow_external_links=True)
    assert [doc.id for doc in scan.docs] == ["guide.md"]
    assert scan.skipped == ["cfg.md"]


def test_a_file_that_became_a_folder_after_the_walk_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read refused a file that vanished, or became a link or a FIFO, after the walk saw
    it ("did it change during the sync?"); one that became a folder raised a bare
    IsADirectoryError out of the sync."""
    from loom_knowledge.corpus import corpus_files

    (tmp_path / "a.md").write_text("a")
    walk = corpus_files._Walk.walk

    def then_a_folder(self: corpus_files._Walk, top: object, prefix: str) -> None:
        walk(self, top, prefix)  # type: ignore[arg-type]
        (tmp_path / "a.md").unlink()
        (tmp_path / "a.md").mkdir()

    monkeypatch.setattr(corpus_files._Walk, "walk", then_a_folder)
    with pytest.raises(InvalidDocumentError, match="no longer a regular file") as caught:
        load_docs(tmp_path)
    assert caught.value.doc_id == "a.md"


def test_a_folder_whose_paths_are_too_long_for_the_system_is_refused_by_name(
    tmp_path: Path,
) -> None:
    """Nested folders whose full path passes the system's limit (4,096 bytes on Linux) made
    the walk's link check raise a bare OSError (ENAMETOOLONG) out of the sync."""
    directory = os.open(tmp_path, os.O_RDONLY)
    try:  # each level made from an open descriptor of the one above: never by its full path
        for _ in range(22):  # 22 levels of 201 bytes: past 4,096
            os.mkdir("d" * 200, dir_fd=directory)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=directory)
            os.close(directory)
            directory = inner
        os.close(os.open("bottom.md", os.O_CREAT | os.O_WRONLY, dir_fd=directory))
    finally:
        os.close(directory)
    (tmp_path / "top.md").write_text("top")
    with pytest.raises(InvalidOptionError, match="too long"):
        load_docs(tmp_path)
