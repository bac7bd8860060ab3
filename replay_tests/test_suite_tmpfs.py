"""`scripts/test` puts the suite's temporary files on /dev/shm when it can (ADR 0031).

On a disk every SQLite commit in rollback-journal mode and every DDL transaction waits for an
fsync; on a RAM-backed tmpfs it returns at once, and the suite's databases all live under
``tmp_path``. Checked by running the script on a probe test: the temporary directory it saw,
whether the caller's own ``TMPDIR`` is kept, and that nothing is left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # runs scripts/test (ruff and a pytest session) twice

PROBE = """
import os, tempfile
from pathlib import Path

def test_where() -> None:
    Path(os.environ["LOOM_PROBE_OUT"]).write_text(tempfile.gettempdir())
"""


def _run(tmp_path: Path, **env: str) -> Path:
    probe = tmp_path / "probe" / "test_probe.py"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text(PROBE, encoding="utf-8")
    out = tmp_path / "where.txt"
    base = {key: value for key, value in os.environ.items() if key != "TMPDIR"}
    done = subprocess.run(
        ["bash", "scripts/test", "--quick", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=ROOT,
        env={**base, "LOOM_TEST_WORKERS": "0", "LOOM_PROBE_OUT": str(out), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(out.read_text(encoding="utf-8"))


def test_the_suite_runs_on_a_tmpfs_it_removes_afterwards(tmp_path: Path) -> None:
    if not os.access("/dev/shm", os.W_OK) or shutil.disk_usage("/dev/shm").free < 4 << 30:
        pytest.skip("no /dev/shm with 4 GiB free here: the script keeps the default")
    where = _run(tmp_path)
    assert where.parent == Path("/dev/shm") and where.name.startswith("loom-test."), where
    assert not where.exists(), "the script left its temporary directory behind"


def test_a_tmpdir_the_caller_chose_is_kept(tmp_path: Path) -> None:
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    assert _run(tmp_path, TMPDIR=str(chosen)) == chosen
