"""``loom export`` and ``loom import`` under an attack review of the command line: an export
never replaces the log's own database or any other file that is not a bundle, a folder that
cannot be made is one line, ``-o DIR/`` is a directory, a FIFO given as a bundle is refused
rather than waited on, and an import its redactor refuses creates no database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loom_runtime import Loom
from loom_runtime.tools.cli import ExitCode
from replay_tests import test_cli_transfer as transfer

source = transfer.source  # a log of three executions: its URL and their ids
_invoke = transfer._invoke

BOUND = 30.0
"""Seconds a command given a FIFO may take: one that waits on it for a writer never ends."""


def _executions(url: str) -> list[str]:
    with Loom(url) as loom:
        return sorted(str(summary.execution_id) for summary in loom.executions())


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_export_over_the_logs_own_database_is_refused(
    tmp_path: Path, source: tuple[str, list[str]], suffix: str
) -> None:
    """``-o`` naming the database ``--db`` opened (or its WAL or shared-memory file) replaced
    it with the bundle: the whole log was gone. Refused, one line, exit 2, nothing written."""
    url, ids = source
    database = tmp_path / "source.db"
    before = database.read_bytes()
    result = _invoke("export", ids[0], "-o", f"{database}{suffix}", "--db", url)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "database" in result.stderr
    assert database.read_bytes() == before
    assert _executions(url) == sorted(ids)
    # control: the same export to a bundle file is written
    bundle = tmp_path / "one.json"
    assert _invoke("export", ids[0], "-o", str(bundle), "--db", url).exit_code == ExitCode.OK
    assert json.loads(bundle.read_text())["execution_id"] == ids[0]


def test_export_replaces_a_bundle_but_no_other_file(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """``-o`` over an existing bundle replaces it (re-exporting is the point), and over an empty
    file (``mktemp``); over anything else (notes, another log, a key) it is refused, exit 2, the
    file untouched: a typo in ``-o`` must not cost a file. The library refuses it too."""
    url, ids = source
    notes = tmp_path / "notes.json"
    notes.write_text("my notes, not a bundle\n")
    result = _invoke("export", ids[0], "-o", str(notes), "--db", url)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr.startswith(f"error: cannot write {notes}: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert notes.read_text() == "my notes, not a bundle\n"
    with Loom(url) as loom, pytest.raises(FileExistsError):
        loom.export(ids[0], notes)
    assert notes.read_text() == "my notes, not a bundle\n"

    # control: a bundle is replaced by another, in either format, and an empty file is written
    for name in ("b.json", "b.msgpack"):
        bundle = tmp_path / name
        assert _invoke("export", ids[0], "-o", str(bundle), "--db", url).exit_code == ExitCode.OK
        again = _invoke("export", ids[1], "-o", str(bundle), "--db", url)
        assert again.exit_code == ExitCode.OK, again.output
    assert json.loads((tmp_path / "b.json").read_text())["execution_id"] == ids[1]
    empty = tmp_path / "empty.json"
    empty.touch()
    assert _invoke("export", ids[2], "-o", str(empty), "--db", url).exit_code == ExitCode.OK
    assert json.loads(empty.read_text())["execution_id"] == ids[2]


def test_export_into_a_folder_that_cannot_be_made_is_one_line(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """``--all -o a/file/sub`` where ``a/file`` is a file: a NotADirectoryError traceback. Now
    one line naming the path, exit 2."""
    url, ids = source
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "file").write_text("x")
    target = tmp_path / "a" / "file" / "sub"
    result = _invoke("export", "--all", "-o", str(target), "--db", url)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert result.stderr.startswith(f"error: cannot write {target}: "), result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    # control: missing parents are made
    made = tmp_path / "a" / "new" / "sub"
    assert _invoke("export", "--all", "-o", str(made), "--db", url).exit_code == ExitCode.OK
    assert sorted(p.name for p in made.iterdir()) == sorted(f"{i}.json" for i in ids)


def test_export_to_a_path_ending_in_a_separator_writes_into_that_directory(
    tmp_path: Path, source: tuple[str, list[str]]
) -> None:
    """``-o newdir/`` for one execution wrote a FILE named ``newdir``: the trailing separator
    says a directory, so it is one (made if missing), holding ``<id>.json``. A file there is
    refused, as for several executions."""
    url, ids = source
    result = _invoke("export", ids[0], "-o", f"{tmp_path / 'newdir'}{os.sep}", "--db", url)
    assert result.exit_code == ExitCode.OK, result.output
    assert [p.name for p in (tmp_path / "newdir").iterdir()] == [f"{ids[0]}.json"]
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    refused = _invoke("export", ids[0], "-o", f"{a_file}{os.sep}", "--db", url)
    assert refused.exit_code == ExitCode.USAGE, refused.output
    assert a_file.read_text() == "kept"
    # control: without the separator, -o names the bundle file
    plain = tmp_path / "plain"
    assert _invoke("export", ids[0], "-o", str(plain), "--db", url).exit_code == ExitCode.OK
    assert json.loads(plain.read_text())["execution_id"] == ids[0]


def _loom(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own, bounded: if it waits on a FIFO, the timeout
    kills it and the test fails, rather than the suite hanging."""
    return subprocess.run(
        [sys.executable, "-m", "loom_runtime", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


@pytest.mark.parametrize("command", ["import", "bundle show"])
def test_a_fifo_given_as_a_bundle_is_refused_not_waited_on(
    tmp_path: Path, source: tuple[str, list[str]], command: str
) -> None:
    """A FIFO's open blocks until a writer comes: ``loom import`` and every reader of a bundle
    hung on one (``loom replay`` alone refused it). Refused as no regular file, which a bundle
    is, and an import of it creates no database; a FIFO in a folder is passed over."""
    url, ids = source
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    target = tmp_path / "target.db"
    db = ["--db", f"sqlite:///{target}"] if command == "import" else []
    try:
        result = _loom(*command.split(), str(fifo), *db, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"loom {command} waited on a FIFO for {BOUND} s")
    assert result.returncode != ExitCode.OK, result.stdout
    assert "not a regular file" in result.stderr, result.stderr
    assert not target.exists()

    # control: a folder holding the FIFO and a bundle imports the bundle
    bundle = tmp_path / "one.json"
    assert _invoke("export", ids[0], "-o", str(bundle), "--db", url).exit_code == ExitCode.OK
    done = _loom(*command.split(), str(tmp_path if db else bundle), *db, cwd=tmp_path)
    assert done.returncode == ExitCode.OK, done.stderr
    if db:
        assert _executions(f"sqlite:///{target}") == [ids[0]]


def test_an_import_its_redactor_refuses_creates_no_database(tmp_path: Path) -> None:
    """A bundle whose decision key holds a secret (recorded by a log without a redactor) is
    refused by the importing log's redactor: the command said so, but had created the database
    first, though every file was unusable. The pre-read checks what the import refuses."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    secret = "Bearer abcdefghijklmnopqrstuvwxyz0123456789ABCD"
    with Loom(url, redactor=None) as loom:

        @loom.flow("f")
        def f(ctx: object) -> int:
            return ctx.decide(secret, lambda: 1)  # type: ignore[attr-defined]

        @loom.flow("g")
        def g(ctx: object) -> int:
            return ctx.decide("plain", lambda: 2)  # type: ignore[attr-defined]

        refused = tmp_path / "secret.json"
        loom.export(loom.run("f").execution_id, refused)
        good_id = loom.run("g").execution_id
        good = tmp_path / "good.json"
        loom.export(good_id, good)
    target = tmp_path / "target.db"
    result = _invoke("import", str(refused), "--db", f"sqlite:///{target}", "--json")
    assert result.exit_code == ExitCode.FAILED, result.output
    assert [r["status"] for r in json.loads(result.stdout)] == ["failed"]
    assert secret not in result.output
    assert not target.exists()
    # control: with a usable bundle after it, that one is imported and the secret one is not
    result = _invoke("import", str(refused), str(good), "--db", f"sqlite:///{target}", "--json")
    assert result.exit_code == ExitCode.FAILED, result.output
    assert [r["status"] for r in json.loads(result.stdout)] == ["failed", "imported"]
    assert _executions(f"sqlite:///{target}") == [str(good_id)]


def test_a_bundle_over_the_cap_or_cut_short_is_replaced_as_a_bundle(
    tmp_path: Path, source: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal above told a bundle by reading it whole, under the size cap: a bundle over
    the cap, or one an interrupted copy cut short, was "not a bundle" and could not be
    exported over (a regression review of this change). A bundle is told by how it begins; a
    test's own recording is rewritten whatever it holds (a merge left it conflicted)."""
    from loom_runtime.bundle import read_bundle, write_bundle

    url, ids = source
    target = tmp_path / "big.json"
    assert _invoke("export", ids[0], "-o", str(target), "--db", url).exit_code == ExitCode.OK
    monkeypatch.setenv("LOOM_MAX_BUNDLE_BYTES", str(target.stat().st_size // 2))
    again = _invoke("export", ids[1], "-o", str(target), "--db", url)
    assert again.exit_code == ExitCode.OK, again.output
    monkeypatch.delenv("LOOM_MAX_BUNDLE_BYTES")
    assert read_bundle(target).execution_id.hex == ids[1].replace("-", "")
    text = target.read_text()
    target.write_text(text[: len(text) // 2])  # cut short
    assert _invoke("export", ids[0], "-o", str(target), "--db", url).exit_code == ExitCode.OK
    bundle = read_bundle(target)
    target.write_text(f"<<<<<<< HEAD\n{text}=======\n{text}>>>>>>> feature\n")
    with pytest.raises(FileExistsError):  # the control: conflict markers are no bundle's start
        write_bundle(bundle, target)
    write_bundle(bundle, target, over_any_file=True)  # the plugin's rewrite of its own file
    assert read_bundle(target) == bundle
