"""Writing a bundle replaces the file whole or not at all (ADR 0013).

``loom export -o`` and ``pytest --loom-update`` (which re-seals a committed recording) wrote
the new bundle over the old one in place: a write cut short (a full disk, a size limit, a
killed process) left neither bundle, only the first part of the new one. A bundle is now
written to a temporary file beside it and renamed over it once complete.

The cut is real: a child process writes with a file-size limit (``RLIMIT_FSIZE``) between
the old bundle's size and the new one's, so the write fails part way (``EFBIG``).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loom_runtime import Loom, MasterKey
from loom_runtime.bundle import read_bundle, write_bundle

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs RLIMIT_FSIZE")


def _exported(tmp_path: Path, name: str, *, size: int) -> Path:
    """A bundle of one execution whose one decision is ``size`` characters long."""
    with Loom(f"sqlite:///{tmp_path / f'{name}.db'}") as loom:

        @loom.flow("note")
        def note(ctx: object, size: int) -> int:
            return len(ctx.decide("text", lambda: "x" * size))  # type: ignore[attr-defined]

        run = loom.run("note", size=size)
        return loom.export(run.execution_id, tmp_path / f"{name}.json")


def test_a_write_cut_short_leaves_the_old_bundle_whole(tmp_path: Path) -> None:
    old = _exported(tmp_path, "old", size=1_000)
    new = _exported(tmp_path, "new", size=200_000)
    before, recorded = old.read_bytes(), read_bundle(old).execution_id
    limit = len(before) + 20_000  # room for more than the old bundle, not for the new one
    cut = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        from loom_runtime.bundle import read_bundle, write_bundle
        bundle = read_bundle(Path({str(new)!r}))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        try:
            write_bundle(bundle, Path({str(old)!r}))
        except OSError as exc:
            print(exc.errno)
        """
    )
    done = subprocess.run([sys.executable, "-c", cut], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "27", done.stderr  # EFBIG: the write really was cut short
    assert old.read_bytes() == before
    assert read_bundle(old).execution_id == recorded
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_written_bundle_keeps_the_files_mode_and_a_link_stays_a_link(tmp_path: Path) -> None:
    old = _exported(tmp_path, "old", size=10)
    new = read_bundle(_exported(tmp_path, "new", size=20))
    old.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(old.name)
    write_bundle(new, link)
    assert link.is_symlink()
    assert read_bundle(old).execution_id == new.execution_id
    assert stat.S_IMODE(old.stat().st_mode) == 0o640
    fresh = write_bundle(new, tmp_path / "fresh.json")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask


def test_a_bundle_into_a_folder_that_is_not_there_names_the_bundle(tmp_path: Path) -> None:
    """The error names the path asked for, not the hidden partial file the write goes
    through (``.b.json.1a2b3c4d.partial``), and keeps its type."""
    bundle = read_bundle(_exported(tmp_path, "b", size=5))
    target = tmp_path / "missing" / "b.json"
    with pytest.raises(FileNotFoundError) as refused:
        write_bundle(bundle, target)
    assert refused.value.filename == str(target)
    assert ".partial" not in str(refused.value)


def test_a_new_bundle_of_an_encrypted_log_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """A bundle holds the execution in clear (it replays with no key): exported from a log
    that keeps it sealed, a new file with the usual mode (0o666 less a umask of 022) let every
    user of the machine read what the log protects. Owner-only now; a clear log's bundle, and
    an existing file's mode, are as they were (above)."""
    key = MasterKey(bytes(range(32)))
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    umask = os.umask(0o022)
    try:
        with Loom(url, encryption=key) as loom:
            loom.flow("one")(lambda ctx: ctx.decide("a", lambda: "private"))
            run = loom.run("one")
            exported = loom.export(run.execution_id, tmp_path / "sealed.json")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    assert read_bundle(exported).execution_id == run.execution_id
